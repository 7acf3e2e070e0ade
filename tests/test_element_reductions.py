"""C target: an innermost loop whose statements each add into one array element that does not move along
it (``tmp[i] += A[i][j] * x[j]``: atax, gemver, gesummv, mvt) keeps those elements in scalar accumulators
under ``#pragma omp simd reduction(+:...)`` when ``reassociate=True`` (the default), instead of a load, an
add and a store per iteration; with ``reassociate=False`` the loop and the result are exactly the source's.
A statement keeping the maximum or minimum of its element and a value (nussinov's ``max_score``) keeps the
element in a register too, in the source order. Results are checked against the reference interpreter and
against gcc's build of the original C."""

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


NUSSINOV_LIKE = """
#define max_score(s1, s2) ((s1 >= s2) ? s1 : s2)
void fold(int n, int table[n][n]) {
#pragma scop
  for (int i = n - 1; i >= 0; i--)
    for (int j = i + 1; j < n; j++)
      for (int k = i + 1; k < %s; k++)
        table[i][j] = max_score(table[i][j], table[i][k] + table[%s][j]);
#pragma endscop
}
"""


@pytest.mark.parametrize("n", [1, 7, 37, 129])
def test_a_maximum_reading_other_elements_of_its_array_is_kept_in_a_register(n):
    """nussinov: ``table[i][j] = max(table[i][j], table[i][k] + table[k+1][j])`` with ``i < k < j`` never
    reads the element it keeps the maximum in: the element stays in a register across ``k``, in the source
    order (no SIMD clause), and the result is gcc's, negative values included."""
    from tests.c_oracle import GccKernel

    source = NUSSINOV_LIKE % ("j", "k + 1")
    prog = pf.from_c(source)
    exe = pf.compile(prog, target="c", params={"n": n})
    if n > 2:
        assert "int pf_acc0 = table[" in exe.code.text and "reduction(max" not in exe.code.text, exe.code.text
    table = np.random.default_rng(5).integers(-50, 50, (n, n), dtype=np.int32)
    want = GccKernel(source, "fold", None)(table=table)
    exe(table=table)
    np.testing.assert_array_equal(table, want["table"])


def test_a_maximum_reading_its_own_element_is_left_in_memory():
    """With ``k <= j`` the last ``k`` reads ``table[i][j]`` itself (``table[i][k]``, ``k = j``): no
    accumulator, the same result as gcc's."""
    from tests.c_oracle import GccKernel

    source = NUSSINOV_LIKE % ("j + 1", "k")
    prog = pf.from_c(source)
    exe = pf.compile(prog, target="c", params={"n": 37})
    assert "pf_acc" not in exe.code.text, exe.code.text
    table = np.random.default_rng(6).integers(-50, 50, (37, 37), dtype=np.int32)
    want = GccKernel(source, "fold", None)(table=table)
    exe(table=table)
    np.testing.assert_array_equal(table, want["table"])


MINIMA = """
void row_min(int n, int m, float A[n][m], float w[n]) {
#pragma scop
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      w[i] = (A[i][j] < w[i]) ? A[i][j] : w[i];
#pragma endscop
}
"""


@pytest.mark.parametrize("sizes", [(1, 1), (7, 37), (37, 129)])
def test_a_minimum_written_the_other_way_round_is_kept_in_a_register_bit_for_bit(sizes):
    """``w[i] = A[i][j] < w[i] ? A[i][j] : w[i]`` (the element second) is a minimum too; kept in the source
    order, floats come out bit for bit as gcc's (NaN included: a comparison with NaN keeps ``w[i]``)."""
    from tests.c_oracle import GccKernel

    n, m = sizes
    prog = pf.from_c(MINIMA)
    exe = pf.compile(prog, target="c", params={"n": n, "m": m})
    if m > 1:
        assert "float pf_acc0 = w[" in exe.code.text, exe.code.text
    rng = np.random.default_rng(7)
    A = rng.uniform(-1, 1, (n, m)).astype(np.float32)
    A[0, m // 2] = np.nan
    w = rng.uniform(-1, 1, n).astype(np.float32)
    want = GccKernel(MINIMA, "row_min", None)(A=A, w=w)
    exe(A=A, w=w)
    np.testing.assert_array_equal(w, want["w"])
