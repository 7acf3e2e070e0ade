"""One thread: the source order where its host loops keep their data in the cache (atax).

``cost/host_reuse.py`` counts a host loop whose iterations touch little data as moving the distinct data of
the whole loop; ``schedule/fusion/steps.py`` (``source_order_one_thread``) then takes the source order on
one thread where that count is far below the chosen schedule's. The L2 size the count reads is fixed by
:func:`fixed_caches`, so the decisions do not depend on this machine.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.codegen import codegen
from tests.c_oracle import GccKernel, assert_same
from tests.kernels import BY_NAME, inputs

host_reuse = importlib.import_module("polyfuse.cost.host_reuse")
traffic = importlib.import_module("polyfuse.cost.traffic")

SOURCE_ORDER = "threads=1: the source order ("
LARGE = {"m": 1900, "n": 2100}  # PolyBench's LARGE atax


@pytest.fixture
def fixed_caches(monkeypatch):
    monkeypatch.setattr(host_reuse, "cache_sizes", lambda: (32 * 1024, 1 << 20))


def _atax() -> pf.Program:
    k = BY_NAME["atax"]
    return pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)


def _bytes(sched: pf.Schedule, params, cache_bytes: int | None = None) -> int:
    return host_reuse.host_reuse_bytes(sched.program, sched.tree, sched.kernels, sched.contracted, params, cache_bytes)


def test_a_host_loop_that_fits_moves_its_distinct_data_once(fixed_caches) -> None:
    """atax's source order: ``y = 0``, then ``for i`` around ``tmp[i] = 0``, ``tmp[i] += A[i][j] x[j]`` and
    ``y[j] += A[i][j] tmp[i]``. One iteration touches a row of A, x, y and tmp[i] (50 KB, under half of the
    1 MB L2), so the loop moves A once, x once, y read and written once and tmp written once; per launch
    it would be A twice and x, y once per row. Where the iterations do not fit, the count is
    ``traffic.py``'s."""
    prog = _atax()
    m, n = LARGE["m"], LARGE["n"]
    source = pf.schedule(prog, target="c", fusion="none", params=LARGE)
    assert host_reuse.has_host_loop(source.tree)
    assert _bytes(source, LARGE) == 8 * (m * n + n + n + 2 * n + m)  # A, x, y = 0, y += ..., tmp[i] =
    per_launch = traffic.traffic(source).total_bytes
    assert per_launch > 4 * m * n * 8 // 2
    assert _bytes(source, LARGE, cache_bytes=1024) == per_launch  # (a row does not fit in 1 KB)
    smart = pf.schedule(prog, target="c", params=LARGE, threads=4)  # two parallel passes over A, no host loop
    assert not host_reuse.has_host_loop(smart.tree)
    assert _bytes(smart, LARGE) == traffic.traffic(smart).total_bytes


def test_atax_on_one_thread_reads_each_row_once(fixed_caches) -> None:
    """On one thread ``"smart"`` takes the source order: a host loop over the rows whose two kernels both
    read the row while it is in L1. On two threads too, since the parallel schedule moves twice its bytes
    and none of its kernels has a parallel loop (it never wakes the team); with four threads, or without
    sizes, the parallel schedule stays."""
    prog = _atax()
    one = pf.schedule(prog, target="c", params=LARGE, threads=1)
    note = [x for x in one.notes if x.startswith(SOURCE_ORDER)]
    assert note and "replaces the parallel schedule (64382400 B" in note[0], one.notes
    assert one.fusion == "smart" and host_reuse.has_host_loop(one.tree)
    assert not any("every kernel runs on one thread" in x for x in one.notes)  # (said once, by the rule that took it)
    text = codegen(one).text
    body = text[text.index("void kernel_atax_kernel"):]
    assert "omp parallel" not in body and "for (int64_t c0 = 0; c0 <= 1899; c0 += 1) {" in body
    assert body.index("pf_acc0 = pf_acc0 + (A[c0 * n + c1] * x[c1])") < body.index("y[c1] = y[c1] + (A[c0 * n + c1] * tmp[c0])")
    two = pf.schedule(prog, target="c", params=LARGE, threads=2)
    note = [x for x in two.notes if x.startswith("threads=2: the source order (")]
    assert note and "(32002400 B, its host loops' data reused in the cache) replaces the parallel schedule (64382400 B" in note[0]
    assert "never wakes the team" in note[0] and codegen(two).text == text
    four = pf.schedule(prog, target="c", params=LARGE, threads=4)
    assert not any("the source order" in x for x in four.notes) and not host_reuse.has_host_loop(four.tree)
    symbolic = pf.schedule(prog, target="c", threads=1)
    assert codegen(symbolic).text == codegen(pf.schedule(prog, target="c")).text


def test_what_keeps_its_schedule_on_one_thread(fixed_caches) -> None:
    """A source order that walks columns innermost (lu's), or that loses a register micro-tile (symm's),
    is not taken however few bytes it moves; a schedule whose source order has no host loop (gemm) is
    not compared at all."""
    for name, params, why in [("lu", {"n": 400}, "more strided innermost walks"),
                              ("symm", {"m": 200, "n": 240}, "it loses register micro-tiles")]:
        k = BY_NAME[name]
        prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
        one = pf.schedule(prog, target="c", params=params, threads=1)
        assert any(x.startswith(SOURCE_ORDER) and x.endswith(f"not taken ({why})") for x in one.notes), (name, one.notes)
        assert codegen(one).text == codegen(pf.schedule(prog, target="c", params=params)).text, name
    gemm = BY_NAME["gemm"]
    prog = pf.from_c(str(gemm.path), function=gemm.function, defines=gemm.defines)
    one = pf.schedule(prog, target="c", params={"ni": 200, "nj": 220, "nk": 240}, threads=1)
    assert not any(x.startswith(SOURCE_ORDER) for x in one.notes)


@pytest.mark.parametrize("m, n", [(1, 1), (7, 37), (37, 7), (129, 130), (390, 410)])
def test_atax_on_one_thread_equals_gccs_build(m: int, n: int, fixed_caches) -> None:
    """Both schedules, at single rows and columns, odd extents and PolyBench's MEDIUM size, compute what
    gcc's build of the source computes (bit for bit: the same sums in the same order of j)."""
    k = dataclasses.replace(BY_NAME["atax"], sizes=MappingProxyType({"M": m, "N": n}))
    args = dict(inputs(k))
    want = GccKernel(k.path, k.function, k.defines)(**args)
    prog = _atax()
    taken = []
    for threads in (1, 2):
        exe = pf.compile(prog, target="c", params={"m": m, "n": n}, threads=threads)
        taken.append(any(x.startswith(f"threads={threads}: the source order (") and "replaces" in x for x in exe.schedule.notes))
        got = {a: np.array(v, copy=True) for a, v in args.items() if isinstance(v, np.ndarray)}
        exe(m=m, n=n, **got)
        assert_same(got, want, f"atax m={m} n={n}, {threads} thread(s): compiled C vs gcc", 1e-12, 1e-12)
    assert taken == [m * n >= 7 * 37, (m, n) == (390, 410)], taken  # (two threads: twice the bytes only at MEDIUM here)
