"""polyfuse benchmarks: ``python -m benchmarks run [--target c|cuda] [--quick]``.

Each module here that defines ``TARGET`` (``"c"`` or ``"cuda"``) and ``run(quick: bool) -> dict`` is a
benchmark; ``run`` measures, writes ``benchmarks/results/<name>.json`` and ``.md``, and returns the results.
``--quick`` runs at small sizes in seconds (CI uses it) and writes ``<name>_quick.*`` so that the full-size
results kept in the repository are not overwritten.
"""
