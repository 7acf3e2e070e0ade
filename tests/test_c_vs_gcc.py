"""The C frontend against gcc (:mod:`tests.c_oracle`): every C test kernel, compiled by gcc from its source as
written, must compute what ``pf.from_c`` + ``pf.reference`` and ``pf.compile(target="c")`` compute, on
random inputs with negative and boundary values. Integers agree exactly, floats to rounding.

The 30 PolyBench-style kernels of ``tests/kernels`` run at their small test sizes; the small kernels here
each exercise one construct whose C meaning differs from a naive reading: integer ``/`` and ``%`` (truncating
toward zero, in values, subscripts, bounds and conditions), the usual arithmetic conversions and casts,
``char``/``short``/``long`` element types and ``typedef``s of them, chained and compound assignments,
``++``/``--`` statements, ``?:``, and scalars initialised before the ``#pragma scop``.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.runtime import cpu
from tests.c_oracle import assert_same, check_against_gcc
from tests.kernels import KERNELS, Kernel, inputs, tolerance
from tests.test_codegen_cuda import build_emulator, emulate

pytestmark = pytest.mark.skipif(not cpu.available(), reason="needs a C compiler")

RNG_SEEDS = (0, 1)


def kernel_args(kernel: Kernel, seed: int) -> dict:
    """The kernel's test inputs; integer kernels get a second draw with negative values too."""
    args = dict(inputs(kernel, seed))
    rng = np.random.default_rng(100 + seed)
    if seed and kernel.name == "floyd-warshall":
        args["path"] = rng.integers(-5, 20, args["path"].shape).astype(np.int32)
    if seed and kernel.name == "nussinov":
        args["table"] = rng.integers(-9, 9, args["table"].shape).astype(np.int32)
    for p in ("tsteps", "tmax"):
        if p.upper() in kernel.sizes:
            args[p] = kernel.sizes[p.upper()]
    return args


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_polybench_style_kernel_matches_gcc(kernel: Kernel) -> None:
    tol = tolerance(kernel)
    tol = {"rtol": max(tol["rtol"], 1e-9), "atol": max(tol["atol"], 1e-9)}
    for seed in RNG_SEEDS if kernel.name in ("floyd-warshall", "nussinov") else RNG_SEEDS[:1]:
        check_against_gcc(kernel.path, kernel.function, kernel_args(kernel, seed), defines=kernel.defines,
                          assume=kernel.assume, compile_c=seed == 0, **tol)


# ----- one construct per kernel ------------------------------------------------------------------------
INT_DIV_VALUES = """
void div_values(int n, int A[n], int Q[n], int R[n], int S[n], double F[n]) {
  int i;
#pragma scop
  for (i = 0; i < n; i++) {
    Q[i] = A[i] / 3;
    R[i] = A[i] % 3;
    S[i] = A[i] / -2 + A[i] % -4 * 10 + (i - 5) / 2 * 100 + (i - 5) % 3 * 1000;
    F[i] = A[i] / 2 + (double) A[i] / 4 + 7 / 2;
  }
#pragma endscop
}
"""

INT_DIV_AFFINE = """
void div_affine(int n, double A[n], double B[n], double C[n][n], double D[n]) {
  int i, j;
#pragma scop
  for (i = 1; i < n; i++)
    B[i] = A[(i - 1) / 2 + 1] + A[(i - 2) % 3 + 2];
  for (i = 0; i < n; i++)
    for (j = (i - 5) / 2 + 2; j < n - 1 + (i - 7) / 3 - i / 3; j++)
      C[i][j] = A[j] + i;
  for (i = 0; i < n; i++)
    if ((i - 4) % 3 == -1 || (i - 6) / 4 == -1)
      D[i] = A[i] * 2.0;
#pragma endscop
}
"""

CONVERSIONS = """
void conversions(int n, double X[n], int K[n], float Y[n], int T[n], long L[n], double Z[n]) {
  int i;
#pragma scop
  for (i = 0; i < n; i++) {
    Z[i] = K[i] / 4 + K[i] / 4.0 + 1 / 2 * X[i];
    T[i] = (int) (X[i] * 3.5) + (int) -2.7;
    Y[i] = X[i] * 0.1 + K[i] % 5;
    L[i] = (long) K[i] * 100000 + K[i] / 3L;
    K[i] = X[i] * 10;
  }
#pragma endscop
}
"""

CHAR_TYPES = """
typedef char base;
typedef unsigned char byte;
void char_types(int n, base S[n], byte U[n], short H[n], int P[n], base W[n], short G[n], long L[n]) {
  int i;
#pragma scop
  for (i = 0; i < n; i++) {
    P[i] = S[i] * S[i] * 4 + U[i] * U[i] + H[i] * 300 + (S[i] + S[i] == 3 ? 1 : 0);
    W[i] = S[i] * 3 + U[i];
    G[i] = H[i] * 7 + S[i] / 3;
    L[i] = L[i] * 3 + H[i] * 100000;
    U[i] = U[i] - 200;
  }
#pragma endscop
}
"""

ASSIGNMENTS = """
void assignments(int n, double A[n], double B[n], int K[n], int M[n], double s[1]) {
  int i;
  double t, u;
#pragma scop
  t = u = 0.5;
  for (i = 0; i < n; i++) {
    A[i] = B[i] = A[i] * t + u;
    K[i] += 3; K[i] -= i; K[i] *= 2; K[i] /= 3; K[i] %= 7;
    K[i] <<= 2; K[i] >>= 1; K[i] |= 8; K[i] &= 29; K[i] ^= 5;
    M[i] += A[i];
    M[i] *= 1.5;
    M[i] /= 2.5;
    M[i]++;
    ++M[i];
    K[i]--;
    B[i] /= 3; B[i] -= 0.25;
    u++;
  }
  s[0] = u > 2 ? u : -u;
#pragma endscop
}
"""

INITIALISED = """
#include <math.h>
#define DATA_TYPE double
#define SCALAR_VAL(x) x
void initialised(int n, DATA_TYPE float_n, DATA_TYPE A[n], DATA_TYPE B[n]) {
  int i;
  DATA_TYPE eps = SCALAR_VAL(0.1);
  float third = 1.0 / 3;
  int offset = 7 / 2;
  DATA_TYPE scale = float_n * 2;
  DATA_TYPE acc = 1.5;
#pragma scop
  for (i = 0; i < n; i++) {
    B[i] = A[i] <= eps ? SCALAR_VAL(1.0) : A[i] * third + offset + scale + acc;
    acc += B[i];
  }
#pragma endscop
}
"""


def _ints(rng: np.random.Generator, n: int, lo: int = -50, hi: int = 50, dtype=np.int32) -> np.ndarray:
    """Random integers with the boundary values 0, -1, 1, lo and hi - 1 among them."""
    out = rng.integers(lo, hi, n)
    out[: 5] = [0, -1, 1, lo, hi - 1][: min(5, n)]
    return out.astype(dtype)


@pytest.mark.parametrize("n", [1, 2, 13])
def test_integer_division_in_values(n: int) -> None:
    rng = np.random.default_rng(n)
    args = {"A": _ints(rng, n, -2**31, 2**31 - 1), **{k: np.zeros(n, np.int32) for k in "QRS"}, "F": np.zeros(n)}
    check_against_gcc(INT_DIV_VALUES, "div_values", args)


def test_integer_division_of_the_issue_example() -> None:
    want = check_against_gcc(INT_DIV_VALUES, "div_values", {"A": np.array([-7, -1, 7], np.int32),
                             **{k: np.zeros(3, np.int32) for k in "QRS"}, "F": np.zeros(3)})
    assert want["Q"].tolist() == [-2, 0, 2] and want["R"].tolist() == [-1, -1, 1]


@pytest.mark.parametrize("n", [3, 4, 11])
def test_integer_division_in_subscripts_bounds_and_conditions(n: int) -> None:
    rng = np.random.default_rng(n)
    args = {"A": rng.uniform(-1, 1, n), "B": rng.uniform(-1, 1, n), "C": rng.uniform(-1, 1, (n, n)), "D": rng.uniform(-1, 1, n)}
    prog = pf.from_c(INT_DIV_AFFINE, assume="n >= 3")
    check_against_gcc(INT_DIV_AFFINE, "div_affine", args, program=prog)


def test_usual_arithmetic_conversions_and_casts() -> None:
    rng = np.random.default_rng(3)
    n = 12
    args = {"X": rng.uniform(-3, 3, n), "K": _ints(rng, n), "Y": np.zeros(n, np.float32), "T": np.zeros(n, np.int32),
            "L": np.zeros(n, np.int64), "Z": np.zeros(n)}
    check_against_gcc(CONVERSIONS, "conversions", args, rtol=1e-6, atol=1e-6)


def test_char_short_long_and_typedef_element_types() -> None:
    rng = np.random.default_rng(4)
    n = 12
    args = {"S": _ints(rng, n, -128, 128, np.int8), "U": _ints(rng, n, 0, 256, np.uint8), "H": _ints(rng, n, -32768, 32768, np.int16),
            "P": np.zeros(n, np.int32), "W": np.zeros(n, np.int8), "G": np.zeros(n, np.int16), "L": _ints(rng, n, -10**6, 10**6, np.int64)}
    prog = pf.from_c(CHAR_TYPES)
    assert [prog.arrays[a].dtype for a in ("S", "U", "H", "L")] == [pf.i8, pf.u8, pf.i16, pf.i64]
    check_against_gcc(CHAR_TYPES, "char_types", args, program=prog)


def test_chained_compound_and_increment_assignments() -> None:
    rng = np.random.default_rng(5)
    n = 9
    args = {"A": rng.uniform(-2, 2, n), "B": rng.uniform(-2, 2, n), "K": _ints(rng, n), "M": _ints(rng, n), "s": np.zeros(1)}
    check_against_gcc(ASSIGNMENTS, "assignments", args)


def test_scalars_initialised_before_the_scop() -> None:
    rng = np.random.default_rng(6)
    n = 10
    prog = pf.from_c(INITIALISED)
    assert "eps" not in prog.arguments and "third" not in prog.arrays  # constants of their declared types
    args = {"float_n": 3.0, "A": rng.uniform(-1, 1, n), "B": np.zeros(n)}
    check_against_gcc(INITIALISED, "initialised", args, program=prog)


# ----- the CUDA printer gives the same C semantics (its kernels run on the CPU emulation) ------------------
CUDA_CASES = {
    "div_values": (INT_DIV_VALUES, lambda rng, n: {"A": _ints(rng, n, -1000, 1000), **{k: np.zeros(n, np.int32) for k in "QRS"}, "F": np.zeros(n)}),
    "div_affine": (INT_DIV_AFFINE, lambda rng, n: {k: rng.uniform(-1, 1, n) for k in "ABD"} | {"C": rng.uniform(-1, 1, (n, n))}),
    "char_types": (CHAR_TYPES, lambda rng, n: {"S": _ints(rng, n, -128, 128, np.int8), "U": _ints(rng, n, 0, 256, np.uint8),
                                               "H": _ints(rng, n, -32768, 32768, np.int16), "P": np.zeros(n, np.int32),
                                               "W": np.zeros(n, np.int8), "G": np.zeros(n, np.int16), "L": _ints(rng, n, -10**6, 10**6, np.int64)}),
    "assignments": (ASSIGNMENTS, lambda rng, n: {"A": rng.uniform(-2, 2, n), "B": rng.uniform(-2, 2, n), "K": _ints(rng, n),
                                                 "M": _ints(rng, n), "s": np.zeros(1)}),
}


@pytest.mark.parametrize("name", sorted(CUDA_CASES))
def test_cuda_code_matches_gcc_in_cpu_emulation(name: str, tmp_path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    source, make = CUDA_CASES[name]
    n = 13
    args = make(np.random.default_rng(7), n)
    prog = pf.from_c(source, assume="n >= 3") if name == "div_affine" else pf.from_c(source)
    want = check_against_gcc(source, name, args, program=prog, compile_c=False)
    code = pf.codegen(pf.schedule(prog, target="cuda"))
    dll = build_emulator([("v", code)], tmp_path)
    got = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    emulate(dll, "v", code, got, {"n": n})
    assert_same(got, want, f"{name}: CUDA (CPU emulation) vs gcc")


ALIASES = """
double weight(double x) { return 2.0 * x; }
void aliases(int n, double A[n], double B[n]) {
  int i;
  int half = (n - 1) / 2;
  int last = n - 1;
#pragma scop
  for (i = 0; i <= half; i++)
    B[i] = A[last - i] * 2 + half;
#pragma endscop
}
"""


@pytest.mark.parametrize("n", [1, 2, 7])
def test_int_locals_set_before_the_scop_are_expressions_of_the_sizes(n: int) -> None:
    prog = pf.from_c(ALIASES, function="aliases")
    assert prog.params == ("n",) and list(prog.arguments) == ["A", "B"]
    assert "assumed: n > 0" in str(prog)  # (0 - 1) / 2 == 0 in C: at n = 0 the loop still touches B[0]
    check_against_gcc(ALIASES, "aliases", {"A": np.random.default_rng(n).uniform(-1, 1, n), "B": np.zeros(n)}, program=prog)


def test_a_scalar_set_before_the_scop_by_a_call_is_an_input_argument() -> None:
    src = ALIASES.replace("  int last = n - 1;\n", "  int last = n - 1;\n  double w = weight(1.5);\n").replace("* 2 + half", "* w + half")
    prog = pf.from_c(src, function="aliases")
    assert list(prog.arguments) == ["A", "B", "w"] and prog.scalars["w"] == pf.f64
    n = 5
    args = {"A": np.random.default_rng(1).uniform(-1, 1, n), "B": np.zeros(n)}
    check_against_gcc(src, "aliases", args, extra={"w": 3.0}, program=prog)  # gcc computes weight(1.5) == 3.0
