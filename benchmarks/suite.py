"""The workloads of ``python -m benchmarks run`` and what each is compared against.

A :class:`Case` is a row of the report: a polyfuse program at its benchmark sizes, its expected result
(float64 numpy, cast), and the peers a user would pick instead:

* DNN blocks (float32, an ops graph): numpy (one operation at a time on OpenBLAS), PyTorch eager, and the
  same PyTorch function under ``torch.compile`` (Inductor's C++/OpenMP code for the CPU).
* PolyBench kernels (float64, the C sources of ``tests/kernels/`` read with ``pf.from_c`` at the LARGE
  dataset sizes): numpy written from the mathematics (``tests/kernels/numpy_refs.py``) and the original
  C function compiled by ``gcc -O3 -march=native -fopenmp`` into a shared library, called through ctypes.

``memory_bound`` rows (no useful flop count) also report their effective bandwidth, compulsory bytes (every
input read once, every output written once) per second, as a percentage of the machine's measured copy
bandwidth; compute-bound rows report GFLOP/s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

import polyfuse as pf
from benchmarks import workloads as wl
from benchmarks.workloads import GELU_C, Workload, _f32, _mm_flops, np_gelu, np_layernorm, np_softmax
from polyfuse import ops

B, M, K, N, H, S, E = pf.params("B M K N H S E")
C, HH, WW, F = pf.params("C HH WW F")
R, D = pf.params("R D")


@dataclass(frozen=True)
class Case:
    """One row. ``numpy`` takes the inputs by name and returns the outputs by name; ``torch`` names the
    PyTorch function that does the same on tensors (:func:`torch_fn`); ``kernel`` names a PolyBench source in ``tests/kernels`` (then the gcc peer applies,
    and ``full``/``quick`` are its macro sizes)."""

    name: str
    description: str
    workload: Workload | None = None
    numpy: Callable[..., dict] | None = None
    torch: str | None = None  # the key of its PyTorch function (torch_fn)
    kernel: str | None = None
    full: Mapping[str, int] = dataclasses.field(default_factory=dict)
    quick: Mapping[str, int] = dataclasses.field(default_factory=dict)
    flops: Callable[[Mapping[str, int]], float] | None = None

    @property
    def memory_bound(self) -> bool:
        return self.flops is None

    def sizes(self, quick: bool) -> dict[str, int]:
        return dict(self.quick if quick else self.full)


# ----- programs not in workloads.py -----------------------------------------------------------------------
def matmul() -> pf.Program:
    g = pf.Graph("matmul")
    return g.build(y=g.input("x", (M, K)) @ g.input("w", (K, N)))


def batched_matmul() -> pf.Program:
    g = pf.Graph("batched_matmul")
    return g.build(y=g.input("a", (B, M, K)) @ g.input("b", (B, K, N)))


def mlp_relu() -> pf.Program:
    """``relu(x @ w1 + b1) @ w2 + b2``: a feed-forward block (x: M x K, hidden H)."""
    g = pf.Graph("mlp_relu")
    x, w1, b1 = g.input("x", (M, K)), g.input("w1", (K, H)), g.input("b1", (H,))
    w2, b2 = g.input("w2", (H, K)), g.input("b2", (K,))
    return g.build(y=ops.relu(x @ w1 + b1) @ w2 + b2)


def attention_v() -> pf.Program:
    """``softmax(q @ k^T * 0.125) @ v`` per head (q, k, v: H x S x E; 0.125 = 1/sqrt(64))."""
    g = pf.Graph("attention_v")
    q, k, v = g.input("q", (H, S, E)), g.input("k", (H, S, E)), g.input("v", (H, S, E))
    return g.build(o=ops.softmax((q @ ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1) @ v)


def conv2d_relu() -> pf.Program:
    """``relu(conv2d(x, w, padding=1))``, x: B x C x HH x WW, w: F x C x 3 x 3."""
    g = pf.Graph("conv2d_relu")
    x, w = g.input("x", (B, C, HH, WW)), g.input("w", (F, C, 3, 3))
    return g.build(y=ops.relu(ops.conv2d(x, w, padding=1)))


def rmsnorm() -> pf.Program:
    """``x * rsqrt(mean(x^2, -1) + 1e-6) * g``."""
    gr = pf.Graph("rmsnorm")
    x, g = gr.input("x", (R, D)), gr.input("g", (D,))
    return gr.build(y=x * ops.rsqrt(ops.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g)


# ----- numpy expected values (float64) and float32 numpy peers ---------------------------------------------
def np_conv2d_relu(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3x3, padding 1, as 9 shifted products (im2col-free); float32 in, float32 out when inputs are."""
    n, c, h, wd = x.shape
    xp = np.zeros((n, c, h + 2, wd + 2), x.dtype)
    xp[:, :, 1:-1, 1:-1] = x
    y = np.zeros((n, w.shape[0], h, wd), np.result_type(x, w))
    for i in range(3):
        for j in range(3):
            y += np.einsum("fc,nchw->nfhw", w[:, :, i, j], xp[:, :, i:i + h, j:j + wd], optimize=True)
    return np.maximum(y, 0)


def np_rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def np_attention_v(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np_softmax((q @ k.transpose(0, 2, 1)) * np.asarray(0.125, q.dtype)) @ v


def _gelu32(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(np.float32(GELU_C) * (x + np.float32(0.044715) * x * x * x)))


def _ln32(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + np.float32(1e-5)) * g + b


def _f64(fn: Callable[..., np.ndarray], out: str) -> Callable[..., dict]:
    """The float64 reference: ``fn`` on float64 copies of the float32 inputs, cast back."""
    return lambda **kw: _f32({out: fn(**{k: v.astype(np.float64) for k, v in kw.items() if isinstance(v, np.ndarray)})})


# ----- torch peers (the same function runs eager and under torch.compile) ----------------------------------
def _torch_fns() -> dict[str, Callable[..., dict]]:
    import torch  # noqa: PLC0415 (optional peer)

    F_ = torch.nn.functional
    return {
        "matmul": lambda x, w: {"y": x @ w},
        "batched_matmul": lambda a, b: {"y": torch.bmm(a, b)},
        "mlp_relu": lambda x, w1, b1, w2, b2: {"y": torch.relu(x @ w1 + b1) @ w2 + b2},
        "attention": lambda q, k, v: {"o": torch.softmax((q @ k.transpose(1, 2)) * 0.125, dim=-1) @ v},
        "conv2d_relu": lambda x, w: {"y": torch.relu(F_.conv2d(x, w, padding=1))},
        "softmax": lambda x: {"y": torch.softmax(x, dim=-1)},
        "layernorm": lambda x, gamma, beta: {"y": F_.layer_norm(x, x.shape[-1:], gamma, beta, 1e-5)},
        "rmsnorm": lambda x, g: {"y": x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * g},
        "add_exp": lambda a: {"y": torch.exp(a + 1.0)},
        "bias_gelu_residual": lambda x, b, r: {"y": F_.gelu(x + b, approximate="tanh") + r},
    }


def torch_fn(key: str) -> Callable[..., dict]:
    """The PyTorch function of a DNN row (ImportError without torch)."""
    return _torch_fns()[key]


def _dnn(name: str, key: str, description: str, build: Callable[[], pf.Program], expected: Callable[..., dict],
         numpy: Callable[..., dict], full: dict, quick: dict, flops: Callable | None = None, scale: dict | None = None,
         rtol: float = 1e-4) -> Case:
    w = Workload(name, description, build, expected, full, quick, quick, flops=flops, scale=scale or {}, rtol=rtol)
    return Case(name, description, workload=w, numpy=numpy, torch=key, full=full, quick=quick, flops=flops)


def _mm_expected(x: np.ndarray, w: np.ndarray, **_: int) -> dict:
    return _f32({"y": x.astype(np.float64) @ w})


def _bmm_expected(a: np.ndarray, b: np.ndarray, **_: int) -> dict:
    return _f32({"y": a.astype(np.float64) @ b})


_MLP_SCALE = {"w1": 0.05, "w2": 0.05}
DNN: tuple[Case, ...] = (
    _dnn("matmul_1024", "matmul", "y = x @ w, 1024³", matmul, _mm_expected, lambda x, w: {"y": x @ w},
         {"M": 1024, "K": 1024, "N": 1024}, {"M": 64, "K": 48, "N": 80}, _mm_flops(("M", "K", "N"))),
    _dnn("matmul_2048", "matmul", "y = x @ w, 2048³", matmul, _mm_expected, lambda x, w: {"y": x @ w},
         {"M": 2048, "K": 2048, "N": 2048}, {"M": 96, "K": 64, "N": 72}, _mm_flops(("M", "K", "N"))),
    _dnn("batched_matmul", "batched_matmul", "y = a @ b, 32 × 256³", batched_matmul, _bmm_expected,
         lambda a, b: {"y": a @ b}, {"B": 32, "M": 256, "K": 256, "N": 256}, {"B": 3, "M": 24, "K": 16, "N": 40},
         lambda s: 2.0 * s["B"] * s["M"] * s["K"] * s["N"]),
    _dnn("mlp", "mlp_relu", "relu(x·W1 + b1)·W2 + b2, 2048×1024→4096→1024", mlp_relu,
         lambda x, w1, b1, w2, b2, **_: _f32({"y": np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2 + b2}),
         lambda x, w1, b1, w2, b2: {"y": np.maximum(x @ w1 + b1, np.float32(0)) @ w2 + b2},
         {"M": 2048, "K": 1024, "H": 4096}, {"M": 32, "K": 24, "H": 64},
         _mm_flops(("M", "K", "H"), ("M", "H", "K")), scale=_MLP_SCALE),
    _dnn("attention", "attention", "softmax(QKᵀ/8)·V, 8 heads × 512 × 64", attention_v,
         lambda q, k, v, **_: _f32({"o": np_attention_v(q.astype(np.float64), k, v)}),
         lambda q, k, v: {"o": np_attention_v(q, k, v)},
         {"H": 8, "S": 512, "E": 64}, {"H": 2, "S": 40, "E": 16}, lambda s: 4.0 * s["H"] * s["S"] * s["S"] * s["E"]),
    _dnn("conv2d_relu", "conv2d_relu", "relu(conv2d 3×3, pad 1), 1×64×56×56, 64 filters", conv2d_relu,
         lambda x, w, **_: _f32({"y": np_conv2d_relu(x.astype(np.float64), w.astype(np.float64))}),
         lambda x, w: {"y": np_conv2d_relu(x, w)},
         {"B": 1, "C": 64, "HH": 56, "WW": 56, "F": 64}, {"B": 1, "C": 8, "HH": 10, "WW": 12, "F": 8},
         lambda s: 2.0 * s["B"] * s["F"] * s["C"] * 9 * s["HH"] * s["WW"], scale={"w": 0.2}),
    _dnn("softmax_4096x1024", "softmax", "softmax(x, -1), 4096×1024", wl.softmax,
         lambda x, **_: _f32({"y": np_softmax(x.astype(np.float64))}), lambda x: {"y": np_softmax(x)},
         {"R": 4096, "D": 1024}, {"R": 64, "D": 96}, scale={"x": 4.0}),
    _dnn("softmax_8192x4096", "softmax", "softmax(x, -1), 8192×4096", wl.softmax,
         lambda x, **_: _f32({"y": np_softmax(x.astype(np.float64))}), lambda x: {"y": np_softmax(x)},
         {"R": 8192, "D": 4096}, {"R": 96, "D": 128}, scale={"x": 4.0}),
    _dnn("layernorm", "layernorm", "layernorm(x)·γ + β, 4096×1024", wl.layernorm,
         lambda x, gamma, beta, **_: _f32({"y": np_layernorm(x.astype(np.float64), gamma, beta)}),
         lambda x, gamma, beta: {"y": _ln32(x, gamma, beta)}, {"R": 4096, "D": 1024}, {"R": 64, "D": 96}, rtol=2e-4),
    _dnn("rmsnorm", "rmsnorm", "x·rsqrt(mean(x²) + ε)·g, 4096×1024", rmsnorm,
         lambda x, g, **_: _f32({"y": np_rmsnorm(x.astype(np.float64), g)}),
         lambda x, g: {"y": np_rmsnorm(x, g)}, {"R": 4096, "D": 1024}, {"R": 64, "D": 96}, rtol=2e-4),
    _dnn("add_exp", "add_exp", "exp(x + 1), 4096²", wl.add_exp,
         lambda a, **_: _f32({"y": np.exp(a.astype(np.float64) + 1)}), lambda a: {"y": np.exp(a + np.float32(1))},
         {"R": 4096, "D": 4096}, {"R": 64, "D": 96}),
    _dnn("bias_gelu_residual", "bias_gelu_residual", "gelu(x + b) + r, 4096×1024", wl.bias_gelu_residual,
         lambda x, b, r, **_: _f32({"y": np_gelu(x.astype(np.float64) + b) + r}),
         lambda x, b, r: {"y": _gelu32(x + b) + r}, {"R": 4096, "D": 1024}, {"R": 64, "D": 96}),
)


# ----- PolyBench ----------------------------------------------------------------------------------------
def _pb(name: str, description: str, full: dict, quick: dict, flops: Callable[[Mapping[str, int]], float]) -> Case:
    return Case(name, description, kernel=name, full=full, quick=quick, flops=flops)


POLYBENCH: tuple[Case, ...] = (
    _pb("gemm", "PolyBench gemm (LARGE, f64): C = αAB + βC", {"NI": 1000, "NJ": 1100, "NK": 1200},
        {"NI": 40, "NJ": 44, "NK": 48}, lambda s: 2.0 * s["NI"] * s["NJ"] * s["NK"]),
    _pb("2mm", "PolyBench 2mm (LARGE, f64): D = α·A·B·C + βD", {"NI": 800, "NJ": 900, "NK": 1100, "NL": 1200},
        {"NI": 32, "NJ": 36, "NK": 44, "NL": 48}, lambda s: 2.0 * s["NI"] * s["NJ"] * s["NK"] + 2.0 * s["NI"] * s["NL"] * s["NJ"]),
    _pb("3mm", "PolyBench 3mm (LARGE, f64): G = (A·B)·(C·D)", {"NI": 800, "NJ": 900, "NK": 1000, "NL": 1100, "NM": 1200},
        {"NI": 32, "NJ": 36, "NK": 40, "NL": 44, "NM": 48},
        lambda s: 2.0 * (s["NI"] * s["NJ"] * s["NK"] + s["NJ"] * s["NL"] * s["NM"] + s["NI"] * s["NL"] * s["NJ"])),
    _pb("syrk", "PolyBench syrk (LARGE, f64): C = αAAᵀ + βC, lower", {"M": 1000, "N": 1200}, {"M": 40, "N": 48},
        lambda s: 1.0 * s["N"] * (s["N"] + 1) * s["M"]),
)

CASES: tuple[Case, ...] = DNN + POLYBENCH
BY_NAME: dict[str, Case] = {c.name: c for c in CASES}


def polybench_kernel(case: Case, quick: bool) -> Any:
    """The ``tests.kernels.Kernel`` of a PolyBench row at the row's sizes (its inputs come from there)."""
    from tests.kernels import BY_NAME as KERNELS  # noqa: PLC0415 (a source checkout's test data)

    return dataclasses.replace(KERNELS[case.kernel], sizes=MappingProxyType(case.sizes(quick)))


# ----- the acceptance criteria of issue 15 that these rows measure ---------------------------------------------
@dataclass(frozen=True)
class Criterion:
    """``rows``' paired ratio against ``peer`` must be at most ``bound`` (strictly below when ``strict``);
    ``peer == "copy"`` instead asks for at least ``bound`` percent of the copy bandwidth."""

    text: str
    rows: tuple[str, ...]
    peer: str
    bound: float
    strict: bool = False


_MEMORY_ROWS = tuple(c.name for c in DNN if c.memory_bound)
CRITERIA: tuple[Criterion, ...] = (
    Criterion("gemm f32 1024³ and 2048³: polyfuse time ≤ 1.25 × numpy/OpenBLAS", ("matmul_1024", "matmul_2048"), "numpy", 1.25),
    Criterion("MLP, attention and conv2d 3×3 + relu: polyfuse time ≤ torch.compile's", ("mlp", "attention", "conv2d_relu"),
              "torch.compile", 1.0),
    Criterion("softmax and layernorm: polyfuse time ≤ 0.8 × torch.compile's",
              ("softmax_4096x1024", "softmax_8192x4096", "layernorm"), "torch.compile", 0.8),
    Criterion("memory-bound rows: ≥ 60 % of the measured copy bandwidth", _MEMORY_ROWS, "copy", 60.0),
    Criterion("fused elementwise chains keep their lead over torch.compile", ("add_exp", "bias_gelu_residual"),
              "torch.compile", 1.0, strict=True),
    Criterion("PolyBench-style kernels (LARGE): no kernel slower than gcc -O3 on its source", tuple(c.name for c in POLYBENCH),
              "gcc", 1.0),
)
