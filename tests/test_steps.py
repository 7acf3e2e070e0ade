"""One thread: the loop nests of a time step fused row by row (``schedule/fusion/steps.py``).

With ``threads=1`` a stencil's time step runs as one pass over its rows (fdtd-2d: the ``ey``, ``ex`` and
``hz`` updates of row ``i`` one after the other, ``hz`` a row behind), where the parallel schedule streams
every array once per loop nest. The decisions here do not depend on this machine's caches: the L1 size the
rule reads is fixed by :func:`fixed_caches`.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.codegen import codegen
from polyfuse.schedule.model import ROWS_FUSED
from tests.c_oracle import GccKernel, assert_same, check_against_gcc
from tests.kernels import BY_NAME, inputs

steps = importlib.import_module("polyfuse.schedule.fusion.steps")


@pytest.fixture
def fixed_caches(monkeypatch):
    monkeypatch.setattr(steps, "cache_sizes", lambda: (32 * 1024, 1 << 20))


def _program(name: str) -> pf.Program:
    k = BY_NAME[name]
    return pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)


def _rows_fused(sched: pf.Schedule) -> bool:
    return any(n.startswith(ROWS_FUSED) for n in sched.notes)


def test_fdtd2d_on_one_thread_runs_each_step_as_one_pass_over_the_rows(fixed_caches) -> None:
    prog = _program("fdtd-2d")
    params = {"tmax": 5, "nx": 200, "ny": 240}
    parallel = pf.schedule(prog, target="c", params=params)
    assert len(parallel.kernels) == 3 and not any(k.without_parallel_loop for k in parallel.kernels)
    one = pf.schedule(prog, target="c", params=params, threads=1)
    assert _rows_fused(one) and [k.statements for k in one.kernels] == [("S0", "S1", "S2", "S3")]
    text = codegen(one).text
    body = text[text.index("kernel kernel0"):]
    # each statement keeps its own contiguous inner loop; hz's update runs a row behind (it reads ey[i + 1])
    shifted = body.count("shifted reads kept in vector registers")  # (one loop, printed as head and tail: c_shift.py)
    assert body.count("for (int64_t c2") - shifted == 4 and "hz[(c1 - 1) * ny + c2] = " in body
    assert "omp parallel" not in text and body.count("#pragma omp simd\n") - shifted == 4  # one thread; each row loop vectorised
    explained = one.explain()
    assert "S0 | S1+S2+S3: fused: kernel0: the loop nests of each time step fused row by row for one thread" in explained
    assert "kernel0: sequential: its loop nests run fused row by row for one thread" in explained
    two = pf.schedule(prog, target="c", params=params, threads=2)
    assert codegen(two).text == codegen(parallel).text


@pytest.mark.parametrize("name, sizes", [
    ("fdtd-2d", {"TMAX": 3, "NX": 37, "NY": 129}),
    ("fdtd-2d", {"TMAX": 2, "NX": 1, "NY": 7}),
    ("fdtd-2d", {"TMAX": 4, "NX": 130, "NY": 2}),
    ("jacobi-2d", {"TSTEPS": 3, "N": 70}),
    ("jacobi-2d", {"TSTEPS": 2, "N": 3}),
    ("heat-3d", {"TSTEPS": 2, "N": 17}),
])
def test_row_fused_steps_equal_gccs_build(name: str, sizes: dict[str, int], fixed_caches) -> None:
    """Against gcc's build of the source, at sizes with single rows, two columns and odd extents."""
    k = dataclasses.replace(BY_NAME[name], sizes=MappingProxyType(sizes))
    args = dict(inputs(k))
    args.update({p: sizes[p.upper()] for p in ("tsteps", "tmax") if p.upper() in sizes})
    check_against_gcc(k.path, k.function, args, defines=k.defines, assume=k.assume, threads=1)


@pytest.mark.parametrize("name, params", [("fdtd-2d", {"tmax": 3, "nx": 37, "ny": 129}), ("jacobi-2d", {"tsteps": 3, "n": 70}),
                                          ("heat-3d", {"n": 17})])
def test_those_sizes_are_row_fused(name: str, params: dict[str, int], fixed_caches) -> None:
    """(The programs the previous test checks against gcc do take the row-fused schedule.)"""
    k = BY_NAME[name]
    prog = pf.from_c(str(k.path), function=k.function, defines={**k.defines, "TSTEPS": 2}, assume=k.assume)
    sched = pf.compile(prog, target="c", params=params, threads=1).schedule
    assert _rows_fused(sched) and len(sched.kernels) == 1


def test_what_is_not_row_fused(fixed_caches) -> None:
    """A loop body of one scalar statement per nest (jacobi-1d: the fused row would be one loop that does
    not vectorise), arrays that fit in L1, a first loop that is not a host loop (gemm's rows run in
    parallel), and a time loop whose fusion loses a register micro-tile (doitgen) keep their schedule."""
    for name, params in [("jacobi-1d", {"tsteps": 10, "n": 20000}), ("jacobi-2d", {"tsteps": 10, "n": 30}),
                         ("gemm", {"ni": 200, "nj": 220, "nk": 240}), ("doitgen", {"nr": 50, "nq": 40, "np": 60})]:
        prog = _program(name)
        one = pf.schedule(prog, target="c", params=params, threads=1)
        assert not _rows_fused(one), name
        assert codegen(one).text == codegen(pf.schedule(prog, target="c", params=params)).text, name
    doitgen = pf.schedule(_program("doitgen"), target="c", params={"nr": 50, "nq": 40, "np": 60}, threads=1)
    assert any("not done (it loses register micro-tiles)" in n for n in doitgen.notes)
    small = pf.schedule(_program("jacobi-2d"), target="c", params={"tsteps": 10, "n": 30}, threads=1)
    assert any("fit in L1" in n for n in small.notes)


def test_without_sizes_nothing_changes(fixed_caches) -> None:
    """The rule compares modelled bytes, so it needs the sizes: a symbolic schedule is the parallel one."""
    prog = _program("fdtd-2d")
    assert codegen(pf.schedule(prog, target="c", threads=1)).text == codegen(pf.schedule(prog, target="c")).text


@pytest.mark.parametrize("n", [1, 7, 37, 129])
def test_nussinov_on_one_thread_equals_gccs_build(n: int) -> None:
    """nussinov's tiled wavefront on one thread and on two computes what gcc's build computes."""
    k = dataclasses.replace(BY_NAME["nussinov"], sizes=MappingProxyType({"N": n}))
    args = dict(inputs(k))
    want = GccKernel(k.path, k.function, k.defines)(**args)
    prog = _program("nussinov")
    for threads in (1, 2):
        exe = pf.compile(prog, target="c", params={"n": n}, threads=threads)
        got = {"seq": np.array(args["seq"], copy=True), "table": np.array(args["table"], copy=True)}
        exe(n=n, **got)
        assert_same(got, want, f"nussinov n={n}, {threads} thread(s): compiled C vs gcc", 0, 0)


@pytest.mark.parametrize(("name", "params"), [("nussinov", {"n": 500}), ("nussinov", {"n": 2500}),
                                              ("seidel-2d", {"tsteps": 100, "n": 400})])
def test_on_one_thread_a_tiled_wavefront_stays(name: str, params: dict[str, int]) -> None:
    """isl skews nussinov and seidel-2d into wavefronts to expose a parallel loop. The traffic model rates
    the tiled wavefront at 20-30x the bytes of minimal fusion's tiled source order, yet on one thread it ran
    faster (session 31, interleaved, PolyBench sizes: nussinov 0.93x the time at MEDIUM and 0.71x at LARGE,
    seidel-2d 0.30x and 0.44x): its tiles keep the rows that the diagonals share in cache, which the model
    does not see. So ``threads=1`` schedules these as two threads do, with no note about minimal fusion."""
    prog = _program(name)
    one = pf.schedule(prog, target="c", params=params, threads=1)
    two = pf.schedule(prog, target="c", params=params, threads=2)
    assert one.to_text() == two.to_text()
    assert codegen(one).text == codegen(two).text
    assert not any("minimal fusion's schedule" in x for x in one.notes)
    assert "#pragma omp for" in codegen(one).text  # (the wavefront's parallel loop; a team of one runs it)
