"""Autotuning (``pf.compile(..., tune=K)``): time the traffic model's K best tile choices, keep the fastest.

For one program at concrete sizes on one device, :func:`tune` runs four stages::

    rank    schedule with tile="auto" and a TileSearch of its own; cost.search.ranked_tiles gives up to K
            whole-program tile specifications, best modelled first (candidate 0 is the model's choice)
    build   each specification through the pipeline (schedule with that explicit tile -> codegen -> load)
    time    each on the same random arguments: WARMUP calls, then the median of up to REPEATS calls
            (at least MIN_REPEATS, stopping once a candidate has used BUDGET_S seconds), each timed with
            time.perf_counter around one call; CUDA calls return after the device synchronises and take
            device arrays, so no host copies are timed
    keep    the fastest; recorded in the tuning cache

The cache is one JSON file per key under ``cache_dir()/tuning/``, written to a temporary file and moved
into place with ``os.replace`` (atomic, like the compile cache). The key is the sha256 of: the program's
fingerprint (sha256 of its printed form), the target, the sizes, the device (CUDA: the GPU's name and
compute capability; C: the CPU model, CPU count, ``OMP_NUM_THREADS`` and the C compiler), K and the other
schedule options. A later tuning with the same key builds the recorded winner and times nothing. File
format (``"format": FORMAT``)::

    {"format": "polyfuse-tuning-1", "program": "gemm_acc", "fingerprint": "<sha256>", "target": "c",
     "sizes": {"K": 24, "M": 32, "N": 32}, "device": "...", "k": 3,
     "candidates": [{"rank": 0, "tile": {"S0": [32, 8], ...}, "seconds": 1.2e-05, "error": null}, ...],
     "winner": 0}

``seconds`` is the median (``null`` for a candidate that failed to build, whose ``error`` says why, and
for a single candidate, which is not timed). :data:`STATS` counts timings and cache hits in this process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from polyfuse.cost.search import Limits, TileSearch, ranked_tiles
from polyfuse.errors import PolyfuseError, RuntimeUnavailable
from polyfuse.ir.printer import format_size, format_statement
from polyfuse.ir.program import Program
from polyfuse.runtime import cpu
from polyfuse.runtime.cache import cache_dir, cache_key
from polyfuse.schedule import schedule as schedule_program

try:
    import polyfuse.runtime.cuda as cuda_runtime
except ModuleNotFoundError as e:  # the CUDA runtime is optional (and pycuda with it)
    if e.name not in ("polyfuse.runtime.cuda", "pycuda"):
        raise
    cuda_runtime = None

FORMAT = "polyfuse-tuning-1"
WARMUP = 1
MIN_REPEATS = 3
REPEATS = 7
BUDGET_S = 1.0


@dataclasses.dataclass
class TuningStats:
    """Counters for this process: candidates timed, and tunings answered from the cache."""

    timed: int = 0
    cache_hits: int = 0


STATS = TuningStats()


def check_tune(tune: Any) -> int:
    """``tune`` as a count of candidates (0: no tuning); :class:`PolyfuseError` unless an int >= 0 or None."""
    if tune is None:
        return 0
    if isinstance(tune, bool) or not isinstance(tune, (int, np.integer)):
        raise PolyfuseError(f"tune must be a number of candidates to time (an int >= 1, or 0/None for none), not {tune!r}")
    if tune < 0:
        raise PolyfuseError(f"tune must be a number of candidates to time (an int >= 1, or 0/None for none), not {tune}")
    return int(tune)


def require_device(target: str) -> None:
    """Raise unless tuning for ``target`` can time candidates here (CUDA: pycuda and a GPU)."""
    if target != "cuda":
        return
    reason = "pycuda is not installed" if cuda_runtime is None else cuda_runtime.unavailable_reason()
    if reason:
        raise RuntimeUnavailable(f"autotuning times candidates on a GPU: {reason} (use tune=None, or target='c' to tune on the CPU)")


def fingerprint(program: Program) -> str:
    """sha256 of the program's printed form (as ``str(program)`` lays it out), with every isl set and map
    printed after ``coalesce().remove_redundancies()``: isl simplifies its objects in place as they are
    used, so the plain printed form of a program changes once it has been scheduled."""
    lines = [f"program {program.name}({', '.join(program.arguments)}) [{program.filename}:{program.line}]",
             f"params: {', '.join(program.params)}", f"context: {_canonical(program.context)}"]
    lines += [f"array {a.name} {a.dtype.name}[{', '.join(map(format_size, a.shape))}] {a.role}" for a in program.arrays.values()]
    lines += [f"scalar {name} {dtype.name}" for name, dtype in program.scalars.items()]
    for st in program.statements:
        lines += [f"{format_statement(st)} (line {st.line})", f"domain {_canonical(st.domain)}"]
        lines += [f"{a.kind} {_canonical(a.relation)}" for a in st.accesses]
    lines.append(f"source schedule {_canonical(program.schedule.get_map())}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _canonical(obj: Any) -> str:
    return str(obj.coalesce().remove_redundancies())


def device_name(target: str) -> str:
    """The device candidates are timed on, as the cache key records it."""
    if target == "cuda":
        require_device(target)
        assert cuda_runtime is not None
        return cuda_runtime.device_name()
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = os.environ.get("OMP_NUM_THREADS", "")
    cc = " ".join(cpu.compiler_identity(cpu.compiler()).split())
    return f"{model}; {os.cpu_count()} cpus; OMP_NUM_THREADS={threads}; {cc}"


def tuning_path(program: Program, target: str, sizes: Mapping[str, int], k: int, options: Mapping[str, Any]) -> Path:
    """Where the tuning cache keeps the winner for this key (it may not exist yet)."""
    others = {name: str(value) for name, value in options.items() if name not in ("tile", "params")}
    key = cache_key(FORMAT, fingerprint(program), target, json.dumps(dict(sorted(sizes.items()))),
                    device_name(target), str(k), json.dumps(others, sort_keys=True))
    return cache_dir() / "tuning" / f"{key}.json"


def tune(
    program: Program,
    target: str,
    options: Mapping[str, Any],
    sizes: Mapping[str, int],
    k: int,
    build: Callable[[Mapping[str, Any]], Any],
) -> Any:
    """The fastest of the model's ``k`` best tile choices for ``program`` at ``sizes``, built.

    ``build(options)`` runs the pipeline with those schedule options (``tile`` set to one candidate's dict)
    and returns its ``Compiled`` value; the result is that of the winner, its schedule's notes extended
    with the candidates and their timings. Raises :class:`PolyfuseError` when a size is missing and
    :class:`RuntimeUnavailable` when CUDA cannot be timed here.
    """
    require_device(target)
    missing = [p for p in program.params if p not in sizes]
    if missing:
        raise PolyfuseError(f"tune={k} needs a value for every size of {program.name}: missing {', '.join(missing)} "
                            "(give them with params= or call the executable with them)")
    sizes = {p: int(sizes[p]) for p in program.params}
    path = tuning_path(program, target, sizes, k, options)
    record = _read(path, k)
    if record is not None:
        STATS.cache_hits += 1
        winner = record["candidates"][record["winner"]]
        compiled = build({**options, "tile": _tile(winner["tile"])})
        return _noted(compiled, _notes(record, cached=True))
    specs = _candidates(program, target, options, sizes, k)
    built: list[Any] = []
    rows: list[dict[str, Any]] = []
    for rank, spec in enumerate(specs):
        row: dict[str, Any] = {"rank": rank, "tile": {s: list(v) for s, v in spec.items()}, "seconds": None, "error": None}
        try:
            built.append(build({**options, "tile": spec}))
        except PolyfuseError as e:
            row["error"] = f"{type(e).__name__}: {e}"
            built.append(None)
        rows.append(row)
    ok = [i for i, c in enumerate(built) if c is not None]
    if not ok:
        raise PolyfuseError(f"autotuning {program.name}: no candidate could be built: {rows[0]['error']}")
    if len(ok) > 1:
        arguments = _arguments(program, built[ok[0]].code, sizes, target)
        for i in ok:
            rows[i]["seconds"] = _time(built[i], arguments)
    winner = min(ok, key=lambda i: (rows[i]["seconds"] or 0.0, i))
    record = {"format": FORMAT, "program": program.name, "fingerprint": fingerprint(program), "target": target,
              "sizes": sizes, "device": device_name(target), "k": k, "candidates": rows, "winner": winner}
    _write(path, record)
    return _noted(built[winner], _notes(record, cached=False))


def _candidates(program: Program, target: str, options: Mapping[str, Any], sizes: Mapping[str, int], k: int) -> list[dict[str, tuple[int, ...]]]:
    """Up to ``k`` tile specifications, best modelled first (see :func:`polyfuse.cost.search.ranked_tiles`)."""
    search = TileSearch(program, target, sizes, Limits())
    ranking = {name: value for name, value in options.items() if name not in ("tile", "params")}
    sched = schedule_program(program, target=target, tile="auto", params=dict(sizes), tile_search=search, **ranking)
    return ranked_tiles(search, [kern.statements for kern in sched.kernels], k) or [{}]


def _arguments(program: Program, code: Any, sizes: Mapping[str, int], target: str) -> list[Any]:
    """Random values for ``code.signature`` (the same for every candidate: their signatures agree)."""
    rng = np.random.default_rng(0)
    out: list[Any] = []
    for arg in code.signature:
        if arg.kind == "size":
            out.append(sizes[arg.name])
        elif arg.kind == "scalar":
            out.append(arg.dtype.numpy(rng.uniform(0.5, 1.5)) if arg.dtype.is_float else arg.dtype.numpy(rng.integers(1, 8)))
        else:
            array = program.arrays[arg.name]
            shape = array.concrete_shape(sizes)
            value = rng.uniform(0.5, 1.5, shape) if array.dtype.is_float else rng.integers(1, 8, shape)
            value = np.ascontiguousarray(np.asarray(value).astype(array.dtype.numpy))
            out.append(cuda_runtime.to_device(value) if target == "cuda" and cuda_runtime is not None else value)
    return out


def _time(compiled: Any, arguments: list[Any]) -> float:
    """Median seconds of one call of ``compiled.function`` on ``arguments`` (see the module docstring)."""
    STATS.timed += 1
    function = compiled.function
    for _ in range(WARMUP):
        function(*arguments)
    times: list[float] = []
    while len(times) < REPEATS and (len(times) < MIN_REPEATS or sum(times) < BUDGET_S):
        start = time.perf_counter()
        function(*arguments)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _read(path: Path, k: int) -> dict[str, Any] | None:
    """The record at ``path`` when it is present and well formed, else None (the key is then re-tuned)."""
    try:
        record = json.loads(path.read_text())
        winner = record["candidates"][record["winner"]]
        _tile(winner["tile"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return record if record.get("format") == FORMAT and record.get("k") == k else None


def _write(path: Path, record: Mapping[str, Any]) -> None:
    """Write ``record`` to ``path`` atomically (a temporary file in the same directory, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _tile(spec: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    return {str(s): tuple(int(v) for v in sizes) for s, sizes in spec.items()}


def _describe(spec: Mapping[str, Any]) -> str:
    groups: dict[tuple[int, ...], list[str]] = {}
    for s, sizes in spec.items():
        groups.setdefault(tuple(sizes), []).append(s)
    return "; ".join(f"{','.join(stmts)}: {'x'.join(map(str, sizes))}" for sizes, stmts in groups.items()) or "model default"


def _notes(record: Mapping[str, Any], cached: bool) -> list[str]:
    rows = record["candidates"]
    winner = rows[record["winner"]]
    how = "from the tuning cache, nothing timed" if cached else f"timed on {record['device']}"
    notes = [f"autotuning (tune={record['k']}): chose candidate {winner['rank']} of {len(rows)} ({_describe(winner['tile'])}), {how}"]
    for row in rows:
        result = (f"failed: {row['error']}" if row["error"] else
                  "not timed (the only candidate)" if row["seconds"] is None else f"{row['seconds'] * 1e3:.4g} ms median")
        label = "the model's choice" if row["rank"] == 0 else f"model rank {row['rank']}"
        notes.append(f"autotuning candidate {row['rank']} ({label}) {_describe(row['tile'])}: {result}")
    return notes


def _noted(compiled: Any, notes: list[str]) -> Any:
    """``compiled`` with ``notes`` appended to its schedule's notes (shown by ``explain()``)."""
    sched = compiled.schedule
    return dataclasses.replace(compiled, schedule=dataclasses.replace(sched, notes=tuple(sched.notes) + tuple(notes)))
