"""Interleaved-rounds timing, paired ratios, and what the numbers were measured on.

Why interleaved: on a shared 2-core machine the speed of the processor drifts (other processes, frequency,
the page cache). Timing one implementation for a minute and then the next lets that drift land on one side
only. Here every round times each implementation once, the order rotating from round to round (round ``r``
starts with implementation ``r mod n``), so a slow stretch hits all of them alike, and the ratio
``polyfuse time / peer time`` is formed *within* a round (a paired ratio). Its median over the rounds and
its spread (quartiles, min and max) are what the report shows; below 1 polyfuse is faster.

One sample is ``inner`` back-to-back calls divided by ``inner``, with ``inner`` chosen per implementation
so that a sample lasts at least ``sample_s`` (short kernels are otherwise dominated by timer noise).

Thread pools: numpy's OpenBLAS, PyTorch's OpenMP and polyfuse's libgomp are separate pools, and each keeps
its workers spinning for a while after a call (OpenBLAS for about 0.1 s). On a 2-core machine a pool that
is still spinning takes a core from the next implementation, whose barrier then waits for a time slice:
milliseconds that belong to the wrong side. So each sample is preceded by a pause of ``settle_s`` (the
previous pool goes to sleep) and one untimed call (this implementation's own pool wakes up): every
implementation is timed warm, back to back with itself, as if it ran alone. An ``idle_s`` > 0 instead sleeps
that long before each sample of a single call, with no untimed call: the cost of a call that follows an
idle pause (sleeping workers), which back-to-back timing hides.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Impl:
    """One implementation of a workload: ``call()`` runs it once; ``reset()`` (untimed, before each sample)
    restores inputs that ``call`` updates in place, so that repeated calls see the same data."""

    name: str
    call: Callable[[], Any]
    reset: Callable[[], None] | None = None
    setup_s: float = 0.0  # compile or build time, recorded, never part of a sample
    warm_up: bool = True  # an untimed call before each settled sample (calibrate drops it for slow calls)


@dataclass
class Timing:
    """Per-call seconds of each implementation, one entry per round (``times[name][r]``)."""

    order: list[str]
    times: dict[str, list[float]] = field(default_factory=dict)
    inner: dict[str, int] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(next(iter(self.times.values()))) if self.times else 0


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles (inclusive method: exact for small counts), min and max of ``values``."""
    v = sorted(values)
    if len(v) == 1:
        q1 = q3 = v[0]
    else:
        q1, _, q3 = statistics.quantiles(v, n=4, method="inclusive")
    return {"median": statistics.median(v), "q1": q1, "q3": q3, "min": v[0], "max": v[-1], "n": len(v)}


SLOW_S = 0.25


def _sample(impl: Impl, inner: int, idle_s: float, settle_s: float = 0.0) -> float:
    if idle_s > 0:
        if impl.reset is not None:
            impl.reset()
        time.sleep(idle_s)
    else:
        if settle_s > 0:  # let the previous implementation's spinning threads go to sleep, then wake ours
            time.sleep(settle_s)
            if impl.warm_up:
                if impl.reset is not None:
                    impl.reset()
                impl.call()
        if impl.reset is not None:
            impl.reset()
    t0 = time.perf_counter()
    for _ in range(inner):
        impl.call()
    return (time.perf_counter() - t0) / inner


def calibrate(impls: Sequence[Impl], sample_s: float, idle_s: float = 0.0, settle_s: float = 0.0) -> tuple[dict[str, int], dict[str, float]]:
    """Time one (already warmed-up) call of each implementation; the ``inner`` repetition count that makes a
    sample last ``sample_s``, and the per-call estimate. Idle-pause timing always uses single calls. A call
    slower than ``SLOW_S`` gets no untimed warm-up call before its samples: waking a thread pool is noise
    there, and the extra call would double the row's time."""
    inner, once = {}, {}
    for impl in impls:
        t = _sample(impl, 1, 0.0, settle_s)
        impl.warm_up = t < SLOW_S
        once[impl.name] = t
        inner[impl.name] = 1 if idle_s > 0 else max(1, min(1000, math.ceil(sample_s / max(t, 1e-7))))
    return inner, once


def choose_rounds(inner: dict[str, int], once: dict[str, float], budget_s: float, min_rounds: int, max_rounds: int,
                  idle_s: float = 0.0, settle_s: float = 0.0) -> int:
    """As many rounds as fit in ``budget_s``, within ``[min_rounds, max_rounds]``."""
    settled = settle_s > 0 and idle_s <= 0  # each sample then also pays the pause and (fast calls) one untimed call
    per_round = sum(inner[n] * once[n] + idle_s + (settle_s + (once[n] if once[n] < SLOW_S else 0.0) if settled else 0.0)
                    for n in inner)
    return max(min_rounds, min(max_rounds, int(budget_s / max(per_round, 1e-9))))


def interleaved(impls: Sequence[Impl], rounds: int, inner: dict[str, int], idle_s: float = 0.0, settle_s: float = 0.0) -> Timing:
    """``rounds`` rounds; in round ``r`` the implementations run in the order rotated by ``r``. With
    ``settle_s`` each sample is preceded by that pause and one untimed call (see the module's docstring)."""
    names = [i.name for i in impls]
    timing = Timing(order=names, times={n: [] for n in names}, inner=dict(inner))
    n = len(impls)
    for r in range(rounds):
        for k in range(n):
            impl = impls[(r + k) % n]
            timing.times[impl.name].append(_sample(impl, inner[impl.name], idle_s, settle_s))
    return timing


def paired_ratios(timing: Timing, ours: str = "polyfuse") -> dict[str, dict[str, float]]:
    """For each peer: the statistics over rounds of ``time[ours][r] / time[peer][r]``."""
    mine = timing.times[ours]
    return {peer: quantiles([a / b for a, b in zip(mine, ts)]) for peer, ts in timing.times.items() if peer != ours}


# ----- the environment -----------------------------------------------------------------------------------
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def prepare_environment(threads: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a fair benchmark process runs in: ``threads`` OpenMP/OpenBLAS/MKL threads, and
    neither OpenBLAS override (they pin an older, slower kernel; the machine sets them for the test suite's
    sake). Returns the new environment; the caller re-executes itself with it when libraries are loaded."""
    env = dict(os.environ if environ is None else environ)
    for var in OPENBLAS_OVERRIDES:
        env.pop(var, None)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def blas_info() -> list[dict[str, Any]]:
    """threadpoolctl's view of the loaded BLAS and OpenMP libraries (kernel architecture, thread counts);
    empty when threadpoolctl is not installed."""
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415 (optional)
    except ImportError:
        return []
    keep = ("user_api", "internal_api", "version", "architecture", "num_threads", "threading_layer", "prefix", "filepath")
    return [{k: d[k] for k in keep if k in d} for d in threadpool_info()]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        gcc = "not found"
    return {
        "platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "gcc": gcc, "load_average": os.getloadavg(),
        "env": {v: os.environ.get(v, "unset") for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", *OPENBLAS_OVERRIDES)},
        "blas": blas_info(),
    }


# ----- the machine's copy bandwidth ----------------------------------------------------------------------
_COPY_C = r"""
#include <string.h>
#include <stddef.h>
/* dst := src in `threads` contiguous chunks, one per OpenMP thread. */
void copy(char *dst, const char *src, size_t n, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; t++) {
    size_t lo = n / threads * t, hi = t == threads - 1 ? n : n / threads * (t + 1);
    memcpy(dst + lo, src + lo, hi - lo);
  }
}
"""


def build_shared(source: str, name: str, cache: Path, flags: Sequence[str] = ("-O3", "-march=native", "-fopenmp"),
                 compiler: str = "gcc") -> Path:
    """``source`` compiled by ``compiler`` (gcc unless told) into ``cache/name.so`` (rebuilt when the source,
    flags or compiler change)."""
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256("\0".join((source, *flags, *(() if compiler == "gcc" else (compiler,)))).encode()).hexdigest()[:12]
    lib = cache / f"{name}-{key}.so"
    if not lib.exists():
        src = cache / f"{name}-{key}.c"
        src.write_text(source)
        cmd = [compiler, *flags, "-shared", "-fPIC", "-o", str(lib), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed on {src}: {done.stderr.strip()[:500]}")
    return lib


COPY = "copy"
"""The name of the copy yardstick among a row's implementations (:func:`copy_impl`)."""


def copy_impl(nbytes: int, threads: int, cache: Path) -> Impl:
    """A ``threads``-thread memcpy of ``nbytes`` as an implementation to time (checked once: it copies)."""
    lib = ctypes.CDLL(str(build_shared(_COPY_C, "copy", cache)))
    lib.copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    impl = Impl(COPY, lambda: lib.copy(dst.ctypes.data, src.ctypes.data, nbytes, threads))
    impl.call()
    if not np.array_equal(dst[:: max(1, nbytes // 4096)], src[:: max(1, nbytes // 4096)]):
        raise RuntimeError("the copy kernel did not copy")
    return impl


def copy_bandwidth(nbytes: int, threads: int, cache: Path, budget_s: float, min_rounds: int = 3, max_rounds: int = 20) -> dict:
    """GB/s of a ``threads``-thread memcpy of ``nbytes`` (bytes read + bytes written, per second), by the
    same interleaved sampling (one implementation: plain repeated samples): the machine's copy bandwidth
    at one moment (the memory-bound rows are measured against a copy timed in their own rounds)."""
    impl = copy_impl(nbytes, threads, cache)
    inner, once = calibrate([impl], 0.02)
    rounds = choose_rounds(inner, once, budget_s, min_rounds, max_rounds)
    times = interleaved([impl], rounds, inner).times[COPY]
    gbps = [2 * nbytes / t / 1e9 for t in times]
    return {"bytes": nbytes, "threads": threads, "rounds": rounds, "GBps": quantiles(gbps)}


def write_results(results: dict[str, Any], out_dir: Path, stem: str, markdown: Callable[[dict[str, Any]], str],
                  plot: Callable[[dict[str, Any], Path], bool]) -> None:
    """``stem.{md,json,png}`` under ``out_dir`` (the plot where matplotlib is there); the table is printed too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown(results)
    results["plot"] = plot(results, out_dir / f"{stem}.png")
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / f"{stem}.md").write_text(table)
    print(table)
    print(f"results: {out_dir / stem}.{{md,json{',png' if results['plot'] else ''}}}", file=sys.stderr, flush=True)
