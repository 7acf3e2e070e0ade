"""A scalar accumulator stored into an array element (``acc = 0; acc += ...; C[i, j] = acc``) is scheduled
exactly like the same reduction written into the element (``schedule/accumulators.py``): the same kernels,
tiles and micro-tiles on C and CUDA, results equal to the reference at odd sizes, and no rewrite where
it would change what the program computes."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as examples
from polyfuse.runtime import cuda_sim
from polyfuse.schedule.accumulators import forward_accumulators
from tests.kernels import BY_NAME

N, M, K = pf.params("N M K")


mm_acc = examples.gemm_acc  # acc = 0; acc += A[i, k] * B[k, j]; C[i, j] = acc


@pf.program
def mm_update(A: pf.f32[N, K], B: pf.f32[K, M], C: pf.f32[N, M]):
    for i in range(N):
        for j in range(M):
            C[i, j] = 0.0
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j]


@pf.program
def row_max(A: pf.f32[N, K], C: pf.f32[N]):
    for i in range(N):
        m = -1e30
        for k in range(K):
            m = pf.max(m, A[i, k])
        C[i] = m


@pf.program
def norms(A: pf.f32[N, K], C: pf.f32[N]):
    for i in range(N):
        s = 0.0
        for k in range(K):
            s += A[i, k] * A[i, k]
        C[i] = pf.sqrt(s)  # not a plain store: stays a scalar


@pf.program
def reads_target(A: pf.f32[N, K], C: pf.f32[N]):
    for i in range(N):
        s = 0.0
        for k in range(K):
            s += A[i, k] * C[i]  # reads the element the store writes: forwarding would change it
        C[i] = s


WIDER = """
void wider(int n, int k, float A[n][k], float C[n]) {
#pragma scop
  for (int i = 0; i < n; i++) {
    double s = 0.0;
    for (int j = 0; j < k; j++)
      s += A[i][j];
    C[i] = s;  /* a double sum stored as float: forwarding would sum in float */
  }
#pragma endscop
}
"""


def _shape(sched: pf.Schedule) -> list:
    return [(k.statements[-1:], k.grid, k.block, k.tile_sizes, k.parallel_depth) for k in sched.kernels]


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_the_accumulator_form_gets_what_the_update_form_gets(target: str) -> None:
    sizes = {"N": 512, "M": 512, "K": 512}
    acc, upd = pf.schedule(mm_acc, target=target, params=sizes), pf.schedule(mm_update, target=target, params=sizes)
    assert _shape(acc) == _shape(upd)
    assert acc.traffic().total_bytes == upd.traffic().total_bytes
    assert "the accumulator 'acc' is updated in C[i, j] directly" in acc.explain()
    if target == "c":
        assert "microtile" in str(acc.tree)
    assert [s.name for s in mm_acc.statements] == ["S0", "S1", "S2"]  # (the user's program is unchanged)


@pytest.mark.parametrize("target", ["c", "cuda-sim"])
@pytest.mark.parametrize("n, m, k", [(1, 1, 1), (7, 5, 3), (37, 29, 41), (130, 66, 257)])
def test_forwarded_accumulators_equal_the_reference(target: str, n: int, m: int, k: int) -> None:
    if target == "cuda-sim" and not cuda_sim.available():
        pytest.skip("g++ is not on PATH")
    rng = np.random.default_rng(n)
    a, b = rng.random((n, k), np.float32), rng.random((k, m), np.float32)
    want = np.zeros((n, m), np.float32)
    pf.reference(mm_acc)(A=a, B=b, C=want)
    got = pf.compile(mm_acc, target=target)(A=a, B=b)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    want_max = np.zeros(n, np.float32)
    pf.reference(row_max)(A=a, C=want_max)
    np.testing.assert_array_equal(pf.compile(row_max, target=target)(A=a), want_max)


def test_only_contractions_with_plain_stores_of_the_same_type_not_reading_the_target_are_forwarded() -> None:
    assert len(forward_accumulators(mm_acc)[0].statements) == 2
    for prog in (row_max, norms, reads_target, pf.from_c(WIDER)):  # (row_max: a row reduction, no operand reused)
        out, notes = forward_accumulators(prog)
        assert out is prog and not notes, prog.name


def test_explicit_schedules_of_either_program_are_accepted() -> None:
    """``to_text()`` prints the forwarded program's schedule (no store statement), which reads back for the
    user's program; a schedule the user writes for their own statements keeps the accumulator."""
    for target in ("c", "cuda"):
        sched = pf.schedule(mm_acc, target=target)
        again = pf.schedule(mm_acc, target=target, schedule=sched.to_text())
        assert [s.name for s in again.program.statements] == ["S0", "S1"]
    own = "[N, K, M] -> { S0[i, j] -> [i, j, 0, 0]; S1[i, j, k] -> [i, j, 1, k]; S2[i, j] -> [i, j, 2, 0] }"
    kept = pf.schedule(mm_acc, target="c", schedule=own)
    assert [s.name for s in kept.program.statements] == ["S0", "S1", "S2"] and kept.contracted == {"acc"}


GEMM_ACC_C = """
void gemm_acc(int ni, int nj, int nk, float alpha, float C[ni][nj], float A[ni][nk], float B[nk][nj]) {
#pragma scop
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nj; j++) {
      float acc = 0.0f;
      for (int k = 0; k < nk; k++)
        acc += alpha * A[i][k] * B[k][j];
      C[i][j] = acc;
    }
#pragma endscop
}
"""


@pytest.mark.parametrize("ni, nj, nk", [(1, 1, 1), (7, 37, 5), (130, 66, 257)])
def test_a_c_contraction_with_an_accumulator_equals_gccs_build(ni: int, nj: int, nk: int) -> None:
    """The C frontend's accumulator form, forwarded and micro-tiled, against gcc's own build of the source."""
    from tests.c_oracle import check_against_gcc

    assert forward_accumulators(pf.from_c(GEMM_ACC_C))[1]  # (forwarded)
    rng = np.random.default_rng(ni)
    args = {"ni": ni, "nj": nj, "nk": nk, "alpha": np.float32(1.5), "C": np.zeros((ni, nj), np.float32),
            "A": rng.random((ni, nk)).astype(np.float32), "B": rng.random((nk, nj)).astype(np.float32)}
    check_against_gcc(GEMM_ACC_C, "gemm_acc", args, rtol=1e-4, atol=1e-5)


def test_ludcmps_lu_accumulators_are_forwarded_and_its_dot_products_kept() -> None:
    """ludcmp's ``w`` serves four loop nests in turn, each ``w = ...; w -= ...; ... = w``. In the two LU
    nests the sum reads ``A[k][j]`` a row apart at every ``k`` and the element's own value starts it
    (``w = A[i][j]``): ``w`` is forwarded into ``A[i][j]`` (the reload dropped, ``A[i][j] = w / A[j][j]``
    kept as a final step reading the element), so that the scheduler can put ``j`` innermost. The
    substitutions are dot products of contiguous rows: they keep the scalar."""
    k = BY_NAME["ludcmp"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    forwarded, notes = forward_accumulators(prog)
    assert [s.name for s in forwarded.statements] == ["S1", "S2", "S4", "S6", "S7", "S8", "S9", "S10", "S11"]
    assert {forwarded.statement(s).write.array for s in ("S1", "S2", "S4")} == {"A"} and "w" in forwarded.arrays
    assert [n.split(":")[0] for n in notes] == ["S1", "S4"] and "(S0 dropped)" in notes[0] and "(S3, S5 dropped)" in notes[1]
    sched = pf.schedule(prog, target="c", params={"n": 400})
    assert not sched.kernels[0].without_parallel_loop  # the LU nest runs in parallel (it was one thread)


@pytest.mark.parametrize("n", [1, 2, 7, 37, 130])
def test_forwarded_ludcmp_equals_gccs_build(n: int) -> None:
    """Against gcc's build of the source, at sizes with every remainder of the tiles."""
    from tests.c_oracle import check_against_gcc
    from tests.kernels import inputs

    k = dataclasses.replace(BY_NAME["ludcmp"], sizes=MappingProxyType({"N": n}))
    check_against_gcc(k.path, k.function, dict(inputs(k)), defines=k.defines, assume=k.assume, rtol=1e-9, atol=1e-9)


STORE_READS_ITS_ELEMENT_C = """
void bad(int n, double A[n][n], double C[n][n]) {
#pragma scop
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double w = A[i][j];
      for (int k = 0; k < n; k++)
        w += A[k][i] * A[k][j];
      C[i][j] = w + C[i][j];
    }
#pragma endscop
}
"""


def test_a_store_that_reads_its_elements_old_value_keeps_the_accumulator() -> None:
    """``C[i][j] = w + C[i][j]`` reads the element's value from before the sum: forwarding the sum into
    ``C[i][j]`` would change it, so ``w`` stays."""
    assert forward_accumulators(pf.from_c(STORE_READS_ITS_ELEMENT_C))[1] == ()


SUM_READS_ITS_ELEMENT_C = """
void scale(int n, double A[n][n], double C[n][n]) {
#pragma scop
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double w = 0.0;
      for (int k = 0; k < n; k++)
        w += A[k][j] * C[i][j];
      C[i][j] = w;
    }
#pragma endscop
}
"""


def test_a_sum_that_reads_the_element_it_accumulates_into_keeps_the_accumulator() -> None:
    """``w += A[k][j] * C[i][j]`` reads ``C[i][j]``'s value from before the sum at every ``k``: in ``C[i][j]``
    itself it would read the partial sums instead."""
    assert forward_accumulators(pf.from_c(SUM_READS_ITS_ELEMENT_C))[1] == ()
