"""DNN and stencil workloads shared by the benchmarks (``benchmarks/dnn.py``) and the tests.

Each :class:`Workload` builds a :class:`pf.Program` (an ops graph, or a ``@pf.program`` for the
stencils, which have a time loop), says how to make its inputs at given sizes, and computes the expected
outputs with numpy (float64 internally where it matters, then cast). ``flops`` is the useful arithmetic
(for compute-bound workloads: GFLOP/s is reported); every workload also reports the compulsory bytes
(inputs read once, outputs written once) for an effective GB/s.

Sizes: ``full`` for the benchmark, ``quick`` for CI (seconds), ``test`` for the unit tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

import polyfuse as pf
from polyfuse import ops

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[[], pf.Program]
    numpy: Callable[..., Arrays]  # numpy(**inputs, **sizes) -> {output: expected}
    full: Mapping[str, int]
    quick: Mapping[str, int]
    test: Mapping[str, int]
    flops: Callable[[Mapping[str, int]], float] | None = None
    scale: Mapping[str, float] = field(default_factory=dict)  # input name -> magnitude of its random values
    rtol: float = 1e-4
    kind: str = "graph"  # "graph" (pf.Graph) or "loops" (@pf.program)

    def program(self) -> pf.Program:
        return self.build()

    def inputs(self, prog: pf.Program, sizes: Mapping[str, int], seed: int = 0) -> Arrays:
        """Random float32 inputs (and zeroed outputs) for every array argument of ``prog``."""
        rng = np.random.default_rng(seed)
        out: Arrays = {}
        for name in prog.arguments:
            arr = prog.arrays[name]
            shape = arr.concrete_shape(sizes)
            if arr.role in ("input", "inout"):
                s = self.scale.get(name, 1.0)
                out[name] = rng.uniform(-s, s, shape).astype(arr.dtype.numpy)
            else:
                out[name] = np.zeros(shape, arr.dtype.numpy)
        return out

    def expected(self, prog: pf.Program, values: Arrays, sizes: Mapping[str, int]) -> Arrays:
        ins = {k: v.copy() for k, v in values.items() if prog.arrays[k].role in ("input", "inout")}
        return self.numpy(**ins, **sizes)

    def compulsory_bytes(self, prog: pf.Program, sizes: Mapping[str, int]) -> int:
        total = 0
        for name in prog.arguments:
            arr = prog.arrays[name]
            n = math.prod(arr.concrete_shape(sizes)) * np.dtype(arr.dtype.numpy).itemsize
            total += n * (2 if arr.role == "inout" else 1)
        return total


R, D, H = pf.params("R D H")
M, K, N, L, P = pf.params("M K N L P")
S, E = pf.params("S E")
T, NN = pf.params("T NN")
GELU_C = math.sqrt(2.0 / math.pi)


def np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x**3)))


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _f32(d: Arrays) -> Arrays:
    return {k: np.asarray(v, np.float32) for k, v in d.items()}


# ----- graphs -------------------------------------------------------------------------------------------
def add_exp() -> pf.Program:
    g = pf.Graph("add_exp")
    a = g.input("a", (R, D))
    return g.build(y=ops.exp(a + 1.0))


def chain4() -> pf.Program:
    g = pf.Graph("chain4")
    a, b, c = (g.input(n, (R, D)) for n in "abc")
    return g.build(y=ops.tanh((a * b + c) * 0.5))


def bias_gelu_residual() -> pf.Program:
    g = pf.Graph("bias_gelu_residual")
    x, b, r = g.input("x", (R, D)), g.input("b", (D,)), g.input("r", (R, D))
    return g.build(y=ops.gelu(x + b) + r)


def softmax() -> pf.Program:
    g = pf.Graph("softmax")
    return g.build(y=ops.softmax(g.input("x", (R, D)), axis=-1))


def layernorm() -> pf.Program:
    g = pf.Graph("layernorm")
    x, gamma, beta = g.input("x", (R, D)), g.input("gamma", (D,)), g.input("beta", (D,))
    return g.build(y=ops.layernorm(x, gamma, beta, eps=1e-5))


def matmul_bias_relu() -> pf.Program:
    g = pf.Graph("matmul_bias_relu")
    x, w, b = g.input("x", (M, K)), g.input("w", (K, N)), g.input("b", (N,))
    return g.build(y=ops.relu(x @ w + b))


def mlp() -> pf.Program:
    """A transformer MLP block: ``gelu(x @ w1 + b1) @ w2 + b2 + x``."""
    g = pf.Graph("mlp")
    x, w1, b1 = g.input("x", (M, K)), g.input("w1", (K, H)), g.input("b1", (H,))
    w2, b2 = g.input("w2", (H, K)), g.input("b2", (K,))
    return g.build(y=ops.gelu(x @ w1 + b1) @ w2 + b2 + x)


def attention() -> pf.Program:
    """Attention scores and softmax: ``softmax(q @ k^T / sqrt(E))`` per head (q, k: (H, S, E))."""
    g = pf.Graph("attention")
    q, k = g.input("q", (H, S, E)), g.input("k", (H, S, E))
    return g.build(p=ops.softmax((q @ ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1))


def two_mm() -> pf.Program:
    """polybench 2mm: ``D = alpha * A @ B @ C + beta * D0`` (alpha = 1.5, beta = 1.2)."""
    g = pf.Graph("two_mm")
    a, b, c, d = g.input("A", (M, K)), g.input("B", (K, L)), g.input("C", (L, N)), g.input("D0", (M, N))
    return g.build(D=((a @ b) * 1.5) @ c + d * 1.2)


def three_mm() -> pf.Program:
    """polybench 3mm: ``G = (A @ B) @ (C @ D)``."""
    g = pf.Graph("three_mm")
    a, b, c, d = g.input("A", (M, K)), g.input("B", (K, L)), g.input("C", (L, P)), g.input("D", (P, N))
    return g.build(G=(a @ b) @ (c @ d))


# ----- loop programs (time loops) -----------------------------------------------------------------------
@pf.program(assume="NN >= 3")
def jacobi_2d(A: pf.f32[NN, NN], B: pf.f32[NN, NN]):
    """polybench jacobi-2d: T sweeps of a 5-point average, ping-ponging between A and B."""
    for t in range(T):
        for i in range(1, NN - 1):
            for j in range(1, NN - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
        for i in range(1, NN - 1):
            for j in range(1, NN - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])


@pf.program(assume="NN >= 3")
def heat_3d(A: pf.f32[NN, NN, NN], B: pf.f32[NN, NN, NN]):
    """polybench heat-3d: T sweeps of a 7-point stencil, ping-ponging between A and B."""
    for t in range(T):
        for i in range(1, NN - 1):
            for j in range(1, NN - 1):
                for k in range(1, NN - 1):
                    B[i, j, k] = (0.125 * (A[i + 1, j, k] - 2.0 * A[i, j, k] + A[i - 1, j, k])
                                  + 0.125 * (A[i, j + 1, k] - 2.0 * A[i, j, k] + A[i, j - 1, k])
                                  + 0.125 * (A[i, j, k + 1] - 2.0 * A[i, j, k] + A[i, j, k - 1]) + A[i, j, k])
        for i in range(1, NN - 1):
            for j in range(1, NN - 1):
                for k in range(1, NN - 1):
                    A[i, j, k] = (0.125 * (B[i + 1, j, k] - 2.0 * B[i, j, k] + B[i - 1, j, k])
                                  + 0.125 * (B[i, j + 1, k] - 2.0 * B[i, j, k] + B[i, j - 1, k])
                                  + 0.125 * (B[i, j, k + 1] - 2.0 * B[i, j, k] + B[i, j, k - 1]) + B[i, j, k])


def np_jacobi_2d(A: np.ndarray, B: np.ndarray, T: int, **_: int) -> Arrays:
    A, B = A.copy(), B.copy()
    f = np.float32(0.2)
    for _t in range(T):
        B[1:-1, 1:-1] = f * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = f * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return {"A": A, "B": B}


def _heat_step(src: np.ndarray, dst: np.ndarray) -> None:
    c, two = np.float32(0.125), np.float32(2.0)
    mid = src[1:-1, 1:-1, 1:-1]
    dst[1:-1, 1:-1, 1:-1] = (c * (src[2:, 1:-1, 1:-1] - two * mid + src[:-2, 1:-1, 1:-1])
                             + c * (src[1:-1, 2:, 1:-1] - two * mid + src[1:-1, :-2, 1:-1])
                             + c * (src[1:-1, 1:-1, 2:] - two * mid + src[1:-1, 1:-1, :-2]) + mid)


def np_heat_3d(A: np.ndarray, B: np.ndarray, T: int, **_: int) -> Arrays:
    A, B = A.copy(), B.copy()
    for _t in range(T):
        _heat_step(A, B)
        _heat_step(B, A)
    return {"A": A, "B": B}


# ----- the list -----------------------------------------------------------------------------------------
def _mm_flops(*dims: tuple[str, str, str]) -> Callable[[Mapping[str, int]], float]:
    return lambda s: float(sum(2 * s[a] * s[b] * s[c] for a, b, c in dims))


WORKLOADS: tuple[Workload, ...] = (
    Workload("add_exp", "y = exp(a + 1)", add_exp, lambda a, **_: _f32({"y": np.exp(a + np.float32(1))}),
             {"R": 4096, "D": 4096}, {"R": 256, "D": 512}, {"R": 7, "D": 13}),
    Workload("chain4", "y = tanh((a * b + c) * 0.5)", chain4,
             lambda a, b, c, **_: _f32({"y": np.tanh((a * b + c) * np.float32(0.5))}),
             {"R": 4096, "D": 4096}, {"R": 256, "D": 512}, {"R": 7, "D": 13}),
    Workload("bias_gelu_residual", "y = gelu(x + b) + r", bias_gelu_residual,
             lambda x, b, r, **_: _f32({"y": np_gelu(x.astype(np.float64) + b) + r}),
             {"R": 4096, "D": 4096}, {"R": 256, "D": 512}, {"R": 7, "D": 13}),
    Workload("softmax", "y = softmax(x, axis=-1)", softmax, lambda x, **_: _f32({"y": np_softmax(x.astype(np.float64))}),
             {"R": 8192, "D": 1024}, {"R": 512, "D": 256}, {"R": 7, "D": 13}, scale={"x": 4.0}),
    Workload("layernorm", "y = layernorm(x) * gamma + beta", layernorm,
             lambda x, gamma, beta, **_: _f32({"y": np_layernorm(x.astype(np.float64), gamma, beta)}),
             {"R": 8192, "D": 1024}, {"R": 512, "D": 256}, {"R": 7, "D": 13}, rtol=2e-4),
    Workload("matmul_bias_relu", "y = relu(x @ w + b)", matmul_bias_relu,
             lambda x, w, b, **_: _f32({"y": np.maximum(x.astype(np.float64) @ w + b, 0)}),
             {"M": 1024, "K": 1024, "N": 1024}, {"M": 128, "K": 128, "N": 128}, {"M": 9, "K": 7, "N": 11},
             flops=_mm_flops(("M", "K", "N"))),
    Workload("mlp", "y = gelu(x @ w1 + b1) @ w2 + b2 + x", mlp,
             lambda x, w1, b1, w2, b2, **_: _f32({"y": np_gelu(x.astype(np.float64) @ w1 + b1) @ w2 + b2 + x}),
             {"M": 512, "K": 512, "H": 2048}, {"M": 64, "K": 64, "H": 256}, {"M": 9, "K": 7, "H": 11},
             flops=_mm_flops(("M", "K", "H"), ("M", "H", "K")), scale={"w1": 0.1, "w2": 0.1}),
    Workload("attention", "p = softmax(q @ k^T * 0.125)", attention,
             lambda q, k, **_: _f32({"p": np_softmax((q.astype(np.float64) @ k.transpose(0, 2, 1)) * 0.125)}),
             {"H": 8, "S": 512, "E": 64}, {"H": 2, "S": 128, "E": 32}, {"H": 2, "S": 9, "E": 5},
             flops=lambda s: 2.0 * s["H"] * s["S"] * s["S"] * s["E"]),
    Workload("two_mm", "D = 1.5 * A @ B @ C + 1.2 * D0", two_mm,
             lambda A, B, C, D0, **_: _f32({"D": (1.5 * (A.astype(np.float64) @ B)) @ C + 1.2 * D0}),
             {"M": 512, "K": 512, "L": 512, "N": 512}, {"M": 96, "K": 96, "L": 96, "N": 96},
             {"M": 9, "K": 7, "L": 5, "N": 11}, flops=_mm_flops(("M", "K", "L"), ("M", "L", "N"))),
    Workload("three_mm", "G = (A @ B) @ (C @ D)", three_mm,
             lambda A, B, C, D, **_: _f32({"G": (A.astype(np.float64) @ B) @ (C.astype(np.float64) @ D)}),
             {"M": 512, "K": 512, "L": 512, "P": 512, "N": 512}, {"M": 96, "K": 96, "L": 96, "P": 96, "N": 96},
             {"M": 9, "K": 7, "L": 5, "P": 6, "N": 11}, flops=_mm_flops(("M", "K", "L"), ("L", "P", "N"), ("M", "L", "N"))),
    Workload("jacobi_2d", "polybench jacobi-2d (T sweeps)", lambda: jacobi_2d, np_jacobi_2d,
             {"NN": 2000, "T": 50}, {"NN": 256, "T": 10}, {"NN": 12, "T": 3}, kind="loops",
             flops=lambda s: 2.0 * 5 * (s["NN"] - 2) ** 2 * s["T"]),
    Workload("heat_3d", "polybench heat-3d (T sweeps)", lambda: heat_3d, np_heat_3d,
             {"NN": 200, "T": 20}, {"NN": 40, "T": 5}, {"NN": 8, "T": 2}, kind="loops",
             flops=lambda s: 2.0 * 15 * (s["NN"] - 2) ** 3 * s["T"]),
)

BY_NAME = {w.name: w for w in WORKLOADS}
