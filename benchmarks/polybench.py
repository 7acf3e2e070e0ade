"""PolyBench-style kernels against the polyhedral compilers users know: ``python -m benchmarks polybench``.

Every kernel of ``tests/kernels/*.c`` (PolyBench/C 4.2.1-style SCoPs, written from the algorithms) at the
dataset sizes of PolyBench 4.2.1 (:data:`SIZES`), built five ways and called through ctypes on the same
inputs:

* ``gcc``: the original function, ``gcc -O3 -march=native -fopenmp`` (the baseline; it has no OpenMP
  pragma, so it runs on one thread);
* ``polly``: the original function, ``clang-16 -O3 -march=native -mllvm -polly``;
* ``polly-par``: the same plus ``-mllvm -polly-parallel -fopenmp`` (linked with libgomp, the one OpenMP
  runtime of the process);
* ``pluto``: Pluto's ``polycc --tile --parallel`` output (the scop region macro-expanded first, since
  clan does not run the preprocessor) built by ``gcc -O3 -march=native -fopenmp``;
* ``polyfuse``: ``pf.from_c`` + ``pf.compile(..., target="c", params=sizes, threads=T)``, bound once with
  ``exe.prepare(...)`` as the peers' ctypes calls are (each timed call is then one C call; a checked
  ``exe(...)`` call adds about 7 microseconds of Python, which sub-millisecond kernels would show).

A peer whose compiler is not installed is skipped; one that fails to build, or whose result differs from
gcc's, is reported with the reason and never timed (a polyfuse failure is reported the same way).

Timing (per size and thread count, implementations interleaved in rounds, the order rotating): each
implementation's turn in a round is an idle pause (``idle_s``, 0.1 s: OpenMP's workers go to sleep), one
timed call (the *cold* call: what a program that calls the kernel now and then pays), then ``inner`` timed
calls directly after it (the *warm*, back-to-back calls; ``inner`` makes that sample last about
``sample_s``). Inputs are restored (untimed) before the cold call; the warm calls run on the previous call's
output, as repeated calls of an in-place kernel do. A cold call slower than ``SLOW_S`` is its own warm
sample (waking a thread pool costs milliseconds, nothing at that scale). The thread count is set with
``omp_set_num_threads`` for the peers and ``threads=`` for polyfuse. Speedups are ``gcc time / time``
paired within a round (median over the rounds); geomeans are over the kernels.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from benchmarks import harness, peers

ROOT = Path(__file__).resolve().parent.parent
STEM = "polybench"
IMPLS = ("gcc", "polly", "polly-par", "pluto", "polyfuse")
LABELS = {"gcc": "gcc -O3", "polly": "Polly", "polly-par": "Polly parallel", "pluto": "Pluto", "polyfuse": "polyfuse"}
CLANG = "clang-16"
CLANG_FLAGS = ("-O3", "-march=native", "-mllvm", "-polly")
CLANG_PAR_FLAGS = (*CLANG_FLAGS, "-mllvm", "-polly-parallel", "-fopenmp=libgomp")
PLUTO_OPTIONS = ("--tile", "--parallel")
SLOW_S = 1.0

# PolyBench/C 4.2.1's dataset sizes (its <kernel>.h headers): macro -> value per dataset.
_D = ("MINI", "SMALL", "MEDIUM", "LARGE")
_TABLE: dict[str, tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]] = {
    "correlation": (("M", "N"), ((28, 32), (80, 100), (240, 260), (1200, 1400))),
    "covariance": (("M", "N"), ((28, 32), (80, 100), (240, 260), (1200, 1400))),
    "gemm": (("NI", "NJ", "NK"), ((20, 25, 30), (60, 70, 80), (200, 220, 240), (1000, 1100, 1200))),
    "gemver": (("N",), ((40,), (120,), (400,), (2000,))),
    "gesummv": (("N",), ((30,), (90,), (250,), (1300,))),
    "symm": (("M", "N"), ((20, 30), (60, 80), (200, 240), (1000, 1200))),
    "syr2k": (("M", "N"), ((20, 30), (60, 80), (200, 240), (1000, 1200))),
    "syrk": (("M", "N"), ((20, 30), (60, 80), (200, 240), (1000, 1200))),
    "trmm": (("M", "N"), ((20, 30), (60, 80), (200, 240), (1000, 1200))),
    "2mm": (("NI", "NJ", "NK", "NL"), ((16, 18, 22, 24), (40, 50, 70, 80), (180, 190, 210, 220), (800, 900, 1100, 1200))),
    "3mm": (("NI", "NJ", "NK", "NL", "NM"), ((16, 18, 20, 22, 24), (40, 50, 60, 70, 80), (180, 190, 200, 210, 220),
                                              (800, 900, 1000, 1100, 1200))),
    "atax": (("M", "N"), ((38, 42), (116, 124), (390, 410), (1900, 2100))),
    "bicg": (("M", "N"), ((38, 42), (116, 124), (390, 410), (1900, 2100))),
    "doitgen": (("NQ", "NR", "NP"), ((8, 10, 12), (20, 25, 30), (40, 50, 60), (140, 150, 160))),
    "mvt": (("N",), ((40,), (120,), (400,), (2000,))),
    "cholesky": (("N",), ((40,), (120,), (400,), (2000,))),
    "durbin": (("N",), ((40,), (120,), (400,), (2000,))),
    "gramschmidt": (("M", "N"), ((20, 30), (60, 80), (200, 240), (1000, 1200))),
    "lu": (("N",), ((40,), (120,), (400,), (2000,))),
    "ludcmp": (("N",), ((40,), (120,), (400,), (2000,))),
    "trisolv": (("N",), ((40,), (120,), (400,), (2000,))),
    "deriche": (("W", "H"), ((64, 64), (192, 128), (720, 480), (4096, 2160))),
    "floyd-warshall": (("N",), ((60,), (180,), (500,), (2800,))),
    "nussinov": (("N",), ((60,), (180,), (500,), (2500,))),
    "adi": (("TSTEPS", "N"), ((20, 20), (40, 60), (100, 200), (500, 1000))),
    "fdtd-2d": (("TMAX", "NX", "NY"), ((20, 20, 30), (40, 60, 80), (100, 200, 240), (500, 1000, 1200))),
    "heat-3d": (("TSTEPS", "N"), ((20, 10), (40, 20), (100, 40), (500, 120))),
    "jacobi-1d": (("TSTEPS", "N"), ((20, 30), (40, 120), (100, 400), (500, 2000))),
    "jacobi-2d": (("TSTEPS", "N"), ((20, 30), (40, 90), (100, 250), (500, 1300))),
    "seidel-2d": (("TSTEPS", "N"), ((20, 40), (40, 120), (100, 400), (500, 2000))),
}
SIZES: dict[str, dict[str, dict[str, int]]] = {
    k: {d: dict(zip(names, vals)) for d, vals in zip(_D, rows)} for k, (names, rows) in _TABLE.items()}


# ----- implementations -------------------------------------------------------------------------------------
@dataclass
class Impl:
    """One implementation of a kernel at one size: ``call()`` runs it on its own arrays, ``reset()``
    restores their inputs, ``result()`` is the arrays after a call."""

    name: str
    call: Callable[[], Any]
    reset: Callable[[], None]
    result: Callable[[], dict[str, np.ndarray]]
    setup_s: float = 0.0
    check_s: float = 0.0  # the checked call's time (at the most threads): calibrates slow calls


@dataclass
class Case:
    """A kernel at one dataset size: its implementations that passed the check, and why the others are absent."""

    kernel: str
    size: str
    sizes: dict[str, int]
    impls: list[Impl] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    polyfuse: dict[int, Callable[[], Any]] = field(default_factory=dict)  # threads -> call


def available(impl: str) -> str | None:
    """None when ``impl`` can be built here, else why not."""
    if impl in ("polly", "polly-par") and shutil.which(CLANG) is None:
        return f"{CLANG} not installed"
    if impl == "pluto" and polycc() is None:
        return "polycc not found (set POLYCC or put it on PATH)"
    if impl == "gcc" and shutil.which("gcc") is None:
        return "gcc not installed"
    return None


def polycc() -> str | None:
    """Pluto's driver: ``$POLYCC``, else ``polycc`` on the PATH (None: neither)."""
    for cand in (os.environ.get("POLYCC"), shutil.which("polycc")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _defined(name: str, dims: Mapping[str, int], arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The parts of a kernel's outputs that its inputs determine. Classical Gram-Schmidt with more columns
    than rows (PolyBench's gramschmidt: N > M at every dataset) meets columns that are already in the span
    of the previous ones: their residual is rounding noise, and the columns of Q past the M-th are that noise
    divided by its own norm, different for any order of the sums. They are left out of the comparison."""
    if name == "gramschmidt" and dims["N"] > dims["M"]:
        arrays = dict(arrays, Q=arrays["Q"][:, : dims["M"]])
    return arrays


def _tolerance(source: str, dtype: np.dtype) -> float:
    if np.issubdtype(dtype, np.integer):
        return 0.0
    return 1e-3 if dtype == np.float32 or re.search(r"#define\s+DATA_TYPE\s+float\b", source) else 1e-6


def pluto_source(path: Path, cache: Path, timeout_s: float = 300.0) -> str:
    """Pluto's ``--tile --parallel`` version of ``path``: the file with its macros expanded (clan reads the
    scop as written; ``#include`` lines are kept out of the expansion and put back), run through polycc.
    Cached by the expanded text. Raises RuntimeError with polycc's message when it fails."""
    tool = polycc()
    if tool is None:
        raise RuntimeError("polycc not found")
    text = path.read_text()
    lines = text.splitlines()
    includes = [ln for ln in lines if ln.lstrip().startswith("#include")]
    # the array-parameter macros stay as written (a self-referential macro is not expanded again), so that
    # the signature still reads as PolyBench's (peers.c_signature); their definitions are put back on top
    arrays = [ln.strip() for ln in lines if re.match(r"\s*#\s*define\s+POLYBENCH_\dD\(", ln)]
    keep = [f"-D{m.group(1)}({m.group(2)})={m.group(1)}({m.group(2)})"
            for m in (re.match(r"#\s*define\s+(POLYBENCH_\dD)\(([^)]*)\)", ln) for ln in arrays) if m]
    body = "\n".join(ln for ln in lines if not ln.lstrip().startswith("#include"))
    done = subprocess.run(["gcc", "-E", "-P", *keep, "-x", "c", "-"], input=body, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"preprocessing failed: {done.stderr.strip()[:300]}")
    expanded = "\n".join([*includes, *arrays]) + "\n" + done.stdout
    key = hashlib.sha256((expanded + " ".join(PLUTO_OPTIONS)).encode()).hexdigest()[:12]
    work = cache / f"pluto-{path.stem}-{key}"
    out = work / "out.c"
    if not out.exists():
        work.mkdir(parents=True, exist_ok=True)
        (work / "in.c").write_text(expanded)
        try:
            run = subprocess.run([tool, "in.c", *PLUTO_OPTIONS, "-o", "out.c"], cwd=work, capture_output=True, text=True,
                                 check=False, timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise RuntimeError(f"polycc ran past {timeout_s:.0f} s") from err
        if run.returncode != 0 or not out.exists():
            msg = " ".join((run.stderr.strip() or run.stdout.strip()).split())
            raise RuntimeError(f"polycc failed (status {run.returncode}): {msg[-300:]}")
    return out.read_text()


def build_case(name: str, size: str, impls: Sequence[str], threads: Sequence[int], cache: Path,
               sizes: Mapping[str, int] | None = None) -> Case:
    """Build and check every implementation of kernel ``name`` at dataset ``size`` (or the explicit
    ``sizes``). gcc's result is the reference; the others must match it."""
    import polyfuse as pf  # noqa: PLC0415
    from tests.kernels import BY_NAME, inputs  # noqa: PLC0415 (a source checkout's test data)

    dims = dict(sizes if sizes is not None else SIZES[name][size])
    kernel = dataclasses.replace(BY_NAME[name], sizes=MappingProxyType(dims))
    case = Case(name, size, dims)
    data = inputs(kernel)
    source = kernel.path.read_text()
    ints = {p: dims[p.upper()] for kind, p in peers.c_signature(source, kernel.function) if kind == "int"}
    arrays = {n: v for n, v in data.items() if isinstance(v, np.ndarray)}

    def fresh() -> tuple[dict[str, Any], Callable[[], None]]:
        args = {n: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for n, v in data.items()}

        def reset() -> None:
            for n, a in arrays.items():
                np.copyto(args[n], a)

        return args, reset

    def c_peer(impl: str) -> Impl:
        args, reset = fresh()
        if impl == "gcc":
            call = peers.c_function(kernel.path, kernel.function, kernel.defines, args, ints, cache)
        elif impl in ("polly", "polly-par"):
            call = peers.c_function(kernel.path, kernel.function, kernel.defines, args, ints, cache, compiler=CLANG,
                                    flags=CLANG_FLAGS if impl == "polly" else CLANG_PAR_FLAGS, tag=impl.replace("-", "_"))
        else:
            call = peers.c_function(kernel.path, kernel.function, kernel.defines, args, ints, cache,
                                    source=pluto_source(kernel.path, cache), tag="pluto")
        return Impl(impl, call, reset, lambda: args)

    def ours() -> Impl:
        prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
        params = {p: dims[p.upper()] for p in prog.params}
        args, reset = fresh()
        call_args = {n: args[n] for n in prog.arguments}
        for t in threads:
            exe = pf.compile(prog, target="c", params=params, threads=t)
            case.polyfuse[t] = exe.prepare(**call_args, **params)  # bound once, like the peers' ctypes calls
        first = case.polyfuse[max(threads)]
        return Impl("polyfuse", lambda: first(), reset, lambda: args)

    expected: dict[str, np.ndarray] | None = None
    for impl in impls:
        why = available(impl)
        if why is not None:
            case.skipped[impl] = why
            continue
        try:
            t0 = time.perf_counter()
            built = ours() if impl == "polyfuse" else c_peer(impl)
            built.setup_s = time.perf_counter() - t0
            built.reset()
            t0 = time.perf_counter()
            built.call()
            built.check_s = time.perf_counter() - t0
            got = _defined(name, dims, {n: np.array(a, copy=True) for n, a in built.result().items() if isinstance(a, np.ndarray)})
            if impl == "gcc":
                expected = got
            elif expected is not None:
                for n, want in expected.items():
                    peers.assert_close(got[n], want, _tolerance(source, want.dtype), f"{name} {size}: {impl}: {n}")
                    if not np.all(np.isfinite(got[n])) and np.all(np.isfinite(want)):
                        raise AssertionError(f"{n}: non-finite values")
        except Exception as err:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            case.skipped[impl] = f"{type(err).__name__}: {' '.join(str(err).split())}"[:400]
            continue
        case.impls.append(built)
    if expected is None:  # no reference: nothing is checked, so nothing is timed
        for impl in case.impls:
            case.skipped.setdefault(impl.name, "not checked: gcc's reference did not build")
        case.impls = []
    return case


# ----- timing ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    idle_s: float = 0.1
    sample_s: float = 0.02
    max_inner: int = 50
    budget_s: Mapping[str, float] = field(default_factory=lambda: {"MINI": 0.5, "SMALL": 2.0, "MEDIUM": 4.0, "LARGE": 8.0})
    min_rounds: Mapping[str, int] = field(default_factory=lambda: {"MINI": 2, "SMALL": 3, "MEDIUM": 3, "LARGE": 1})
    max_rounds: int = 15
    rounds: int | None = None  # exactly this many rounds
    # A close call gets more rounds: where polyfuse's median speedup over gcc (warm or cold) lies within
    # ``close_margin`` of 1 either way, rounds are added until there are ``close_rounds``, as long as the
    # added rounds take at most ``close_budget_s`` (a LARGE kernel's one round of one-second calls, paired
    # on a shared machine, can read 0.85 or 1.33 for the same code: jacobi-2d LARGE, session 28).
    close_margin: float = 1.5
    close_rounds: int = 5
    close_budget_s: float = 60.0
    cap_s: float = 60.0  # an implementation whose checked call took longer is not called again (see time_case)


_gomp: ctypes.CDLL | None = None


def set_threads(threads: int) -> None:
    """The calling thread's OpenMP thread count (libgomp, the runtime every implementation here links)."""
    global _gomp  # noqa: PLW0603
    if _gomp is None:
        _gomp = ctypes.CDLL("libgomp.so.1")
    _gomp.omp_set_num_threads(ctypes.c_int(threads))


def time_case(case: Case, threads: int, s: Settings) -> dict[str, Any]:
    """Interleaved rounds of cold + warm samples of every implementation of ``case`` at ``threads``."""
    set_threads(threads)
    calls = {i.name: (case.polyfuse[threads] if i.name == "polyfuse" else i.call) for i in case.impls}
    capped = {i.name: i.check_s for i in case.impls if i.check_s > s.cap_s}
    once: dict[str, float] = {}
    for impl in case.impls:  # calibration: a warm call each (slow calls: the checked call's time)
        if impl.name in capped:
            continue
        if impl.check_s >= SLOW_S:
            once[impl.name] = impl.check_s
            continue
        impl.reset()
        calls[impl.name]()
        best = math.inf
        for _ in range(3):  # the fastest of three: one call slowed by the machine must not set ``inner``
            t0 = time.perf_counter()
            calls[impl.name]()
            best = min(best, time.perf_counter() - t0)
        once[impl.name] = best
    inner = {n: 0 if t >= SLOW_S else max(1, min(s.max_inner, math.ceil(s.sample_s / max(t, 1e-7)))) for n, t in once.items()}
    inner.update({n: 0 for n in capped})
    per_round = sum(s.idle_s + once[n] * (1 + inner[n]) for n in once)
    if s.rounds is not None:
        rounds = s.rounds
    else:
        rounds = max(s.min_rounds.get(case.size, 1), min(s.max_rounds, int(s.budget_s.get(case.size, 4.0) / max(per_round, 1e-9))))
    cold: dict[str, list[float]] = {n: [] for n in calls}
    warm: dict[str, list[float]] = {n: [] for n in calls}
    n = len(case.impls)

    def one_round(r: int) -> None:
        for k in range(n):
            impl = case.impls[(r + k) % n]
            if impl.name in capped:  # its one checked call (at the most threads) stands for every sample
                cold[impl.name].append(capped[impl.name])
                warm[impl.name].append(capped[impl.name])
                continue
            call = calls[impl.name]
            impl.reset()
            time.sleep(s.idle_s)
            t0 = time.perf_counter()
            call()
            t1 = time.perf_counter()
            cold[impl.name].append(t1 - t0)
            if inner[impl.name] == 0:
                warm[impl.name].append(t1 - t0)
                continue
            t0 = time.perf_counter()
            for _ in range(inner[impl.name]):
                call()
            warm[impl.name].append((time.perf_counter() - t0) / inner[impl.name])

    for r in range(rounds):
        one_round(r)
    added = 0
    if s.rounds is None:
        extra = max(0, min(s.close_rounds - rounds, int(s.close_budget_s / max(per_round, 1e-9))))
        while added < extra and _close(warm, cold, capped, s.close_margin):
            one_round(rounds + added)
            added += 1
    rounds += added
    rec: dict[str, Any] = {"threads": threads, "rounds": rounds, "added_rounds": added, "inner": inner, "capped_s": capped}
    for mode, times in (("warm", warm), ("cold", cold)):
        rec[mode] = {"ms": {m: harness.quantiles([t * 1e3 for t in ts]) for m, ts in times.items()},
                     "raw_ms": {m: [round(t * 1e3, 5) for t in ts] for m, ts in times.items()}}
        if "gcc" in times:
            rec[mode]["speedup"] = {m: harness.quantiles([g / t for g, t in zip(times["gcc"], ts)]) for m, ts in times.items()}
    return rec


def _close(warm: Mapping[str, Sequence[float]], cold: Mapping[str, Sequence[float]], capped: Mapping[str, float],
           margin: float) -> bool:
    """Whether polyfuse's median paired speedup over gcc, warm or cold, lies within ``margin`` of 1 either
    way (False without both, or when either's one call stands for every sample: more rounds add nothing)."""
    if "gcc" not in warm or "polyfuse" not in warm or capped.keys() & {"gcc", "polyfuse"}:
        return False
    for times in (warm, cold):
        ratio = statistics.median(g / t for g, t in zip(times["gcc"], times["polyfuse"]))
        if 1 / margin < ratio < margin:
            return True
    return False


# ----- the run ---------------------------------------------------------------------------------------------
def default_out() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "polyfuse" / "bench"


def kernel_names(only: Sequence[str] | None = None) -> list[str]:
    from tests.kernels import KERNELS  # noqa: PLC0415

    names = [k.name for k in KERNELS]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise SystemExit(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(names)}")
    return [n for n in names if not only or n in only]


def run(sizes: Sequence[str] = ("MEDIUM", "LARGE"), threads: Sequence[int] = (1, 2), out: Path | str | None = None,
        only: Sequence[str] | None = None, impls: Sequence[str] = IMPLS, settings: Settings | None = None,
        stem: str = STEM, explicit_sizes: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
    """Build, check and time every kernel (``only``: these) at each of ``sizes`` and ``threads``; write
    ``<stem>.{json,md,png}`` under ``out`` (default ``$XDG_CACHE_HOME/polyfuse/bench``); return the results.
    ``explicit_sizes`` maps a kernel to macro values that replace the dataset's (tests use it)."""
    s = settings or Settings()
    out_dir = Path(out) if out is not None else default_out()
    cache = out_dir / "build"
    bad = sorted(set(sizes) - set(_D))
    if bad:
        raise SystemExit(f"unknown size(s) {', '.join(bad)}; known: {', '.join(_D)}")
    started = time.time()
    results: dict[str, Any] = {
        "benchmark": stem, "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "sizes": list(sizes), "threads": list(threads), "impls": list(impls),
        "settings": {f.name: (dict(v) if isinstance(v := getattr(s, f.name), Mapping) else v) for f in dataclasses.fields(s)},
        "machine": {**harness.machine(), "clang": _version(CLANG), "polycc": polycc(), "pluto": _pluto_version()},
        "flags": {"gcc": " ".join(peers.GCC_FLAGS), "polly": " ".join(CLANG_FLAGS), "polly-par": " ".join(CLANG_PAR_FLAGS),
                  "pluto": f"polycc {' '.join(PLUTO_OPTIONS)}; gcc {' '.join(peers.GCC_FLAGS)}",
                  "polyfuse": "pf.compile(prog, target='c', params=sizes, threads=T).prepare(...)"},
    }
    rows = []
    for size in sizes:
        for name in kernel_names(only):
            t0 = time.perf_counter()
            case = build_case(name, size, impls, threads, cache, (explicit_sizes or {}).get(name))
            row: dict[str, Any] = {"kernel": name, "size": size, "sizes": case.sizes, "skipped": case.skipped,
                                   "setup_s": {i.name: round(i.setup_s, 3) for i in case.impls}, "timings": []}
            if case.impls:
                for t in threads:
                    row["timings"].append(time_case(case, t, s))
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            row["load_average"] = os.getloadavg()  # the machine is shared: which rows ran beside other work
            rows.append(row)
            _log(_summary(row))
            del case
    results["rows"] = rows
    results["wall_s"] = time.time() - started
    results["machine_after"] = {"load_average": os.getloadavg()}
    results["summary"] = summarise(results)
    write(results, out_dir, stem)
    return results


def _version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "not found"


def _pluto_version() -> str:
    tool = polycc()
    if tool is None:
        return "not found"
    try:
        head = subprocess.run(["git", "-C", str(Path(tool).resolve().parent), "log", "-1", "--format=%h %cs"],
                              capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        head = ""
    return f"{tool} (git {head})" if head else tool


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _summary(row: dict[str, Any]) -> str:
    parts = [f"{row['kernel']} {row['size']} ({row['wall_s']:.0f} s)"]
    for t in row["timings"]:
        sp = t["warm"].get("speedup", {})
        parts.append(f"{t['threads']}t: " + ", ".join(f"{m} {q['median']:.2f}" for m, q in sp.items() if m != "gcc"))
    parts += [f"{k} skipped ({v[:100]})" for k, v in row["skipped"].items()]
    return "; ".join(parts)


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """Per (size, threads, warm/cold): each implementation's geomean speedup over gcc (over the kernels it
    ran; and over all kernels with a failed or missing build counted as gcc's time, speedup 1), the kernels
    where polyfuse is slower than gcc, and where the best peer beats polyfuse by most."""
    configs = []
    for size in results["sizes"]:
        for threads in results["threads"]:
            for mode in ("warm", "cold"):
                per: dict[str, dict[str, float]] = {}
                kernels = []
                for row in results["rows"]:
                    if row["size"] != size:
                        continue
                    t = next((t for t in row["timings"] if t["threads"] == threads), None)
                    if t is None or "speedup" not in t[mode]:
                        continue
                    kernels.append(row["kernel"])
                    per[row["kernel"]] = {m: q["median"] for m, q in t[mode]["speedup"].items()}
                if not kernels:
                    continue
                geo, geo_all, ran = {}, {}, {}
                for m in results["impls"]:
                    vals = [per[k][m] for k in kernels if m in per[k]]
                    ran[m] = len(vals)
                    geo[m] = _geomean(vals)
                    geo_all[m] = _geomean([per[k].get(m, 1.0) for k in kernels])
                slower = {k: per[k]["polyfuse"] for k in kernels if "polyfuse" in per[k] and per[k]["polyfuse"] < 1.0}
                behind = {}
                for k in kernels:
                    best = max(((v, m) for m, v in per[k].items() if m not in ("polyfuse", "gcc")), default=None)
                    if best is not None and "polyfuse" in per[k] and best[0] > per[k]["polyfuse"]:
                        behind[k] = {"peer": best[1], "ratio": per[k]["polyfuse"] / best[0]}
                configs.append({"size": size, "threads": threads, "mode": mode, "kernels": len(kernels), "ran": ran,
                                "geomean": geo, "geomean_all": geo_all, "speedups": per,
                                "polyfuse_slower_than_gcc": dict(sorted(slower.items(), key=lambda kv: kv[1])),
                                "polyfuse_behind_best_peer": dict(sorted(behind.items(), key=lambda kv: kv[1]["ratio"]))})
    return {"configs": configs}


# ----- reports ------------------------------------------------------------------------------------------
def _f(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _close_rule(settings: Mapping[str, Any]) -> str:
    """The sentence on close calls' added rounds, for a run that had them (not with ``--rounds``, nor in a
    run recorded before the rule existed)."""
    if "close_margin" not in settings or settings.get("rounds") is not None:
        return ""
    return (f"Where polyfuse's median speedup lies within {settings['close_margin']:g}x of 1 either way, rounds are "
            f"added up to {settings['close_rounds']} (at most {settings['close_budget_s']:.0f} s more per kernel and "
            "thread count). ")


def to_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    impls = results["impls"]
    lines = [
        "# PolyBench-style kernels: polyfuse against gcc -O3, Polly and Pluto", "",
        f"{m['cpu']}, {m['cpu_count']} CPUs; {m['gcc']}; {m['clang']}; Pluto: {m['pluto']}. "
        f"Started {results['started_utc']} UTC, {results['wall_s'] / 60:.1f} min; 1-minute load average "
        f"{m['load_average'][0]:.2f} before, {results['machine_after']['load_average'][0]:.2f} after.", "",
        "Builds: " + "; ".join(f"{LABELS[i]}: `{results['flags'][i]}`" for i in impls if i in results["flags"]) + ".", "",
        "Speedup = gcc -O3's time on the original source / the implementation's time, paired within each round "
        "(median over rounds); above 1 is faster than gcc. *warm*: calls directly after a call of the same "
        f"implementation; *cold*: one call after {results['settings']['idle_s'] * 1e3:.0f} ms idle (calls over "
        f"{SLOW_S:.0f} s: the cold call is also the warm sample; a call over {results['settings']['cap_s']:.0f} s is made "
        f"once, when checked at the most threads, and that time stands for every sample: marked *). "
        + _close_rule(results["settings"]) +
        "Geomean over the kernels each implementation ran "
        "(in brackets: over all kernels, a failed build counted as gcc's time).", "",
        "## Geomean speedup over gcc -O3", "",
        "| size | threads | calls | kernels | " + " | ".join(LABELS[i] for i in impls if i != "gcc") + " |",
        "|---|---:|---|---:|" + "---:|" * (len(impls) - 1),
    ]
    for c in results["summary"]["configs"]:
        cells = []
        for i in impls:
            if i == "gcc":
                continue
            g, ga = c["geomean"].get(i), c["geomean_all"].get(i)
            cells.append("n/a" if g is None else f"**{g:.2f}** ({ga:.2f}, {c['ran'][i]})" if i == "polyfuse"
                         else f"{g:.2f} ({ga:.2f}, {c['ran'][i]})")
        lines.append(f"| {c['size']} | {c['threads']} | {c['mode']} | {c['kernels']} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: geomean over the kernels it ran (over all kernels, failures = 1; kernels it ran).", "",
              "## Where polyfuse is slower than gcc -O3 (speedup < 1)", ""]
    for c in results["summary"]["configs"]:
        slow = c["polyfuse_slower_than_gcc"]
        text = ", ".join(f"{k} {v:.2f}" for k, v in slow.items()) or "none"
        lines.append(f"- {c['size']}, {c['threads']} thread(s), {c['mode']}: {text}")
    lines += ["", "## Where a peer beats polyfuse (polyfuse time / best peer time, above 1 is behind)", ""]
    for c in results["summary"]["configs"]:
        behind = c["polyfuse_behind_best_peer"]
        text = ", ".join(f"{k} {1 / v['ratio']:.2f} ({LABELS[v['peer']]})" for k, v in list(behind.items())[:8]) or "none"
        lines.append(f"- {c['size']}, {c['threads']} thread(s), {c['mode']}: {text}")
    for size in results["sizes"]:
        for mode in ("warm", "cold"):
            lines += ["", f"## {size}, {mode} calls: median ms per call (speedup over gcc)", "",
                      "| kernel | threads | rounds | " + " | ".join(LABELS[i] for i in impls) + " |",
                      "|---|---:|---:|" + "---:|" * len(impls)]
            for row in results["rows"]:
                if row["size"] != size:
                    continue
                if not row["timings"]:
                    lines.append(f"| {row['kernel']} | | | " + " | ".join("fails" for _ in impls) + " |")
                for t in row["timings"]:
                    cells = []
                    for i in impls:
                        q = t[mode]["ms"].get(i)
                        sp = t[mode].get("speedup", {}).get(i)
                        if q is None:
                            why = row["skipped"].get(i, "")
                            cells.append("n/i" if "not installed" in why or "not found" in why else "fails")
                        else:
                            cells.append(f"{q['median']:.3g}" + ("" if i == "gcc" or sp is None else f" ({sp['median']:.2f})")
                                         + ("*" if i in t.get("capped_s", {}) else ""))
                    lines.append(f"| {row['kernel']} | {t['threads']} | {t['rounds']} | " + " | ".join(cells) + " |")
    problems = [f"- {r['kernel']} {r['size']}: {LABELS.get(p, p)}: {why}" for r in results["rows"]
                for p, why in r["skipped"].items() if "not installed" not in why and "not found" not in why]
    missing = [i for i in impls if any("not installed" in r["skipped"].get(i, "") or "not found" in r["skipped"].get(i, "")
                                       for r in results["rows"])]
    if problems:
        lines += ["", "## Not timed (failed to build, or a result different from gcc's)", "", *problems]
    if missing:
        lines += ["", f"Not installed, skipped: {', '.join(LABELS.get(p, p) for p in missing)}."]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> bool:
    """Geomean speedups per configuration (left) and per-kernel speedups at the last configuration
    (right, log scale); False without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415 (optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    configs = results["summary"]["configs"]
    impls = [i for i in results["impls"] if i != "gcc"]
    if not configs or not impls:
        return False
    last = max(configs, key=lambda c: (results["sizes"].index(c["size"]), c["threads"], c["mode"] == "warm"))
    kernels = sorted(last["speedups"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, max(5, 0.28 * len(kernels) * len(impls) / 2 + 2)),
                                   gridspec_kw={"width_ratios": [1, 1.3]})
    width = 0.8 / len(impls)
    for k, i in enumerate(impls):
        xs = [j + (k - (len(impls) - 1) / 2) * width for j in range(len(configs))]
        ax1.bar(xs, [c["geomean"].get(i) or 0 for c in configs], width=width, label=LABELS[i])
        ys = [j + (k - (len(impls) - 1) / 2) * width for j in range(len(kernels))]
        ax2.barh(ys, [last["speedups"][kn].get(i, float("nan")) for kn in kernels], height=width, label=LABELS[i])
    ax1.axhline(1.0, color="k", linewidth=0.8)
    ax1.set_xticks(range(len(configs)), [f"{c['size']}\n{c['threads']}t {c['mode']}" for c in configs], fontsize="small")
    ax1.set_ylabel("geomean speedup over gcc -O3")
    ax1.set_title("Geomean speedup over gcc -O3 on the original source")
    ax1.legend(fontsize="small")
    ax2.axvline(1.0, color="k", linewidth=0.8)
    ax2.set_xscale("log")
    ax2.set_yticks(range(len(kernels)), kernels, fontsize="small")
    ax2.invert_yaxis()
    ax2.set_xlabel("speedup over gcc -O3 (log)")
    ax2.set_title(f"Per kernel: {last['size']}, {last['threads']} thread(s), {last['mode']} calls")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write(results: dict[str, Any], out_dir: Path, stem: str) -> None:
    harness.write_results(results, out_dir, stem, to_markdown, plot)
