"""``#pragma omp simd`` on innermost loops that polyfuse proves dependence-free (``codegen/c_openmp.simd_safe``).

gcc vectorises most innermost loops on its own, but gives up on some it cannot analyse (gemver's fused
column tiles: "complicated access pattern"); the pragma passes on what the dependence analysis proved.
A loop that carries a dependence, walks memory with a stride, or writes a local scalar gets none.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from tests.c_oracle import check_against_gcc
from tests.kernels import BY_NAME, inputs

N, M = pf.params("N M")


@pf.program
def carried(A: pf.f32[N, M]):
    for i in range(N):
        for j in range(1, M):
            A[i, j] = A[i, j - 1] * 0.5 + A[i, j]


@pf.program
def transposed(A: pf.f32[N, M], B: pf.f32[M, N]):
    for i in range(N):
        for j in range(M):
            B[j, i] = A[i, j] * 2.0


@pf.program
def independent(A: pf.f32[N, M], B: pf.f32[N, M]):
    for i in range(N):
        for j in range(1, M):
            B[i, j] = A[i, j] + A[i, j - 1]


def _simd_loops(text: str) -> int:
    """Loops given the pragma: a loop printed with shifted reads (``c_shift.py``) is one loop whose head and
    tail both carry it."""
    return text.count("#pragma omp simd\n") - text.count("shifted reads kept in vector registers")


def test_gemvers_fused_column_tiles_get_the_pragma_and_equal_gccs_build() -> None:
    k = BY_NAME["gemver"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    text = pf.codegen(pf.schedule(prog, target="c", params={"n": 400})).text
    fused = text[text.index("/* kernel kernel0"):text.index("/* kernel kernel1")]
    assert "S0 */" in fused and "S1 */" in fused and _simd_loops(fused) >= 1
    pragma = fused.index("#pragma omp simd\n")
    assert "A[" in fused[pragma:].splitlines()[2] and "S0" in fused[pragma:].splitlines()[2]  # right above the fused body
    for n in (7, 37, 130):
        kn = dataclasses.replace(k, sizes=MappingProxyType({"N": n}))
        check_against_gcc(kn.path, kn.function, dict(inputs(kn)), defines=kn.defines, assume=kn.assume)


@pytest.mark.parametrize("prog, expected", [(carried, 0), (transposed, 0), (independent, 1)])
def test_only_dependence_free_contiguous_loops_get_the_pragma(prog: pf.Program, expected: int) -> None:
    """A loop carrying ``A[i, j - 1] -> A[i, j]`` and one writing ``B[j, i]`` along ``j`` get none."""
    for params in ({"N": 37, "M": 129}, None):
        sched = pf.schedule(prog, target="c", params=params, tile=None)
        assert _simd_loops(pf.codegen(sched).text) == expected, params


@pytest.mark.parametrize("prog", [carried, transposed, independent])
def test_the_printed_loops_equal_the_reference(prog: pf.Program) -> None:
    rng = np.random.default_rng(3)
    args = {"A": rng.uniform(-1, 1, (37, 129)).astype(np.float32)}
    if "B" in prog.arrays:
        args["B"] = np.zeros(prog.arrays["B"].concrete_shape({"N": 37, "M": 129}), np.float32)
    got = {n: a.copy() for n, a in args.items()}
    want = {n: a.copy() for n, a in args.items()}
    pf.compile(prog, target="c", tile=None)(**got)
    pf.reference(prog)(**want)
    for n in args:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-6, atol=1e-6)


def test_a_loop_writing_a_local_scalar_gets_no_plain_pragma() -> None:
    """(One copy of the scalar would be shared by the lanes: such loops are left to the reduction clauses.)"""
    k = BY_NAME["gemver"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    text = pf.codegen(pf.schedule(prog, target="c", params={"n": 400})).text
    for pragma in [i for i in range(len(text)) if text.startswith("#pragma omp simd\n", i)]:
        loop_body = text[pragma:].split("}")[0]
        assert "pf_acc" not in loop_body


@pf.program
def row_extremes(X: pf.f32[N, M], hi: pf.f32[N], lo: pf.f64[N]):
    for i in range(N):
        m = -1e30
        s = 1e30
        for j in range(M):
            m = max(m, X[i, j])
            s = min(X[i, j] * 1.0, s)
        hi[i] = m
        lo[i] = s


def test_a_max_reduction_under_simd_compares_once_per_element_and_still_skips_nans() -> None:
    """Under ``omp simd reduction(max:m)`` each lane's ``m`` starts at the identity, so the update needs no NaN test
    of ``m`` (``pf_fmax_lane_*``: a softmax row's max 2.7x faster); a NaN element is still skipped, as C's
    ``fmaxf`` does and the reference interpreter does."""
    sizes = {"N": 5, "M": 37}
    code = pf.codegen(pf.schedule(row_extremes, target="c", params=sizes))
    assert "m = pf_fmax_lane_f64(m, (double)(X[" in code.text and "s = pf_fmin_lane_f64(s, (double)(X[" in code.text
    x = np.random.default_rng(3).uniform(-4, 4, (5, 37)).astype(np.float32)
    x[1, 7] = x[2, 0] = x[2, 36] = np.nan
    x[3, :] = np.nan  # a row of NaNs only: the starting value stays
    got = {"X": x, "hi": np.zeros(5, np.float32), "lo": np.zeros(5, np.float64)}
    want = {k: v.copy() for k, v in got.items()}
    pf.compile(row_extremes, target="c", params=sizes)(**got)
    pf.reference(row_extremes)(**want)
    np.testing.assert_array_equal(got["hi"], want["hi"])
    np.testing.assert_array_equal(got["lo"], want["lo"])
    assert got["hi"][1] == np.nanmax(x[1]) and got["hi"][3] == np.float32(-1e30)
