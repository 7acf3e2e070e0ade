"""Reductions over dimensions (``sum``, ``mean``, ``amax``, ``amin``) and the row-wise ``softmax`` and
``log_softmax``."""

from __future__ import annotations

from typing import Any

from polyfuse import ops
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.torch.aten.registry import aten, ints, tensor, unsupported


def _axes(x: Tensor, dims: Any) -> Any:
    if dims is None:
        return None
    d = ints(dims, "dims")
    return None if not d else tuple(d)


def _no_dtype(dtype: Any) -> None:
    if dtype is not None:
        raise unsupported(f"a reduction with dtype={dtype}")


@aten("aten.sum.dim_IntList", "aten.sum.default")
def sum_(x: Any, dims: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    _no_dtype(dtype)
    x = tensor(x)
    return ops.sum(x, axis=_axes(x, dims), keepdims=keepdim)


@aten("aten.mean.dim", "aten.mean.default")
def mean(x: Any, dims: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    _no_dtype(dtype)
    x = tensor(x)
    return ops.mean(x, axis=_axes(x, dims), keepdims=keepdim)


@aten("aten.amax.default")
def amax(x: Any, dims: Any = (), keepdim: bool = False) -> Tensor:
    x = tensor(x)
    return ops.max(x, axis=_axes(x, dims), keepdims=keepdim)


@aten("aten.amin.default")
def amin(x: Any, dims: Any = (), keepdim: bool = False) -> Tensor:
    x = tensor(x)
    return ops.min(x, axis=_axes(x, dims), keepdims=keepdim)


@aten("aten._softmax.default")
def softmax_(x: Any, dim: int, half_to_float: bool = False) -> Tensor:
    return ops.softmax(tensor(x), axis=dim)


@aten("aten.softmax.int")
def softmax(x: Any, dim: int, dtype: Any = None) -> Tensor:
    _no_dtype(dtype)
    return ops.softmax(tensor(x), axis=dim)


@aten("aten._log_softmax.default")
def log_softmax_(x: Any, dim: int, half_to_float: bool = False) -> Tensor:
    return ops.log_softmax(tensor(x), axis=dim)


@aten("aten.log_softmax.int")
def log_softmax(x: Any, dim: int, dtype: Any = None) -> Tensor:
    _no_dtype(dtype)
    return ops.log_softmax(tensor(x), axis=dim)
