"""The differential check behind the fuzzer and every regression test it writes.

:func:`check_source` takes a program's DSL source, loads it the way a user's file is loaded (written to a
``.py`` file and imported, so the frontend reads real source), runs :func:`pf.reference` on random data and
compares every C variant ``(fusion, tile)`` with it. The C variants of one program are compiled by a single
compiler run: their translation units are merged (one shared prelude, each entry point renamed), which is
what keeps thousands of variants affordable; arguments are marshalled exactly as
:class:`polyfuse.compile.Executable` does (``bind`` checks them, temporaries are allocated per variant).
:func:`cuda_variants` produces the CUDA code of a program, which :func:`check_cuda_batch` compiles with
one nvcc run for many programs and runs through the CPU emulation of ``tests/test_codegen_cuda.py``.

On a failure, :func:`save_regression` writes ``tests/regressions/test_fuzz_<hash>.py``: the program's
source as a top-level ``@pf.program`` plus a test calling :func:`check_program` on it.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import polyfuse as pf
from polyfuse.codegen.code import Code
from polyfuse.runtime import cpu
from polyfuse.runtime.args import bind

FUSIONS = ("none", "min", "max", "smart")
TILES = ("auto", None)
ALL_CONFIGS = tuple(itertools.product(FUSIONS, TILES))
REGRESSIONS = Path(__file__).resolve().parent.parent / "regressions"
TOLERANCE = {"f32": 2e-4, "f64": 1e-9}

_counter = itertools.count()
_workdir: Path | None = None


def workdir() -> Path:
    """A per-process scratch directory for generated modules and merged libraries."""
    global _workdir
    if _workdir is None:
        _workdir = Path(tempfile.mkdtemp(prefix="polyfuse-fuzz-"))
    return _workdir


def load_source(source: str, name: str = "fuzzed") -> pf.Program:
    """Write ``source`` to a fresh module file, import it, and return its program ``name``."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module = f"pf_fuzz_{digest}_{next(_counter)}"
    path = workdir() / f"{module}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(module, None)
    return getattr(mod, name)


# ----- inputs and comparison ------------------------------------------------------------------------


def make_inputs(prog: pf.Program, sizes: Mapping[str, int], seed: int) -> dict[str, Any]:
    """Random arguments at ``sizes``: floats in [-1, 1), ints in [-20, 20]; sizes as keywords."""
    rng = np.random.default_rng(seed)
    kwargs: dict[str, Any] = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            shape = a.concrete_shape(sizes)
            x = rng.uniform(-1, 1, shape) if a.dtype.is_float else rng.integers(-20, 21, shape)
            kwargs[name] = np.ascontiguousarray(x, dtype=a.dtype.numpy)
        else:
            kwargs[name] = prog.scalars[name].numpy(0.75 if prog.scalars[name].is_float else 2)
    kwargs.update({p: sizes[p] for p in prog.params})
    return kwargs


def copy_args(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


def compare(prog: pf.Program, got: Mapping[str, Any], expected: Mapping[str, Any], what: str) -> None:
    """Every array argument equal (ints) or close relative to its largest value (floats)."""
    for name in prog.arguments:
        if name not in prog.arrays:
            continue
        a, b = got[name], expected[name]
        dt = prog.arrays[name].dtype.name
        if dt == "i32":
            if not np.array_equal(a, b):
                bad = np.argwhere(a != b)[:5].tolist()
                raise AssertionError(f"{what}: {name} differs from the reference at {bad}")
            continue
        tol = TOLERANCE[dt]
        finite = np.isfinite(b)
        scale = max(1.0, float(np.max(np.abs(b[finite]))) if finite.any() else 1.0)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=f"{what}: {name}")


# ----- C variants through one compiler run -----------------------------------------------------------


@dataclass
class Variant:
    tag: str
    fusion: str
    tile: Any
    code: Code


def c_variants(prog: pf.Program, sizes: Mapping[str, int], configs: Iterable[tuple[str, Any]]) -> list[Variant]:
    """Schedule and generate C for every ``(fusion, tile)``, specialised to ``sizes`` as Executable does.

    Two faults that give no wrong result are failures here too: a policy that found no legal schedule
    (``pf.schedule`` then falls back to the source order with a warning: a bug of the scheduler that the
    legality check caught), and a dependence relation whose meaning changed while the variants were
    scheduled (isl must never be handed the maps every pass reads: ``scheduler.detached``)."""
    params = {p: sizes[p] for p in prog.params}
    before = _dependence_texts(prog)
    out = []
    for fusion, tile in configs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sched = pf.schedule(prog, target="c", fusion=fusion, tile=tile, params=params)
        for w in caught:
            if "gave no legal schedule" in str(w.message):
                raise AssertionError(f"{prog.name} fusion={fusion} tile={tile} sizes={sizes}: {w.message}")
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)  # (the others as they were)
        out.append(Variant(f"{fusion}_{tile or 'none'}".replace("auto", "a"), fusion, tile, pf.codegen(sched)))
    _check_dependences_kept(prog, before, params)
    return out


def _dependence_texts(prog: pf.Program) -> list[tuple[str, str, str, str, str]]:
    from polyfuse.schedule.deps import dependences_of  # noqa: PLC0415

    return [(d.kind, d.source, d.sink, d.array, d.relation.to_str()) for d in dependences_of(prog)]


def _check_dependences_kept(prog: pf.Program, before: Sequence[tuple[str, str, str, str, str]],
                            sizes: Mapping[str, int]) -> None:
    """Raise AssertionError when a dependence of ``prog`` no longer means what it meant in ``before``.

    isl may rewrite a shared map's constraints in place without changing its meaning (dropping a
    redundant ``M >= 2``), so unequal text is not a fault. Each relation is compared exactly at the fuzzed
    ``sizes`` (cheap: the maps are then finite), then symbolically under an isl operation budget: on maps
    with many ``%`` and ``//`` divisions isl's ``is_equal`` can take minutes, and past the budget the
    comparison at ``sizes`` stands."""
    import islpy as isl  # noqa: PLC0415

    from polyfuse.schedule.deps import dependences_of  # noqa: PLC0415

    for (kind, source, sink, array, text), dep in zip(before, dependences_of(prog)):
        if dep.relation.to_str() == text:
            continue
        was = isl.Map.read_from_str(dep.relation.get_ctx(), text)
        if _fixed(was, sizes).is_equal(_fixed(dep.relation, sizes)) and _equal_within_budget(was, dep.relation):
            continue
        raise AssertionError(f"{prog.name}: the {kind} dependence {source} -> {sink} on {array} changed meaning "
                             f"while it was scheduled: {text} became {dep.relation}")


_EQUALITY_BUDGET = 5_000_000
"""isl operations the symbolic comparison of one dependence relation may take (a few seconds)."""


def _fixed(relation: Any, sizes: Mapping[str, int]) -> Any:
    """``relation`` with every parameter named in ``sizes`` fixed to its value."""
    import islpy as isl  # noqa: PLC0415

    for name, value in sizes.items():
        at = relation.find_dim_by_name(isl.dim_type.param, name)
        if at >= 0:
            relation = relation.fix_val(isl.dim_type.param, at, isl.Val.int_from_si(relation.get_ctx(), value))
    return relation


def _equal_within_budget(a: Any, b: Any) -> bool:
    """``a.is_equal(b)``, or ``True`` when isl cannot decide within :data:`_EQUALITY_BUDGET` operations."""
    import islpy as isl  # noqa: PLC0415

    from polyfuse.schedule.bands import QUOTA_MESSAGE  # noqa: PLC0415

    ctx = a.get_ctx()
    saved = ctx.get_max_operations()
    ctx.set_max_operations(_EQUALITY_BUDGET)
    ctx.reset_operations()
    try:
        return a.is_equal(b)
    except isl.Error as e:
        if QUOTA_MESSAGE not in str(e):
            raise
        return True
    finally:
        ctx.set_max_operations(saved)
        ctx.reset_operations()


_ENTRY = re.compile(r"^void (\w+)\(", re.M)


def merged_unit(variants: Sequence[tuple[str, Code]]) -> tuple[str, dict[str, str]]:
    """One C translation unit holding every variant: the preludes (includes, macros, static helpers:
    whole definitions, see :func:`_prelude_items`) merged without repeats, each entry point renamed
    ``<tag>__<entry>``."""
    prelude: list[str] = []
    bodies: list[str] = []
    names: dict[str, str] = {}
    for tag, code in variants:
        m = _ENTRY.search(code.text)
        if m is None or m.group(1) != code.entry:
            raise AssertionError(f"cannot find the entry point {code.entry!r} in the generated C of {tag}")
        head, body = code.text[: m.start()], code.text[m.start():]
        for item in _prelude_items(head):
            if item not in prelude:
                prelude.append(item)
        renamed = f"{tag}__{code.entry}"
        names[tag] = renamed
        bodies.append(f"/* ===== {tag} ===== */\n" + body.replace(f"void {code.entry}(", f"void {renamed}(", 1))
    return "\n".join(prelude) + "\n\n" + "\n".join(bodies), names


def _prelude_items(head: str) -> list[str]:
    """The top-level items of a prelude, each whole: a preprocessor line, a ``#if ... #endif`` block, or a
    declaration or definition up to its closing ``;`` or ``}`` (multi-line helpers share lines such as
    ``{`` with each other, so merging line by line would tear them apart). Top-level comments are dropped."""
    items: list[str] = []
    current: list[str] = []
    depth = conditional = 0
    for line in head.splitlines():
        text = line.strip()
        if not current and (not text or text.startswith(("/*", "*"))):
            continue
        current.append(line)
        if text.startswith("#if"):
            conditional += 1
        elif text.startswith("#endif"):
            conditional -= 1
        depth += line.count("{") - line.count("}")
        if depth == 0 and conditional == 0 and (text.startswith("#") or text.endswith(("}", ";"))):
            items.append("\n".join(current))
            current = []
    if current:
        items.append("\n".join(current))
    return items


def build_merged(variants: Sequence[tuple[str, Code]]) -> tuple[ctypes.CDLL, dict[str, str]]:
    """Compile the merged unit once (through the compile cache) with the C runtime's compiler and flags."""
    text, names = merged_unit(variants)
    return cpu.load_library(text), names


def call_variant(lib: ctypes.CDLL, entry: str, code: Code, prog: pf.Program, kwargs: Mapping[str, Any]) -> None:
    """Call one renamed entry point with ``kwargs`` bound and marshalled as ``Executable.__call__`` does."""
    bound = bind(prog, kwargs)
    temporaries = {
        name: np.empty(prog.arrays[name].concrete_shape(bound.sizes), prog.arrays[name].dtype.numpy) for name in code.temporaries
    }
    fn = getattr(lib, entry)
    fn.restype = None
    fn.argtypes = [cpu._ctype(a) for a in code.signature]
    values = []
    for a in code.signature:
        if a.kind == "size":
            values.append(int(bound.sizes[a.name]))
        elif a.kind == "scalar":
            values.append(cpu._converter(a)(bound.scalars[a.name]))
        elif a.name in bound.arrays:
            values.append(bound.arrays[a.name].ctypes.data)
        else:
            values.append(temporaries[a.name].ctypes.data)
    fn(*values)


def check_program(
    prog: pf.Program,
    sizes: Mapping[str, int],
    seed: int = 0,
    configs: Iterable[tuple[str, Any]] = ALL_CONFIGS,
    through_compile: tuple[str, Any] | None = None,
) -> list[Variant]:
    """Compare every C variant of ``prog`` (and, with ``through_compile``, one variant run by
    ``pf.compile`` itself) with the reference interpreter at ``sizes``; raises AssertionError."""
    sizes = {p: sizes[p] for p in prog.params}
    args = make_inputs(prog, sizes, seed)
    expected = copy_args(args)
    pf.reference(prog)(**expected)
    variants = c_variants(prog, sizes, configs)
    unique: dict[str, Variant] = {}
    for v in variants:
        unique.setdefault(v.code.text, v)
    lib, names = build_merged([(v.tag, v.code) for v in unique.values()])
    for v in variants:
        rep = unique[v.code.text]
        got = copy_args(args)
        call_variant(lib, names[rep.tag], v.code, prog, got)
        compare(prog, got, expected, f"{prog.name} fusion={v.fusion} tile={v.tile} sizes={sizes} seed={seed}")
    if through_compile is not None:
        fusion, tile = through_compile
        got = copy_args(args)
        pf.compile(prog, target="c", fusion=fusion, tile=tile)(**got)
        compare(prog, got, expected, f"{prog.name} pf.compile fusion={fusion} tile={tile} sizes={sizes} seed={seed}")
    return variants


def check_source(source: str, sizes: Mapping[str, int], seed: int = 0, configs: Iterable[tuple[str, Any]] = ALL_CONFIGS,
                 name: str = "fuzzed", through_compile: tuple[str, Any] | None = None) -> pf.Program:
    prog = load_source(source, name)
    check_program(prog, sizes, seed, configs, through_compile)
    return prog


# ----- CUDA: nvcc on many programs at once, then CPU emulation -------------------------------------


def cuda_variants(prog: pf.Program, configs: Iterable[tuple[str, Any]]) -> list[Variant]:
    out = []
    for fusion, tile in configs:
        sched = pf.schedule(prog, target="cuda", fusion=fusion, tile=tile)
        out.append(Variant(f"{fusion}_{tile or 'none'}".replace("auto", "a"), fusion, tile, pf.codegen(sched)))
    return out


@dataclass
class CudaCase:
    """One program's CUDA variants with what is needed to emulate and to report it."""

    key: str
    source: str
    prog: pf.Program
    sizes: dict[str, int]
    seed: int
    variants: list[Variant]


def nvcc_failures(cases: Sequence[CudaCase], tmp: Path) -> dict[str, str]:
    """Compile every variant of every case with one nvcc run; ``{case key: error}`` for the cases whose
    code nvcc rejects (found by bisecting on the error's line numbers). Empty when nvcc is missing."""
    nvcc = shutil.which("nvcc")
    if nvcc is None or not cases:
        return {}
    from tests.test_codegen_cuda import _unit  # one prelude, kernels renamed per variant

    units = [(f"{c.key}_{v.tag}", v.code.text) for c in cases for v in c.variants]
    text = _unit(units)
    src = tmp / "fuzz_all.cu"
    src.write_text(text)
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp / "fuzz_all.ptx"), str(src)], capture_output=True, text=True)
    if out.returncode == 0:
        return {}
    starts = [(text[: text.index(f"/* ===== {tag} ===== */")].count("\n") + 1, tag) for tag, _ in units]
    failures: dict[str, str] = {}
    for m in re.finditer(r"\((\d+)\): error: (.*)", out.stderr):
        line = int(m.group(1))
        tag = max((s for s in starts if s[0] <= line), default=starts[0])[1]
        key = next(c.key for c in cases if tag.startswith(c.key + "_"))
        failures.setdefault(key, f"{tag}: {m.group(2)}")
    return failures or {cases[0].key: out.stderr[-2000:]}


def emulate_cases(cases: Sequence[CudaCase], tmp: Path) -> dict[str, str]:
    """Run every variant in the CUDA simulator (races, out-of-bounds indices and barriers checked; one g++
    run for all); ``{case key: mismatch or simulator report}``."""
    from polyfuse.runtime import cuda_sim
    from tests.test_codegen_cuda import build_emulator, emulate

    if not cuda_sim.available() or not cases:
        return {}
    sims = build_emulator([(f"{c.key}_{v.tag}", v.code) for c in cases for v in c.variants])
    failures: dict[str, str] = {}
    for c in cases:
        args = make_inputs(c.prog, c.sizes, c.seed)
        expected = copy_args(args)
        pf.reference(c.prog)(**expected)
        for v in c.variants:
            got = copy_args(args)
            what = f"cuda simulation fusion={v.fusion} tile={v.tile} sizes={c.sizes} seed={c.seed}"
            try:
                emulate(sims, f"{c.key}_{v.tag}", v.code, got, {p: c.sizes[p] for p in c.prog.params})
                compare(c.prog, got, expected, what)
            except pf.SimulationError as e:
                failures.setdefault(c.key, f"{what}: {str(e)[:2000]}")
            except AssertionError as e:
                failures.setdefault(c.key, str(e)[:2000])
    return failures


# ----- regression files ------------------------------------------------------------------------------

REGRESSION_TEMPLATE = '''\
"""Found by the differential fuzzer (tests/fuzz): {summary}

{explanation}
"""

{source}

SIZES = {sizes!r}
SEED = {seed!r}


def test_{slug}():
    from tests.fuzz.harness import {checker}

    {checker}({name}, SIZES, SEED{extra})
'''


def save_regression(source: str, sizes: Mapping[str, Any], seed: int, error: BaseException | str, kind: str = "c",
                    directory: Path = REGRESSIONS) -> Path:
    """Write ``test_fuzz_<hash>.py`` holding ``source`` and a test that re-runs the failing check."""
    digest = hashlib.sha256(f"{kind}\n{source}".encode()).hexdigest()[:10]
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    summary = f"{type(error).__name__ if not isinstance(error, str) else kind}: {first}"[:300]
    checker = "check_program" if kind == "c" else "check_cuda_program"
    body = source.replace("import polyfuse as pf\n", "import polyfuse as pf\n", 1)
    text = REGRESSION_TEMPLATE.format(
        summary=summary.replace('"""', "'''"),
        explanation=textwrap.fill("Root cause: (to be filled in when fixed).", 100),
        source=body.rstrip("\n"),
        sizes={k: int(v) for k, v in sizes.items()},
        seed=seed,
        slug=f"fuzz_{digest}",
        checker=checker,
        name="fuzzed",
        extra="",
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"test_fuzz_{digest}.py"
    path.write_text(text)
    return path


def check_cuda_program(prog: pf.Program, sizes: Mapping[str, int], seed: int = 0, configs: Iterable[tuple[str, Any]] = ALL_CONFIGS) -> None:
    """nvcc and the CPU emulation on every CUDA variant of ``prog`` (used by CUDA regression files)."""
    case = CudaCase("r", "", prog, dict(sizes), seed, cuda_variants(prog, configs))
    with tempfile.TemporaryDirectory() as d:
        failures = nvcc_failures([case], Path(d)) or emulate_cases([case], Path(d))
    assert not failures, failures
