"""C target: an innermost loop whose statements each add into one array element that does not move along
it (``tmp[i] += A[i][j] * x[j]``: atax, gemver, gesummv, mvt) keeps those elements in scalar accumulators
under ``#pragma omp simd reduction(+:...)`` when ``reassociate=True`` (the default), instead of a load, an
add and a store per iteration; with ``reassociate=False`` the loop and the result are exactly the source's.
Results are checked against the reference interpreter and against gcc's build of the original C."""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf

GESUMMV = """
void gesummv(int n, double alpha, double beta, double A[n][n], double B[n][n], double tmp[n], double x[n], double y[n]) {
#pragma scop
  for (int i = 0; i < n; i++) {
    tmp[i] = 0.0;
    y[i] = 0.0;
    for (int j = 0; j < n; j++) {
      tmp[i] = A[i][j] * x[j] + tmp[i];
      y[i] = B[i][j] * x[j] + y[i];
    }
    y[i] = alpha * tmp[i] + beta * y[i];
  }
#pragma endscop
}
"""

N = pf.params("N")


@pf.program
def row_sums(A: pf.f32[N, N], s: pf.f32[N], t: pf.f32[N]):
    for i in range(N):
        for j in range(N):
            s[i] += A[i, j]
            t[i] += A[i, j] * s[i]  # reads another accumulator: no promotion


def _inputs(prog: pf.Program, sizes: dict[str, int], seed: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    out: dict[str, object] = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            out[name] = rng.uniform(-1, 1, a.concrete_shape(sizes)).astype(a.dtype.numpy)
        elif name not in sizes:
            out[name] = 1.25
    return out


@pytest.mark.parametrize("n", [1, 7, 37, 129])
def test_gesummv_accumulates_in_registers_and_matches_the_reference(n):
    prog = pf.from_c(GESUMMV)
    exe = pf.compile(prog, target="c", params={"n": n})
    text = exe.code.text
    if n > 1:
        assert "#pragma omp simd reduction(+:pf_acc0) reduction(+:pf_acc1)" in text, text
    args = _inputs(prog, {"n": n})
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    exe(**args)
    pf.reference(prog)(**want, n=n)
    tol = 1e-12 * max(n, 1)
    for name in ("tmp", "y"):
        np.testing.assert_allclose(args[name], want[name], rtol=tol, atol=tol)


def test_exact_mode_keeps_the_source_order_bit_for_bit():
    prog = pf.from_c(GESUMMV)
    exe = pf.compile(prog, target="c", params={"n": 37}, reassociate=False)
    assert "pf_acc" not in exe.code.text and "omp simd" not in exe.code.text
    args = _inputs(prog, {"n": 37}, seed=1)
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    exe(**args)
    pf.reference(prog)(**want, n=37)
    for name in ("tmp", "y"):
        assert np.array_equal(args[name], want[name])


def test_a_statement_reading_another_accumulator_is_left_in_memory():
    exe = pf.compile(row_sums, target="c", params={"N": 37})
    assert "pf_acc" not in exe.code.text
    args = _inputs(row_sums, {"N": 37}, seed=2)
    want = {k: v.copy() for k, v in args.items()}
    exe(**args)
    pf.reference(row_sums)(**want)
    for name in ("s", "t"):
        np.testing.assert_allclose(args[name], want[name], rtol=1e-5, atol=1e-5)


TRISOLV_LIKE = """
void solve(int n, double L[n][n], double x[n], double b[n]) {
#pragma scop
  for (int i = 0; i < n; i++) {
    x[i] = b[i];
    for (int j = 0; j < %s; j++)
      x[i] -= L[i][j] * x[j];
    x[i] = x[i] / L[i][i];
  }
#pragma endscop
}
"""


def _solve_inputs(n: int) -> dict[str, object]:
    rng = np.random.default_rng(4)
    return {"L": rng.uniform(-1, 1, (n, n)) + n * np.eye(n), "x": rng.uniform(-1, 1, n), "b": rng.uniform(-1, 1, n)}


@pytest.mark.parametrize("n", [1, 7, 37, 129])
def test_a_subtraction_reading_other_elements_of_its_array_accumulates_in_a_register(n):
    """trisolv: ``x[i] -= L[i][j] * x[j]`` reads ``x``, but only elements ``j < i``, never the one it
    updates: the element stays in a register, ``-=`` under ``reduction(+:...)``; the result is gcc's."""
    from tests.c_oracle import GccKernel

    source = TRISOLV_LIKE % "i"
    prog = pf.from_c(source)
    exe = pf.compile(prog, target="c", params={"n": n})
    if n > 1:
        assert "pf_acc0 -= " in exe.code.text and "reduction(+:pf_acc0)" in exe.code.text, exe.code.text
    args = _solve_inputs(n)
    want = GccKernel(source, "solve", None)(**args)
    exe(**args)
    tol = 1e-12 * max(n, 1)
    np.testing.assert_allclose(args["x"], want["x"], rtol=tol, atol=tol)


def test_a_read_of_the_updated_element_itself_is_left_in_memory():
    """With ``j <= i`` the loop also reads ``x[i]`` (its last iteration): no accumulator, the source's order."""
    source = TRISOLV_LIKE % "i + 1"
    prog = pf.from_c(source)
    exe = pf.compile(prog, target="c", params={"n": 37})
    assert "pf_acc" not in exe.code.text
    args = _solve_inputs(37)
    want = {k: v.copy() for k, v in args.items()}
    exe(**args)
    pf.reference(prog)(**want, n=37)
    assert np.array_equal(args["x"], want["x"])
