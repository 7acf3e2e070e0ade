"""The C SCoP frontend (``pf.from_c``): statements, domains, accesses and schedules against hand-written isl
values, dependences against the DSL's, and results of the reference interpreter against numpy."""

from pathlib import Path

import islpy as isl
import numpy as np
import pytest

import examples.kernels as K
import polyfuse as pf
from polyfuse.frontend.scop_c import from_c
from polyfuse.types import SizeExpr
from tests.c_oracle import check_against_gcc

GEMM = """
#define N 100
void gemm(int N_, int M, int K, float A[N_][K], float B[K][M], float C[N_][M], float alpha, float beta)
{
  int i, j, k;
  printf("outside the scop: ignored");
#pragma scop
  for (i = 0; i < N_; i++)
    for (j = 0; j < M; j++) {
      C[i][j] *= beta;
      for (k = 0; k < K; k++)
        C[i][j] += alpha * A[i][k] * B[k][j];
    }
#pragma endscop
  printf("after the scop: ignored too");
}
"""

JACOBI_2D = """
#include <stdio.h>
#include <polybench.h>
#ifndef N
# define N 120
#endif
#define TSTEPS 20
#define _PB_N POLYBENCH_LOOP_BOUND(N, n)
#define _PB_TSTEPS POLYBENCH_LOOP_BOUND(TSTEPS, tsteps)

static void kernel_jacobi_2d(int tsteps, int n, DATA_TYPE POLYBENCH_2D(A, N, N, n, n), DATA_TYPE POLYBENCH_2D(B, N, N, n, n))
{
  int t, i, j;
#pragma scop
  for (t = 0; t < _PB_TSTEPS; t++)
    {
      for (i = 1; i < _PB_N - 1; i++)
        for (j = 1; j < _PB_N - 1; j++)
          B[i][j] = SCALAR_VAL(0.2) * (A[i][j] + A[i][j-1] + A[i][1+j] + A[1+i][j] + A[i-1][j]);
      for (i = 1; i < _PB_N - 1; i++)
        for (j = 1; j < _PB_N - 1; j++)
          A[i][j] = SCALAR_VAL(0.2) * (B[i][j] + B[i][j-1] + B[i][1+j] + B[1+i][j] + B[i-1][j]);
    }
#pragma endscop
}

int main(int argc, char **argv)
{
  int n = N;
  POLYBENCH_2D_ARRAY_DECL(A, DATA_TYPE, N, N, n, n);
  fprintf(stderr, "%d\\n", n);
  return 0;
}
"""

LU = """
void kernel_lu(int n, double A[n][n])
{
#pragma scop
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i; j++) {
       for (int k = 0; k < j; k++)
          A[i][j] -= A[i][k] * A[k][j];
        A[i][j] /= A[j][j];
    }
   for (int j = i; j < n; j++)
       for (int k = 0; k < i; k++)
          A[i][j] -= A[i][k] * A[k][j];
  }
#pragma endscop
}
"""

BACKSUB = """
void backsub(int n, double U[n][n], double b[n], double x[n])
{
  int i, j;
  double w;
#pragma scop
  for (i = n - 1; i >= 0; i--) {
    w = b[i];
    for (j = i + 1; j < n; j++)
      w -= U[i][j] * x[j];
    x[i] = w / U[i][i];
  }
#pragma endscop
}
"""


def _map(text: str) -> isl.Map:
    return isl.Map(text)


def _set(text: str) -> isl.Set:
    return isl.Set(text)


def _access(stmt, kind: str, array: str) -> isl.Map:
    found = [a.relation for a in stmt.accesses if a.kind == kind and a.array == array]
    assert len(found) == 1, (kind, array, stmt.accesses)
    return found[0]


# ----- gemm -------------------------------------------------------------------------------------------
def test_gemm_statements_domains_accesses():
    p = from_c(GEMM)
    assert p.name == "gemm" and p.params == ("N_", "M", "K")
    assert list(p.arguments) == ["A", "B", "C", "alpha", "beta"]
    assert {n: a.role for n, a in p.arrays.items()} == {"A": "input", "B": "input", "C": "inout"}
    assert p.arrays["A"].dtype is pf.f32 and p.scalars["alpha"] is pf.f32
    s0, s1 = p.statements
    assert (s0.op, s1.op) == ("*=", "+=") and (s0.line, s1.line) == (10, 12)
    assert s1.text == "C[i][j] += alpha * A[i][k] * B[k][j]"
    assert s1.domain.is_equal(_set("[N_, M, K] -> { S1[i, j, k] : 0 <= i < N_ and 0 <= j < M and 0 <= k < K }"))
    assert _access(s1, "read", "A").is_equal(_map("[N_, M, K] -> { S1[i, j, k] -> A[i, k] : 0 <= i < N_ and 0 <= j < M and 0 <= k < K }"))
    assert _access(s1, "read", "B").is_equal(_map("[N_, M, K] -> { S1[i, j, k] -> B[k, j] : 0 <= i < N_ and 0 <= j < M and 0 <= k < K }"))
    assert _access(s0, "update", "C").is_equal(_map("[N_, M, K] -> { S0[i, j] -> C[i, j] : 0 <= i < N_ and 0 <= j < M }"))


def test_gemm_dependences_equal_the_dsl_ones():
    c = from_c(GEMM.replace("#define N 100", "").replace("N_", "N"))
    dsl = K.gemm.dependences()
    deps = c.dependences()
    for kind in ("flow", "anti", "output"):
        assert getattr(deps, kind).is_equal(getattr(dsl, kind)), kind
    assert c.schedule.get_map().is_equal(K.gemm.schedule.get_map())


def test_gemm_reference_matches_numpy():
    p = from_c(GEMM)
    rng = np.random.default_rng(1)
    a, b, c = (rng.random(s, dtype=np.float32) for s in ((5, 7), (7, 4), (5, 4)))
    want = np.float32(1.5) * a @ b + np.float32(0.5) * c
    pf.reference(p)(A=a, B=b, C=c, alpha=np.float32(1.5), beta=np.float32(0.5))
    np.testing.assert_allclose(c, want, rtol=1e-5)


# ----- PolyBench style --------------------------------------------------------------------------------
def test_jacobi_2d_polybench_macros():
    p = from_c(JACOBI_2D)
    assert p.name == "kernel_jacobi_2d" and p.params == ("tsteps", "n")
    assert p.arrays["A"].dtype is pf.f64 and p.arrays["A"].shape == (SizeExpr((("n", 1),)),) * 2
    s0, s1 = p.statements
    assert s0.domain.is_equal(_set("[tsteps, n] -> { S0[t, i, j] : 0 <= t < tsteps and 1 <= i < n - 1 and 1 <= j < n - 1 }"))
    want = _map("[tsteps, n] -> { S0[t, i, j] -> A[i + 1, j] }").intersect_domain(s0.domain)
    assert sum(a.relation.is_equal(want) for a in s0.reads) == 1
    # the same dependences as the DSL's jacobi_2d once the names agree
    dsl = K.jacobi_2d.dependences()
    renamed = from_c(JACOBI_2D.replace("tsteps", "T").replace("int n", "int N").replace(", n, n)", ", N, N)")
                     .replace("POLYBENCH_LOOP_BOUND(N, n)", "N").replace("POLYBENCH_LOOP_BOUND(TSTEPS, T)", "T")
                     .replace("# define N 120", "").replace("int n = N;", ""))
    for kind in ("flow", "anti", "output"):
        assert getattr(renamed.dependences(), kind).is_equal(getattr(dsl, kind)), kind


def test_jacobi_2d_reference_matches_numpy():
    p = from_c(JACOBI_2D)
    rng = np.random.default_rng(2)
    a, b = rng.random((8, 8)), np.zeros((8, 8))
    wa, wb = a.copy(), b.copy()
    for _ in range(3):
        wb[1:-1, 1:-1] = 0.2 * (wa[1:-1, 1:-1] + wa[1:-1, :-2] + wa[1:-1, 2:] + wa[2:, 1:-1] + wa[:-2, 1:-1])
        wa[1:-1, 1:-1] = 0.2 * (wb[1:-1, 1:-1] + wb[1:-1, :-2] + wb[1:-1, 2:] + wb[2:, 1:-1] + wb[:-2, 1:-1])
    pf.reference(p)(A=a, B=b, tsteps=3)
    np.testing.assert_allclose(a, wa)
    np.testing.assert_allclose(b, wb)


def test_lu_matches_dsl_and_numpy():
    p = from_c(LU)
    assert [s.op for s in p.statements] == ["-=", "=", "-="]
    s1 = p.statements[1]  # A[i][j] /= A[j][j] is a read and a write of A[i][j]
    assert _access(s1, "write", "A").is_equal(_map("[n] -> { S1[i, j] -> A[i, j] : 0 <= j < i < n }"))
    assert len([a for a in s1.reads if a.relation.is_equal(_map("[n] -> { S1[i, j] -> A[i, j] : 0 <= j < i < n }"))]) == 1
    renamed = from_c(LU.replace("int n", "int N").replace("[n]", "[N]").replace("< n", "< N"))
    for kind in ("flow", "anti", "output"):
        assert getattr(renamed.dependences(), kind).is_equal(getattr(K.lu.dependences(), kind)), kind
    rng = np.random.default_rng(3)
    a = rng.random((6, 6)) + 6 * np.eye(6)
    a0 = a.copy()
    pf.reference(p)(A=a)
    lower, upper = np.tril(a, -1) + np.eye(6), np.triu(a)
    np.testing.assert_allclose(lower @ upper, a0, rtol=1e-10)


def test_decreasing_loop_back_substitution():
    p = from_c(BACKSUB)
    s0 = p.statements[0]
    assert s0.domain.is_equal(_set("[n] -> { S0[i] : 0 <= i < n }"))
    # the source order runs i downwards: the band member of the i loop is -i
    want_sched = isl.UnionMap("[n] -> { S0[i] -> [-i, 0, 0] : 0 <= i < n; S1[i, j] -> [-i, 1, j] : 0 <= i < j < n; "
                              "S2[i] -> [-i, 2, 0] : 0 <= i < n }")
    assert p.schedule.get_map().is_equal(want_sched)
    # x[j] written by S2(j) is read by S1(i, j) for every i < j: a flow from larger i to smaller i
    flow = p.dependences().flow
    assert isl.UnionMap("[n] -> { S2[j] -> S1[i, j] : 0 <= i < j < n }").is_subset(flow)
    rng = np.random.default_rng(4)
    u = np.triu(rng.random((5, 5))) + 5 * np.eye(5)
    b, x = rng.random(5), np.zeros(5)
    pf.reference(p)(U=u, b=b, x=x)
    np.testing.assert_allclose(u @ x, b)


def test_decreasing_loop_with_stride_and_forms():
    src = """
    void f(int n, double A[n]) {
      for (int i = n - 1; i >= 0; i -= 2) A[i] = 1.0;
      for (int i = n - 1; 0 <= i; i = i - 3) A[i] += 2.0;
      for (int i = 0; i < n; i = i + 2) A[i] *= 3.0;
      for (int i = 1; i <= n - 1; ++i) A[i] -= 1.0;
    }
    """
    p = from_c(src)
    s0, s1, s2, s3 = p.statements
    assert s0.domain.is_equal(_set("[n] -> { S0[i] : 0 <= i < n and (n - 1 - i) mod 2 = 0 }"))
    assert s1.domain.is_equal(_set("[n] -> { S1[i] : 0 <= i < n and (n - 1 - i) mod 3 = 0 }"))
    assert s2.domain.is_equal(_set("[n] -> { S2[i] : 0 <= i < n and i mod 2 = 0 }"))
    assert s3.domain.is_equal(_set("[n] -> { S3[i] : 1 <= i < n }"))
    a = np.zeros(7)
    pf.reference(p)(A=a)
    want = np.zeros(7)
    want[6::-2] = 1.0
    want[6::-3] += 2.0
    want[0::2] *= 3.0
    want[1:] -= 1.0
    np.testing.assert_allclose(a, want)
    for n in (1, 6, 7):
        check_against_gcc(src, "f", {"A": np.random.default_rng(n).uniform(-1, 1, n)}, program=p)


def test_min_max_bounds_and_ternary_values():
    src = """
    #define MIN(a, b) ((a) < (b) ? (a) : (b))
    #define MAX(a, b) ((a) > (b) ? (a) : (b))
    void band(int n, int m, double A[n][m], double B[n][m]) {
      for (int i = 0; i < n; i++)
        for (int j = MAX(0, i - 2); j < MIN(m, i + 3); j++)
          B[i][j] = MAX(A[i][j], 0.0);
    }
    """
    p = from_c(src)
    (s0,) = p.statements
    assert s0.domain.is_equal(_set("[n, m] -> { S0[i, j] : 0 <= i < n and 0 <= j < m and i - 2 <= j < i + 3 }"))
    a = np.random.default_rng(5).normal(size=(6, 5))
    b = np.full((6, 5), -7.0)
    pf.reference(p)(A=a, B=b)
    want = np.full((6, 5), -7.0)
    for i in range(6):
        for j in range(max(0, i - 2), min(5, i + 3)):
            want[i, j] = max(a[i, j], 0.0)
    np.testing.assert_allclose(b, want)
    check_against_gcc(src, "band", {"A": a, "B": np.full((6, 5), -7.0)}, program=p)


def test_vla_params_symbolic_shapes_and_if():
    src = """
    void f(int n, int m, float A[n][m + 1], float s[n]) {
      for (int i = 0; i < n; i++)
        for (int j = 0; j <= m; j++)
          if (j > 0 && !(i == j) || j == m)
            s[i] += A[i][j];
    }
    """
    p = from_c(src)
    assert p.arrays["A"].shape == (SizeExpr((("n", 1),)), SizeExpr((("m", 1),), 1))
    assert p.statements[0].domain.is_equal(
        _set("[n, m] -> { S0[i, j] : 0 <= i < n and 0 <= j <= m and ((j > 0 and i != j) or j = m) }"))


def test_globals_and_local_scalar():
    src = """
    #define N 16
    double A[N][N];
    double x[N], y[N];
    double scale = 2.0;
    const int HALF = N / 2;
    void mv(void) {
      int i, j;
      double acc;
    #pragma scop
      for (i = 0; i < N; i++) {
        acc = 0.0;
        for (j = 0; j < HALF; j++)
          acc += A[i][j] * x[j];
        y[i] = scale * acc;
      }
    #pragma endscop
    }
    """
    p = from_c(src)
    assert p.params == ()
    assert list(p.arguments) == ["A", "x", "y", "scale"]
    assert p.arrays["acc"].role == "temp" and p.arrays["acc"].ndim == 0
    assert p.statements[1].domain.is_equal(_set("{ S1[i, j] : 0 <= i < 16 and 0 <= j < 8 }"))
    rng = np.random.default_rng(6)
    a, x, y = rng.random((16, 16)), rng.random(16), np.zeros(16)
    pf.reference(p)(A=a, x=x, y=y, scale=2.0)
    np.testing.assert_allclose(y, 2.0 * a[:, :8] @ x[:8])


def test_constant_extents_with_int_params_assume_the_sizes_fit():
    src = """
    #define N 400
    void f(int n, double A[N][N], double x[N]) {
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
          x[i] += A[i][j];
    }
    """
    p = from_c(src)
    assert p.context.is_equal(_set("[n] -> { : 0 <= n <= 400 }"))
    # a subscript that overflows for every size is still an error
    with pytest.raises(pf.BoundsError):
        from_c(src.replace("x[i] +=", "x[i + 400] +="))


def test_defines_override_a_size_macro_and_assume():
    src = """
    #define N 400
    double A[N];
    void f(int m) {
      for (int i = 0; i < N; i++)
        for (int j = 0; j < m; j++)
          A[i] += 1.0;
    }
    """
    assert from_c(src).statements[0].domain.is_equal(_set("[m] -> { S0[i, j] : 0 <= i < 400 and 0 <= j < m }"))
    p = from_c(src, defines={"N": 8}, assume="m >= N && m <= 2 * N")
    assert p.arrays["A"].shape == (SizeExpr((), 8),)
    assert p.context.is_equal(_set("[m] -> { : 8 <= m <= 16 }"))


def test_region_inside_larger_function_and_file_path(tmp_path: Path):
    src = """#include <math.h>
#include <stdlib.h>
void helper(int n, double *p) { for (int i = 0; i < n; i++) p[i] = rand(); }
void kernel(int n, double A[n], double B[n]) {
  double *scratch = malloc(n * sizeof(double));
  helper(n, scratch);
  {
#pragma scop
    for (int i = 0; i < n; i++)
      B[i] = sqrt(fabs(A[i])) + expf(1.0f) * SCALAR_VAL(2.0);
#pragma endscop
  }
  free(scratch);
}
"""
    path = tmp_path / "k.c"
    path.write_text(src)
    p = from_c(str(path))
    assert p.name == "kernel" and p.filename == str(path) and p.statements[0].line == 10
    a, b = np.array([4.0, -9.0, 16.0]), np.zeros(3)
    pf.reference(p)(A=a, B=b)
    np.testing.assert_allclose(b, np.sqrt(np.abs(a)) + np.float32(np.exp(np.float32(1.0))) * 2.0, rtol=1e-6)
    with pytest.raises(pf.SourceError, match="`p` is a pointer"):
        from_c(str(path), function="helper")


def test_types_follow_c():
    src = """
    void f(int n, float A[n], double B[n], int C[n]) {
      for (int i = 0; i < n; i++) {
        A[i] = A[i] * 2.0f + (float) i;
        B[i] = A[i] * 0.5;
        C[i] = i * i / 2 + (int) B[i];
      }
    }
    """
    p = from_c(src)
    s0, s1, s2 = p.statements
    assert s0.value.dtype is pf.f32 and s1.value.dtype is pf.f64 and s2.value.dtype is pf.i32
    a, b, c = np.ones(4, np.float32), np.zeros(4), np.zeros(4, np.int32)
    pf.reference(p)(A=a, B=b, C=c)
    np.testing.assert_allclose(a, [2, 3, 4, 5])
    np.testing.assert_allclose(b, [1.0, 1.5, 2.0, 2.5])
    np.testing.assert_array_equal(c, [0 + 1, 0 + 1, 2 + 2, 4 + 2])
    rng = np.random.default_rng(9)  # and what gcc computes, negative values included
    check_against_gcc(src, "f", {"A": rng.uniform(-9, 9, 7).astype(np.float32), "B": np.zeros(7), "C": np.zeros(7, np.int32)},
                      program=p, rtol=1e-6, atol=1e-6)


def test_function_selection():
    two = "void a(int n, double X[n]) {\n#pragma scop\n for (int i = 0; i < n; i++) X[i] = 0.0;\n#pragma endscop\n}\n" \
          "void b(int n, double Y[n]) {\n#pragma scop\n for (int i = 0; i < n; i++) Y[i] = 1.0;\n#pragma endscop\n}\n"
    with pytest.raises(pf.SourceError, match="several functions hold a #pragma scop: a, b"):
        from_c(two)
    assert list(from_c(two, function="b").arrays) == ["Y"]
    with pytest.raises(pf.SourceError, match="no function named 'c'; functions defined: a, b"):
        from_c(two, function="c")


def test_public_api_exports_from_c():
    assert pf.from_c is from_c


def test_local_array_and_int_scalar_are_temporaries():
    src = """
    void f(int n, double A[n], double B[n]) {
      double T[n];
      int c;
      for (int i = 0; i < n; i++) T[i] = A[i] * 2;
      c = 0;
      for (int i = 0; i < n; i++) { c += 1; B[n - 1 - i] = T[i] + c; }
    }
    """
    p = from_c(src)
    assert {n: (a.role, a.dtype, a.ndim) for n, a in p.arrays.items() if a.role == "temp"} == {"T": ("temp", pf.f64, 1), "c": ("temp", pf.i32, 0)}
    assert list(p.arguments) == ["A", "B"]
    a, b = np.arange(4.0), np.zeros(4)
    pf.reference(p)(A=a, B=b)
    np.testing.assert_allclose(b, [10.0, 7.0, 4.0, 1.0])
    check_against_gcc(src, "f", {"A": np.random.default_rng(3).uniform(-5, 5, 6), "B": np.zeros(6)}, program=p)


def test_include_dirs_find_the_users_headers(tmp_path):
    """``include_dirs=`` (``-I DIR`` on the command line) is searched for ``#include`` files after the
    file's own folder; without it the error says how to give one."""
    (tmp_path / "hdr").mkdir()
    (tmp_path / "hdr" / "sizes.h").write_text("#define LEN 12\n#define SCALE 3.0\n")
    kernel = tmp_path / "k.c"
    kernel.write_text('#include "sizes.h"\nvoid k(double A[LEN], double B[LEN]) {\n#pragma scop\n'
                      "  for (int i = 0; i < LEN; i++) B[i] = SCALE * A[i];\n#pragma endscop\n}\n")
    with pytest.raises(pf.SourceError, match="sizes.h: No such file.*include_dirs= in pf.from_c, -I DIR"):
        pf.from_c(str(kernel))
    prog = pf.from_c(str(kernel), include_dirs=[str(tmp_path / "hdr")])
    a = np.arange(12, dtype=np.float64)
    b = np.zeros(12)
    pf.reference(prog)(A=a, B=b)
    np.testing.assert_array_equal(b, 3.0 * a)
    from polyfuse.cli.main import main

    assert main(["show", str(kernel), "-I", str(tmp_path / "hdr")]) == 0
