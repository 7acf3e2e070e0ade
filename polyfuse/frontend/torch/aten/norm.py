"""Normalisations: ``layer_norm`` / ``native_layer_norm``, ``rms_norm`` / ``_fused_rms_norm``, and batch
normalisation with running statistics (eval mode: ``batch_norm`` with ``training=False``,
``_native_batch_norm_legit_no_training``). A normalised shape of several trailing dimensions is flattened
into one (a view) and restored after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from polyfuse import ops
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.torch.aten.registry import aten, ints, tensor, unsupported


def _trailing(x: Tensor, normalized_shape: Any, params: list[Any], fn: Callable[..., Tensor]) -> Tensor:
    k = len(ints(normalized_shape, "normalized_shape"))
    if k == 0 or k > x.ndim:
        raise unsupported(f"normalized_shape {normalized_shape!r} for a {x.ndim}-d tensor")
    if k == 1:
        return fn(x, *[None if p is None else tensor(p) for p in params])
    if any(s.terms for s in x.shape[-k:]):
        raise unsupported("a normalised shape with dynamic dimensions")
    d = 1
    for s in x.shape[-k:]:
        d *= s.constant
    flat = ops.reshape(x, list(x.shape[:-k]) + [d])
    y = fn(flat, *[None if p is None else ops.reshape(tensor(p), [d]) for p in params])
    return ops.reshape(y, list(x.shape))


@aten("aten.layer_norm.default")
def layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5, cudnn_enable: bool = True) -> Tensor:
    return _trailing(tensor(x), normalized_shape, [weight, bias], lambda v, w, b: ops.layernorm(v, w, b, eps=eps))


@aten("aten.native_layer_norm.default")
def native_layer_norm(x: Any, normalized_shape: Any, weight: Any, bias: Any, eps: float) -> tuple[Any, ...]:
    return layer_norm(x, normalized_shape, weight, bias, eps), None, None


def _rms_eps(x: Tensor, eps: Any) -> float:
    if eps is not None:
        return float(eps)
    return float(torch.finfo(torch.float32 if x.dtype.name == "f32" else torch.float64).eps)


@aten("aten.rms_norm.default")
def rms_norm(x: Any, normalized_shape: Any, weight: Any = None, eps: Any = None) -> Tensor:
    x = tensor(x)
    e = _rms_eps(x, eps)
    return _trailing(x, normalized_shape, [weight], lambda v, w: ops.rms_norm(v, w, eps=e))


@aten("aten._fused_rms_norm.default")
def fused_rms_norm(x: Any, normalized_shape: Any, weight: Any = None, eps: Any = None) -> tuple[Any, ...]:
    return rms_norm(x, normalized_shape, weight, eps), None


def _bn(x: Any, weight: Any, bias: Any, mean: Any, var: Any, eps: float) -> Tensor:
    if mean is None or var is None:
        raise unsupported("batch_norm without running statistics")
    x = tensor(x)
    if x.ndim < 2:
        raise unsupported("batch_norm of a tensor without a channel dimension")
    return ops.batch_norm(x, tensor(mean), tensor(var), None if weight is None else tensor(weight),
                          None if bias is None else tensor(bias), eps=eps, axis=1)


@aten("aten.batch_norm.default")
def batch_norm(x: Any, weight: Any, bias: Any, mean: Any, var: Any, training: bool, momentum: float, eps: float, cudnn: bool = True) -> Tensor:
    if training:
        raise unsupported("batch_norm in training mode (batch statistics and running-average updates)")
    return _bn(x, weight, bias, mean, var, eps)


@aten("aten._native_batch_norm_legit_no_training.default")
def batch_norm_no_training(x: Any, weight: Any, bias: Any, mean: Any, var: Any, momentum: float, eps: float) -> tuple[Any, ...]:
    return _bn(x, weight, bias, mean, var, eps), None, None


@aten("aten.native_batch_norm.default")
def native_batch_norm(x: Any, weight: Any, bias: Any, mean: Any, var: Any, training: bool, momentum: float, eps: float) -> tuple[Any, ...]:
    if training:
        raise unsupported("batch_norm in training mode (batch statistics and running-average updates)")
    return _bn(x, weight, bias, mean, var, eps), None, None
