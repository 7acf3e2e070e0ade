"""Unsigned C types against gcc (:mod:`tests.c_oracle`): ``unsigned short``/``unsigned``/``unsigned long``,
``uint32_t``/``uint64_t``/``size_t``, unsigned literals and casts mean what gcc makes of them, in values
(division, ``%``, ``>>``, comparisons past 2**31, wrap-around, the usual arithmetic conversions, conversions to
and from float) and as affine sizes and loop variables; an unsigned affine expression that could wrap around
is refused with an error naming the file, line and construct."""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.runtime import cpu
from tests.c_oracle import check_against_gcc

pytestmark = pytest.mark.skipif(not cpu.available(), reason="needs a C compiler")

I32 = np.array([0, 1, -1, -7, 7, 2**31 - 1, -(2**31), -2, 3, 100], dtype=np.int32)
U32 = np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 3, 7, 2**31 + 5, 2**32 - 2, 100], dtype=np.uint32)
U64 = np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, 2**32, 5, 2**63 - 1], dtype=np.uint64)

SCALARS = """
void unsigned_scalars(int n, int a[n], unsigned b[n], unsigned q[n], int c[n], double e[n], long l[n], unsigned w[n]) {
  int i;
#pragma scop
  for (i = 0; i < n; i++) {
    unsigned u = a[i];
    q[i] = u / 3 + (u >> 1) + u % 7;
    c[i] = (u > 2147483648u) + 2 * (a[i] < 3u) + 4 * (b[i] >= 2147483648u);
    e[i] = u - 5 + 0.5;
    l[i] = u + 1L - 2 * (long) u;
    w[i] = 0u - b[i] * 3u + (unsigned) a[i] / 2 - (-b[i] >> 3);
  }
#pragma endscop
}
"""


def test_unsigned_scalars_match_gcc() -> None:
    z = np.zeros(10)
    check_against_gcc(SCALARS, "unsigned_scalars", {"a": I32, "b": U32, "q": z, "c": z, "e": z, "l": z, "w": z})


ARRAYS = """
#include <stdint.h>
#include <stddef.h>
void unsigned_arrays(int n, uint32_t a[n], uint64_t b[n], unsigned short s[n], size_t z[n], uint32_t r[n], uint64_t t[n],
                     unsigned short v[n], double d[n], int k[n]) {
  int i;
#pragma scop
  for (i = 0; i < n; i++) {
    r[i] = a[i] * 2654435761u ^ (a[i] >> 7) | (a[i] << 3);
    t[i] = b[i] / 3 - (b[i] % 1000) + a[i] + (b[i] >> 60) * 18446744073709551615ul;
    v[i] = s[i] * s[i] - 1;
    z[i] = z[i] - 1 + (size_t) i;
    d[i] = (double) b[i] + a[i] / 2.0f + (s[i] - 70000);
    k[i] = (a[i] - 5u) < 10u ? (int) a[i] : (int) (b[i] > a[i]);
  }
#pragma endscop
}
"""


def test_unsigned_arrays_match_gcc() -> None:
    z = np.zeros(10)
    s = np.array([0, 1, 65535, 32768, 300, 7, 65534, 2, 255, 256], dtype=np.uint16)
    check_against_gcc(ARRAYS, "unsigned_arrays", {"a": U32, "b": U64, "s": s, "z": U64.copy(), "r": z, "t": z, "v": z, "d": z, "k": z},
                      rtol=1e-6)


CONVERSIONS = """
void unsigned_conversions(int n, double f[n], unsigned u[n], unsigned long w[n], float g[n], int a[n], long m[n]) {
  int i;
#pragma scop
  for (i = 0; i < n; i++) {
    u[i] = f[i];
    w[i] = f[i] * 1e9;
    g[i] = (float) w[i] + (unsigned) a[i];
    m[i] = (long) (unsigned) a[i] + (unsigned long) a[i] / 2;
  }
#pragma endscop
}
"""


def test_unsigned_conversions_match_gcc() -> None:
    f = np.array([0.0, 0.5, 1.9, 2147483647.0, 2147483648.5, 4294967295.0, 3.0, 1e3, 7.25, 4e9])
    z = np.zeros(10)
    check_against_gcc(CONVERSIONS, "unsigned_conversions", {"f": f, "u": z, "w": z, "g": z, "a": I32, "m": z}, rtol=1e-6)


SIZES = """
#include <stddef.h>
void unsigned_sizes(unsigned n, size_t m, double A[n], double B[n], double C[m][n], double D[n], unsigned long E[n]) {
  const unsigned K = -1;
#pragma scop
  for (unsigned i = 0; i < n; i++)
    B[i] = A[i / 2] + A[(n - 1) / 2] + (i - n) + (double) (i - 2u) + K;
  for (size_t j = 0; j < m; j++)
    for (unsigned i = n; i > 0; i--)
      C[j][i - 1] = A[i - 1] * j;
  for (unsigned i = 0; i < n; i++)
    if (i % 2u == 1 && n - i > 2)
      D[i] = A[i] - i;
  for (unsigned i = 0; i < n; i++)
    E[i] = n - i - 5 + m * i;
#pragma endscop
}
"""


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_unsigned_sizes_and_loop_variables_match_gcc(n: int) -> None:
    rng = np.random.default_rng(n)
    args = {"A": rng.standard_normal(n), "B": np.zeros(n), "C": np.zeros((3, n)), "D": np.zeros(n), "E": np.zeros(n)}
    check_against_gcc(SIZES, "unsigned_sizes", args, assume="n >= 1")


def _error(source: str, **kw: object) -> str:
    with pytest.raises(pf.SourceError) as info:
        pf.from_c(source, **kw)
    return str(info.value)


def test_unsigned_bound_that_wraps_is_refused() -> None:
    src = "void f(unsigned n, double A[n]) {\n#pragma scop\n  for (unsigned i = 0; i < n - 1; i++)\n    A[i] = 1.0;\n#pragma endscop\n}\n"
    msg = _error(src)
    assert ":3:" in msg and "`n - 1`" in msg and "wraps around below 0" in msg and "assume=" in msg
    prog = pf.from_c(src, assume="n >= 1")  # with the assumption, it is exact
    check_against_gcc(src, "f", {"A": np.zeros(4)}, program=prog)


def test_unsigned_loop_that_never_ends_in_c_is_refused() -> None:
    src = "void f(int n, double A[n]) {\n  unsigned i;\n#pragma scop\n  for (i = n; i >= 0; i--)\n    A[i - 1] = 1.0;\n#pragma endscop\n}\n"
    msg = _error(src)
    assert ":4:" in msg and "goes below 0" in msg and "`i >= 0`" in msg


def test_signed_value_compared_with_unsigned_is_refused_where_negative() -> None:
    src = "void f(unsigned n, double A[n]) {\n  int i;\n#pragma scop\n  for (i = 0; i < n; i++)\n    if (i - 3 < n)\n      A[i] = 1.0;\n#pragma endscop\n}\n"
    msg = _error(src)
    assert ":5:" in msg and "`i - 3`" in msg and "`unsigned int`" in msg
    src = "void f(unsigned n, double A[n]) {\n  int i;\n#pragma scop\n  for (i = -2; i < n; i++)\n    A[i + 2] = 1.0;\n#pragma endscop\n}\n"
    assert "`-2`" in _error(src)


def test_unsigned_alias_that_wraps_is_refused() -> None:
    src = ("void f(int n, double A[n]) {\n  unsigned last = n - 1;\n  int i;\n#pragma scop\n  if (last < 5)\n"
           "    for (i = 0; i < n; i++)\n      A[i] = 1.0;\n#pragma endscop\n}\n")
    msg = _error(src)
    assert "`n - 1`" in msg and "wraps around" in msg
    # inside the loop, n >= 1: the same alias cannot wrap there, and is exact
    src = src.replace("  if (last < 5)\n    for (i = 0; i < n; i++)\n", "  for (i = 0; i < n; i++)\n    if (i < last)\n")
    check_against_gcc(src, "f", {"A": np.zeros(5)})


def test_unsigned_dtypes_in_the_dsl() -> None:
    N = pf.params("N")

    @pf.program
    def halve(A: pf.u32[N], B: pf.u64[N], C: pf.u16[N]):
        for i in range(N):
            B[i] = pf.u64(A[i]) // 2 + B[i] % 3
            C[i] = C[i] - 1

    a, b, c = U32.copy(), U64.copy(), np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 65535], dtype=np.uint16)
    want_b = (a.astype(np.uint64) // 2 + b % 3).astype(np.uint64)
    want_c = (c - np.uint16(1)).astype(np.uint16)
    for run in (pf.reference(halve), pf.compile(halve, target="c")):
        bb, cc = b.copy(), c.copy()
        run(A=a, B=bb, C=cc)
        np.testing.assert_array_equal(bb, want_b)
        np.testing.assert_array_equal(cc, want_c)
