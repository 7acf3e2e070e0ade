"""Where OpenMP's worker threads run: each on its own CPU, the calling thread left free.

Why: with no binding (OpenMP's default), a team that has gone to sleep between two calls is woken by the
calling thread, and Linux tends to wake the sleeping workers on the caller's own CPU. The caller then
spins at the loop's closing barrier while its worker waits behind it for the same CPU, until the load
balancer moves one of them: the first call after an idle pause of a few milliseconds cost about 7 ms more
than a warm call on the 2-core machines this was measured on, for any kernel (measured with an empty
parallel loop in plain C: 7.8 ms cold against 0.8 ms warm). Binding only the workers, each to a CPU of its
own, makes the woken workers run at once: the same call costs 0.85 ms cold.

Only the workers are bound, never the calling thread: ``OMP_PROC_BIND=true`` would fix the wake-up too,
but it also binds the caller (a Python main thread) to one CPU, and every thread that it creates later
(PyTorch's or OpenBLAS's pools) inherits that one CPU. Nothing is done when the user has asked OpenMP for
a placement (``OMP_PROC_BIND``, ``OMP_PLACES`` or ``GOMP_CPU_AFFINITY`` set) or sets
``POLYFUSE_PLACE_WORKERS=0``. The workers are those of the calling thread's thread pool, shared by every
library linked with the same OpenMP runtime (all polyfuse kernels), so placing them once per team size
is enough.
"""

from __future__ import annotations

import ctypes
import os
import threading
from functools import lru_cache

from polyfuse.runtime import team

PLACEMENT_SOURCE = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <omp.h>

/* Bind the workers of a team of `threads` threads (thread numbers 1..threads-1) to one CPU each,
   counting down from the last CPU this process may use; the calling thread (number 0) stays unbound.
   Returns the number of workers bound. */
int polyfuse_place_workers(int threads)
{
    cpu_set_t allowed;
    int cpus[CPU_SETSIZE], n = 0, placed = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    if (n < 2 || threads < 2)
        return 0;
    #pragma omp parallel num_threads(threads) reduction(+:placed)
    {
        int t = omp_get_thread_num();
        if (t > 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[n - 1 - (t - 1) % (n - 1)], &one);
            placed += sched_setaffinity(0, sizeof one, &one) == 0;
        }
    }
    return placed;
}

int polyfuse_max_threads(void) { return omp_get_max_threads(); }
"""

_USER_PLACEMENT = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
_lock = threading.Lock()
_placed: dict[int, int] = {}  # calling thread's id -> largest team size placed for it
_library: ctypes.CDLL | None = None


@lru_cache(maxsize=None)
def enabled() -> bool:
    """Whether polyfuse places the workers (not when the user placed threads through OpenMP or opted out;
    read once per process, like OpenMP reads its own variables)."""
    if os.environ.get("POLYFUSE_PLACE_WORKERS", "1").strip() in ("0", "false", "no", "off"):
        return False
    return not any(os.environ.get(v) for v in _USER_PLACEMENT)


def place_workers(threads: int) -> None:
    """Bind the workers of the calling thread's OpenMP team of ``threads`` threads, once per team size."""
    me = threading.get_ident()
    if threads < 2 or _placed.get(me, 0) >= threads or not enabled():
        return
    _load().polyfuse_place_workers(ctypes.c_int(threads))
    _placed[me] = max(threads, _placed.get(me, 0))


def default_team() -> int:
    """OpenMP's team size for a parallel region started now by the calling thread (``omp_get_max_threads``)."""
    return int(_load().polyfuse_max_threads())


def openmp() -> ctypes.CDLL:
    """A library linked with the process's OpenMP runtime, for calling ``omp_*`` functions through it; it
    also holds the team wrapper's policy (:mod:`polyfuse.runtime.team`)."""
    return _load()


def _load() -> ctypes.CDLL:
    global _library
    with _lock:
        if _library is None:
            from polyfuse.runtime.cpu import load_library  # (cpu imports this module)

            _library = load_library(PLACEMENT_SOURCE + team.POLICY_SOURCE)
    return _library
