"""Kernels written as the PolyBench/C 4.2.1 distribution writes them, accepted as written (no ``assume=``,
no edit) and computing what gcc computes (:mod:`tests.c_oracle`).

Each kernel here holds one of the constructs that real distribution sources use and that polyfuse once
rejected: ``#include <polybench.h>``, ``static void kernel_*`` with ``POLYBENCH_1D`` parameters and
``_PB_N`` bounds; an access in bounds only for some sizes (``y[0] = -r[0];`` before the loop: a derived
assumption, shown by ``print(prog)`` and checked at call time); a ``typedef char base;`` element type; a
chained assignment ``a1 = a5 = k;``; and a scalar initialised before ``#pragma scop``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.runtime import cpu
from tests.c_oracle import check_against_gcc

pytestmark = pytest.mark.skipif(not cpu.available(), reason="needs a C compiler")

HEADER = """
#include <stdio.h>
#include <polybench.h>
#ifndef N
# define N 40
#endif
#ifndef _PB_N
# define _PB_N POLYBENCH_LOOP_BOUND(N, n)
#endif
"""

DURBIN = HEADER + """
static void kernel_durbin(int n, DATA_TYPE POLYBENCH_1D(r, N, n), DATA_TYPE POLYBENCH_1D(y, N, n))
{
  DATA_TYPE z[N];
  DATA_TYPE alpha, beta, sum;
  int i, k;
#pragma scop
  y[0] = -r[0];
  beta = SCALAR_VAL(1.0);
  alpha = -r[0];
  for (k = 1; k < _PB_N; k++) {
    beta = (1 - alpha * alpha) * beta;
    sum = SCALAR_VAL(0.0);
    for (i = 0; i < k; i++)
      sum += r[k - i - 1] * y[i];
    alpha = -(r[k] + sum) / beta;
    for (i = 0; i < k; i++)
      z[i] = y[i] + alpha * y[k - i - 1];
    for (i = 0; i < k; i++)
      y[i] = z[i];
    y[k] = alpha;
  }
#pragma endscop
}
"""

NUSSINOV = HEADER + """
typedef char base;
#define match(b1, b2) (((b1) + (b2)) == 3 ? 1 : 0)
#define max_score(s1, s2) ((s1 >= s2) ? s1 : s2)

static void kernel_nussinov(int n, base POLYBENCH_1D(seq, N, n), int POLYBENCH_2D(table, N, N, n, n))
{
  int i, j, k;
#pragma scop
  for (i = _PB_N - 1; i >= 0; i--) {
    for (j = i + 1; j < _PB_N; j++) {
      if (j - 1 >= 0)
        table[i][j] = max_score(table[i][j], table[i][j - 1]);
      if (i + 1 < _PB_N)
        table[i][j] = max_score(table[i][j], table[i + 1][j]);
      if (j - 1 >= 0 && i + 1 < _PB_N) {
        if (i < j - 1)
          table[i][j] = max_score(table[i][j], table[i + 1][j - 1] + match(seq[i], seq[j]));
        else
          table[i][j] = max_score(table[i][j], table[i + 1][j - 1]);
      }
      for (k = i + 1; k < j; k++)
        table[i][j] = max_score(table[i][j], table[i][k] + table[k + 1][j]);
    }
  }
#pragma endscop
}
"""

DERICHE = """
#include <polybench.h>
#define DATA_TYPE float
#define SCALAR_VAL(x) x##f
#define EXP_FUN(x) expf(x)
#define POW_FUN(x, y) powf(x, y)
#ifndef W
# define W 16
#endif
#ifndef H
# define H 12
#endif
#define _PB_W POLYBENCH_LOOP_BOUND(W, w)
#define _PB_H POLYBENCH_LOOP_BOUND(H, h)

static void kernel_deriche(int w, int h, DATA_TYPE alpha, DATA_TYPE POLYBENCH_2D(imgIn, W, H, w, h),
                           DATA_TYPE POLYBENCH_2D(y1, W, H, w, h))
{
  int i, j;
  DATA_TYPE ym1, ym2, xm1;
  DATA_TYPE k, a1, a2, a5, a6, b1, b2;
#pragma scop
  k = (SCALAR_VAL(1.0) - EXP_FUN(-alpha)) * (SCALAR_VAL(1.0) - EXP_FUN(-alpha))
      / (SCALAR_VAL(1.0) + SCALAR_VAL(2.0) * alpha * EXP_FUN(-alpha) - EXP_FUN(SCALAR_VAL(2.0) * alpha));
  a1 = a5 = k;
  a2 = a6 = k * EXP_FUN(-alpha) * (alpha - SCALAR_VAL(1.0));
  b1 = POW_FUN(SCALAR_VAL(2.0), -alpha);
  b2 = -EXP_FUN(SCALAR_VAL(-2.0) * alpha);
  for (i = 0; i < _PB_W; i++) {
    ym1 = SCALAR_VAL(0.0);
    ym2 = SCALAR_VAL(0.0);
    xm1 = SCALAR_VAL(0.0);
    for (j = 0; j < _PB_H; j++) {
      y1[i][j] = a1 * imgIn[i][j] + a2 * xm1 + b1 * ym1 + b2 * ym2 + a5 * a6;
      xm1 = imgIn[i][j];
      ym2 = ym1;
      ym1 = y1[i][j];
    }
  }
#pragma endscop
}
"""

CORRELATION = """
#include <polybench.h>
#ifndef M
# define M 6
#endif
#ifndef N
# define N 8
#endif
#define _PB_M POLYBENCH_LOOP_BOUND(M, m)
#define _PB_N POLYBENCH_LOOP_BOUND(N, n)

static void kernel_correlation(int m, int n, DATA_TYPE float_n, DATA_TYPE POLYBENCH_2D(data, N, M, n, m),
                               DATA_TYPE POLYBENCH_1D(mean, M, m), DATA_TYPE POLYBENCH_1D(stddev, M, m))
{
  int i, j;
  DATA_TYPE eps = SCALAR_VAL(0.1);
#pragma scop
  for (j = 0; j < _PB_M; j++) {
    mean[j] = SCALAR_VAL(0.0);
    for (i = 0; i < _PB_N; i++)
      mean[j] += data[i][j];
    mean[j] /= float_n;
  }
  for (j = 0; j < _PB_M; j++) {
    stddev[j] = SCALAR_VAL(0.0);
    for (i = 0; i < _PB_N; i++)
      stddev[j] += (data[i][j] - mean[j]) * (data[i][j] - mean[j]);
    stddev[j] /= float_n;
    stddev[j] = SQRT_FUN(stddev[j]);
    stddev[j] = stddev[j] <= eps ? SCALAR_VAL(1.0) : stddev[j];
  }
#pragma endscop
}
"""


def test_durbin_derives_n_at_least_one() -> None:
    prog = pf.from_c(DURBIN, function="kernel_durbin")
    text = str(prog)
    assert re.search(r"assumed: n > 0 .*`y\[0\]`", text), text
    assert prog.assumptions and prog.assumptions[0].access == "y[0]"
    assert "assumes n > 0" in pf.schedule(prog, target="c").explain()
    n = 9
    r = 0.5 ** np.arange(1, n + 1)
    check_against_gcc(DURBIN, "kernel_durbin", {"r": r, "y": np.zeros(n)}, program=prog)
    for run in (pf.reference(prog), pf.compile(prog, target="c")):
        with pytest.raises(pf.ShapeError, match=r"y\[0\]"):
            run(r=np.zeros(0), y=np.zeros(0))


def test_durbin_at_the_distribution_sizes_with_defines() -> None:
    prog = pf.from_c(DURBIN, function="kernel_durbin", defines={"N": 12})
    r = 0.4 ** np.arange(1, 13)
    check_against_gcc(DURBIN, "kernel_durbin", {"r": r, "y": np.zeros(12)}, defines={"N": 12}, program=prog)


@pytest.mark.parametrize("seed", [0, 1])
def test_nussinov_with_a_char_typedef(seed: int) -> None:
    prog = pf.from_c(NUSSINOV, function="kernel_nussinov")
    assert prog.arrays["seq"].dtype == pf.i8
    rng = np.random.default_rng(seed)
    n = 11
    seq = rng.integers(-2 if seed else 0, 4, n).astype(np.int8)
    table = rng.integers(-5 if seed else 0, 5, (n, n)).astype(np.int32)
    check_against_gcc(NUSSINOV, "kernel_nussinov", {"seq": seq, "table": table}, program=prog)


def test_deriche_with_chained_assignments_in_float() -> None:
    prog = pf.from_c(DERICHE, function="kernel_deriche")
    assert prog.arrays["y1"].dtype == pf.f32
    rng = np.random.default_rng(2)
    img = rng.uniform(0, 1, (16, 12)).astype(np.float32)
    check_against_gcc(DERICHE, "kernel_deriche", {"alpha": 0.25, "imgIn": img, "y1": np.zeros((16, 12), np.float32)},
                      program=prog, rtol=1e-5, atol=1e-5)


def test_correlation_with_eps_initialised_before_the_scop() -> None:
    prog = pf.from_c(CORRELATION, function="kernel_correlation")
    assert "eps" not in prog.arguments and "eps" not in prog.arrays  # a constant: 0.1
    rng = np.random.default_rng(3)
    data = rng.uniform(-10, 10, (8, 6))
    data[:, 0] = 3.0  # a constant column: its stddev 0 takes the `<= eps` branch
    check_against_gcc(CORRELATION, "kernel_correlation", {"float_n": 8.0, "data": data, "mean": np.zeros(6), "stddev": np.zeros(6)},
                      program=prog)


@pytest.mark.parametrize("defines", [{}, {"MINI_DATASET": 1}, {"DATA_TYPE_IS_FLOAT": 1}, {"POLYBENCH_USE_SCALAR_LB": 1, "N": 9}],
                         ids=["double", "mini", "float", "scalar-bounds"])
def test_a_source_file_in_the_distribution_layout(defines: dict) -> None:
    """``tests/kernels_pb/trisolv2.c``: a kernel header with dataset and data-type switches, <polybench.h>,
    static functions and a main; read as written, only ``-D`` switches given."""
    path = Path(__file__).resolve().parent / "kernels_pb" / "trisolv2.c"
    prog = pf.from_c(str(path), defines=defines)
    assert prog.name == "kernel_trisolv2"
    dtype = np.float32 if "DATA_TYPE_IS_FLOAT" in defines else np.float64
    assert prog.arrays["x"].dtype.numpy == dtype
    n = 9 if "N" in defines else 6
    rng = np.random.default_rng(n)
    lower = (np.tril(rng.uniform(-1, 1, (n, n))) + 3 * np.eye(n)).astype(dtype)
    args = {"L": lower, "x": np.zeros(n, dtype), "b": rng.uniform(-1, 1, n).astype(dtype), "norm": np.zeros(1, dtype)}
    if "POLYBENCH_USE_SCALAR_LB" in defines:  # _PB_N is the constant N: the arrays' n must be at least 9
        assert prog.context.is_equal(prog.assumptions[0].condition) and "assumed: n >= 9" in str(prog)
    else:
        assert [a.access for a in prog.assumptions] == ["x[n - 1]"]  # x[_PB_N - 1] after the loop: n >= 1
    tol = 1e-5 if dtype is np.float32 else 1e-9
    check_against_gcc(path, "kernel_trisolv2", args, defines=defines, program=prog, rtol=tol, atol=tol)
