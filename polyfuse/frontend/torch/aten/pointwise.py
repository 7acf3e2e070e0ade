"""Elementwise ATen operators (numpy broadcasting; scalars as Python numbers), activations, and the
identities (copies, dropout in eval mode) that a polyfuse program does not need."""

from __future__ import annotations

from typing import Any

import torch

from polyfuse import ops
from polyfuse.frontend.formula import binary
from polyfuse.frontend.graph import Tensor, elementwise
from polyfuse.frontend.torch.aten.registry import aten, tensor, unsupported

DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64"}


def _scaled(b: Any, alpha: Any) -> Any:
    return b if alpha == 1 else ops.mul(b, alpha) if isinstance(b, Tensor) else b * alpha


@aten("aten.add.Tensor", "aten.add.Scalar")
def add(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.add(a, _scaled(b, alpha))


@aten("aten.sub.Tensor", "aten.sub.Scalar")
def sub(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.sub(a, _scaled(b, alpha))


@aten("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.sub(b, _scaled(a, alpha))


@aten("aten.mul.Tensor", "aten.mul.Scalar")
def mul(a: Any, b: Any) -> Tensor:
    return ops.mul(a, b)


@aten("aten.div.Tensor", "aten.div.Scalar")
def div(a: Any, b: Any) -> Tensor:
    return ops.div(a, b)


@aten("aten.maximum.default")
def maximum(a: Any, b: Any) -> Tensor:
    return ops.maximum(a, b)


@aten("aten.minimum.default")
def minimum(a: Any, b: Any) -> Tensor:
    return ops.minimum(a, b)


@aten("aten.pow.Tensor_Scalar")
def pow_(x: Any, e: Any) -> Tensor:
    x = tensor(x)
    if e == 2:
        return elementwise("square", lambda v: v * v, x)
    if e == 0.5:
        return ops.sqrt(x)
    if e == -0.5:
        return ops.rsqrt(x)
    if e == 1:
        return x
    return elementwise("pow", lambda v: binary("pow", v, float(e)), x, float_result=True)


@aten("aten.reciprocal.default")
def reciprocal(x: Tensor) -> Tensor:
    return ops.div(1.0, tensor(x))


_UNARY = {
    "neg": ops.neg, "exp": ops.exp, "log": ops.log, "sqrt": ops.sqrt, "rsqrt": ops.rsqrt, "tanh": ops.tanh,
    "abs": ops.abs, "relu": ops.relu, "sigmoid": ops.sigmoid, "silu": ops.silu,
}
for _name, _fn in _UNARY.items():
    aten(f"aten.{_name}.default")(lambda x, _fn=_fn: _fn(tensor(x)))


@aten("aten.gelu.default")
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return ops.gelu(tensor(x), approximate=approximate)


@aten("aten.hardtanh.default")
def hardtanh(x: Tensor, lo: float = -1.0, hi: float = 1.0) -> Tensor:
    return elementwise("hardtanh", lambda v: binary("min", binary("max", v, lo), hi), tensor(x))


@aten("aten.leaky_relu.default")
def leaky_relu(x: Tensor, slope: float = 0.01) -> Tensor:
    # max(x, 0) + slope * min(x, 0)
    return elementwise("leaky_relu", lambda v: binary("max", v, 0.0) + slope * binary("min", v, 0.0), tensor(x))


@aten("aten.erf.default")
def erf(x: Tensor) -> Tensor:
    raise unsupported("erf has no polyfuse math function yet")


@aten("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.contiguous.default",
      "aten.lift_fresh_copy.default")
def identity(x: Any, **_: Any) -> Tensor:
    """A copy or an alias: a polyfuse tensor is a value, its layout is the compiler's business."""
    return tensor(x)


@aten("aten.dropout.default")
def dropout(x: Tensor, p: float, train: bool) -> Tensor:
    if train and p > 0:
        raise unsupported("dropout in training mode (random numbers stay in PyTorch)")
    return tensor(x)


@aten("aten._to_copy.default")
def to_copy(x: Tensor, dtype: Any = None, **_: Any) -> Tensor:
    """A copy, possibly to another dtype: only the same dtype is taken (conversions stay in PyTorch)."""
    x = tensor(x)
    if dtype is not None and DTYPE_NAMES.get(dtype) != x.dtype.name:
        raise unsupported(f"conversion of a {x.dtype.name} tensor to {dtype}")
    return x
