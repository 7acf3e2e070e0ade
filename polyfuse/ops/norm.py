"""Normalisations beyond ``layernorm``: ``rms_norm`` (row-wise) and ``batch_norm`` in inference form.

``rms_norm(x, weight, eps)`` normalises over the last axis: ``y = x * rsqrt(mean(x^2) + eps) * weight``.
Lowering (``s``: a per-row temporary, ``D``: the row length): ``s = 0``; ``s += x * x``;
``y = x * (1 / sqrt(s / D + eps)) * weight``; like ``layernorm`` the scheduler fuses the three under one
loop over the rows.

``batch_norm(x, mean, var, weight, bias, eps, axis=1)`` uses running statistics (PyTorch's eval mode):
one elementwise statement ``y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]`` where ``c`` is
the index along ``axis`` (the channel of NCHW); the per-channel vectors are read through views.
"""

from __future__ import annotations

from polyfuse.errors import ShapeError
from polyfuse.frontend.formula import Val, const, unary
from polyfuse.frontend.graph import Tensor, elementwise
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import normalize_axes, same_size, shape_text
from polyfuse.ops.shape import reshape


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """Root-mean-square normalisation over the last axis (``torch.nn.functional.rms_norm``)."""
    if x.ndim < 1 or not x.dtype.is_float:
        raise ShapeError(f"rms_norm: needs a float tensor with at least one dimension, got {shape_text(x.shape)} {x.dtype.name}")
    d = x.shape[-1]
    if weight is not None and (weight.ndim != 1 or not same_size(weight.shape[0], d)):
        raise ShapeError(f"rms_norm: weight of shape {shape_text(weight.shape)} does not match the last axis of x {shape_text(x.shape)}")
    row_shape = x.shape[:-1]
    inputs = [t for t in (x, weight) if t is not None]

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        s = lw.temp(row_shape, x.dtype, "rms_sum")
        xa = lw.array(x)
        with lw.nest(row_shape) as its:
            lw.assign(s, its, "=", lambda ld: const(0.0, x.dtype), f"{s} = 0")
        with lw.nest(x.shape) as its:
            lw.assign(s, its[:-1], "+=", lambda ld: ld(x, its) * ld(x, its), f"{s} += {xa}^2")
        with lw.nest(x.shape) as its:
            def norm(ld) -> Val:
                r = ld(x, its) * (1.0 / unary("sqrt", ld(s, its[:-1]) / lw.size_value(d, x.dtype) + eps))
                return r * ld(weight, its[-1:]) if weight is not None else r

            lw.assign(y, its, "=", norm, f"{y} = rms_norm({xa})")

    return x.graph.apply("rms_norm", inputs, x.shape, x.dtype, lower)


def batch_norm(x: Tensor, mean: Tensor, var: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, axis: int = 1) -> Tensor:
    """Inference batch normalisation with running ``mean`` and ``var`` along ``axis`` (the channel)."""
    (a,) = normalize_axes("batch_norm", axis, x.ndim, x.shape)
    c = x.shape[a]
    vectors = [t for t in (mean, var, weight, bias) if t is not None]
    for t in vectors:
        if t.ndim != 1 or not same_size(t.shape[0], c):
            raise ShapeError(f"batch_norm: per-channel vector of shape {shape_text(t.shape)} does not match axis {axis} of {shape_text(x.shape)}")
    # (C,) -> (C, 1, ..., 1) so that numpy broadcasting puts it on ``axis``
    cols = [reshape(t, [c] + [1] * (x.ndim - a - 1)) for t in vectors]
    has_w, has_b = weight is not None, bias is not None

    def fn(xv: Val, m: Val, v: Val, *rest: Val) -> Val:
        r = (xv - m) * (1.0 / unary("sqrt", v + eps))
        if has_w:
            r = r * rest[0]
        if has_b:
            r = r + rest[-1]
        return r

    return elementwise("batch_norm", fn, x, *cols, float_result=True)
