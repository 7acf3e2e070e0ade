"""No leaks: compiling and running many small programs in one process keeps memory bounded.

Programs are read from source each time (frontend, dependences, scheduler, codegen, C runtime); their
code texts cycle through a few variants, so after warm-up the compile cache serves every library and any
growth is polyfuse holding on to something (isl objects, programs, executables, interpreters).
"""

from __future__ import annotations

import gc
import resource
import tracemalloc

import numpy as np
import pytest

import polyfuse as pf
from tests.fuzz import harness

VARIANTS = 10


def source(k: int) -> str:
    return ("import polyfuse as pf\n\nN = pf.params('N')\n\n\n@pf.program\n"
            "def small(A: pf.f32[N], B: pf.f32[N]):\n    T = pf.empty((N,), pf.f32)\n"
            f"    for i in range(N):\n        T[i] = A[i] * {k + 1}.0\n    for i in range(N):\n        B[i] = T[i] + {k}.0\n")


def compile_and_run(k: int) -> None:
    prog = harness.load_source(source(k % VARIANTS), "small")
    a = np.arange(8, dtype=np.float32)
    b = np.zeros_like(a)
    pf.compile(prog, target="c", fusion=("max", "none")[k % 2], tile=None)(A=a, B=b)
    assert b[3] == 3 * (k % VARIANTS + 1) + k % VARIANTS


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def growth(n: int, warmup: int) -> tuple[float, float]:
    """(RSS growth in MB, traced Python allocation growth in MB) over ``n`` runs after ``warmup`` runs."""
    for k in range(warmup):
        compile_and_run(k)
    gc.collect()
    tracemalloc.start()
    before_rss, (before_py, _) = rss_mb(), tracemalloc.get_traced_memory()
    for k in range(warmup, warmup + n):
        compile_and_run(k)
    gc.collect()
    after_rss, (after_py, _) = rss_mb(), tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return after_rss - before_rss, (after_py - before_py) / 2**20


def test_hundred_programs_keep_memory_bounded():
    rss, py = growth(80, 20)
    assert py < 8, f"Python allocations grew by {py:.1f} MB over 80 programs"
    assert rss < 60, f"RSS grew by {rss:.1f} MB over 80 programs"


@pytest.mark.slow
def test_thousand_programs_keep_memory_bounded():
    rss, py = growth(900, 100)
    assert py < 20, f"Python allocations grew by {py:.1f} MB over 900 programs"
    assert rss < 100, f"RSS grew by {rss:.1f} MB over 900 programs"
