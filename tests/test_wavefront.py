"""Tile wavefronts on C (``polyfuse/schedule/tiling/wavefront.py``): a tiled band whose every loop carries a
dependence runs its tiles diagonal by diagonal, the tiles of a diagonal in parallel.

The oracle is gcc's build of PolyBench's cholesky and the reference interpreter for the DSL recurrences, at
sizes that are not multiples of the tiles; the wavefront's code must also compute the same bits on one
thread and on two (each tile runs on one thread, nothing is reassociated)."""

from __future__ import annotations

import dataclasses
import importlib
from types import MappingProxyType

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from tests.c_oracle import GccKernel
from tests.kernels import BY_NAME, inputs

wave = importlib.import_module("polyfuse.schedule.tiling.wavefront")
N = pf.params("N")


@pf.program
def _sweep(A: pf.f64[N, N]):
    """Both loops carry a dependence (the classic wavefront: each element needs its upper and left neighbours)."""
    for i in range(1, N):
        for j in range(1, N):
            A[i, j] = 0.5 * A[i - 1, j] + 0.25 * A[i, j - 1] + A[i, j]


def _diagonal_loops(text: str) -> bool:
    """Whether the C text has a sequential loop around an ``omp for``: the diagonals around their tiles."""
    return "#pragma omp parallel\n" in text and "#pragma omp for schedule(static)" in text


@pytest.mark.parametrize("n", [1, 7, 37, 129])
def test_a_sweep_runs_on_diagonals_and_equals_the_reference(monkeypatch, n):
    monkeypatch.setattr(wave, "STEP_INSTANCES", 1)  # (any work pays: the small sizes take the wavefront too)
    sched = pf.schedule(_sweep, target="c", params={"N": n}, tile=(8, 8))
    values = np.random.default_rng(n).uniform(-1, 1, (n, n))
    want = values.copy()
    pf.reference(_sweep)(A=want, N=n)
    for threads in (1, 2):
        exe = pf.compile_schedule(sched, threads=threads)
        got = values.copy()
        exe(A=got, N=n)
        np.testing.assert_array_equal(got, want)  # (no reassociation: the same operations in the same order)
    if n >= 16:  # two tiles or more along both loops
        assert _diagonal_loops(exe.code.text)
        assert "wavefront: every loop carries a dependence" in sched.explain()
        assert sched.kernels[0].parallel_depth == 1
    else:
        assert not _diagonal_loops(exe.code.text)


def test_a_sweep_with_too_little_work_per_diagonal_stays_sequential():
    sched = pf.schedule(_sweep, target="c", params={"N": 129}, tile=(8, 8))  # 16k instances over 31 diagonals
    assert sched.kernels[0].parallel_depth == 0 and not sched.kernels[0].wavefront
    assert "sequential" in sched.explain()


def test_no_wavefront_on_one_thread(monkeypatch):
    monkeypatch.setattr(wave, "STEP_INSTANCES", 1)
    one = pf.schedule(_sweep, target="c", params={"N": 129}, tile=(8, 8), threads=1)
    assert one.kernels[0].parallel_depth == 0 and not one.kernels[0].wavefront


def _band(schedule: str) -> isl.ScheduleNode:
    domain = isl.UnionSet("[n] -> { S[t, i] : 0 <= t < n and 0 <= i < n }")
    tree = isl.Schedule.from_domain(domain)
    return tree.get_root().child(0).insert_partial_schedule(isl.MultiUnionPwAff(schedule))


def test_a_skewed_band_is_never_run_on_diagonals():
    """A time-skewed band's point loops have moving bounds (no vectorising) and its tiles are uneven:
    measured slower than the time step's parallel loops, so it stays sequential."""
    assert wave._skewed(_band("[n] -> [{ S[t, i] -> [(t)] }, { S[t, i] -> [(t + i)] }]"))
    assert wave._skewed(_band("[n] -> [{ S[t, i] -> [(t)] }, { S[t, i] -> [(2t + i)] }]"))
    assert not wave._skewed(_band("[n] -> [{ S[t, i] -> [(t)] }, { S[t, i] -> [(i + 1)] }]"))


def _cholesky(n: int):
    kernel = dataclasses.replace(BY_NAME["cholesky"], sizes=MappingProxyType({"N": n}))
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines)
    return kernel, prog


@pytest.mark.parametrize("n", [160, 173])
def test_polybench_cholesky_on_diagonals_matches_gcc(n):
    kernel, prog = _cholesky(n)
    data = inputs(kernel)
    want = GccKernel(kernel.path, kernel.function, kernel.defines)(**data)["A"]
    params = {p: n for p in prog.params}
    sched = pf.schedule(prog, target="c", params=params)
    assert "wavefront: every loop carries a dependence" in sched.explain()
    for threads in (1, 2):  # the wavefront's code on one thread and on two
        exe = pf.compile_schedule(sched, threads=threads)
        A = np.array(data["A"], copy=True)
        exe(A=A, **params)
        np.testing.assert_allclose(A, want, rtol=1e-9, atol=1e-9)
    assert _diagonal_loops(exe.code.text)


def test_cholesky_on_one_thread_keeps_its_tiles_in_order():
    _, prog = _cholesky(160)
    sched = pf.schedule(prog, target="c", params={p: 160 for p in prog.params}, threads=1)
    assert all(not k.wavefront for k in sched.kernels)
