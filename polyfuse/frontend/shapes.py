"""Sizes and shapes of graph tensors: numpy broadcasting and axis normalisation over symbolic sizes.

A size is a :class:`~polyfuse.types.SizeExpr` (an int or an affine expression of ``pf.params``); two sizes
are the same when they are the same expression (``n`` and ``n`` broadcast, ``n`` and ``m`` do not, even
if they might be equal at run time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from polyfuse.errors import ShapeError
from polyfuse.ir.printer import format_size
from polyfuse.types import SizeExpr


def size_of(value: Any) -> SizeExpr:
    """``value`` (an int, a ``pf.params`` size or an affine expression of them) as a :class:`SizeExpr`."""
    if isinstance(value, bool):
        raise TypeError("a size cannot be a bool")
    return SizeExpr.of(value)


def same_size(a: SizeExpr, b: SizeExpr) -> bool:
    return a.constant == b.constant and dict(a.terms) == dict(b.terms)


def is_one(s: SizeExpr) -> bool:
    return not s.terms and s.constant == 1


def shape_text(shape: Sequence[SizeExpr]) -> str:
    return "(" + ", ".join(format_size(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(op: str, *shapes: tuple[SizeExpr, ...]) -> tuple[SizeExpr, ...]:
    """The numpy broadcast of ``shapes`` (right-aligned; a dimension of size 1 stretches)."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[SizeExpr] = []
    for k in range(ndim):
        dim: SizeExpr | None = None
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if dim is None or is_one(dim):
                dim = d
            elif not is_one(d) and not same_size(d, dim):
                raise ShapeError(f"{op}: shapes {' and '.join(shape_text(s) for s in shapes)} cannot be broadcast together "
                                 f"(dimension {k - ndim}: {format_size(dim)} vs {format_size(d)})")
        out.append(dim if dim is not None else SizeExpr.of(1))
    return tuple(out)


def normalize_axes(op: str, axis: int | Sequence[int] | None, ndim: int, shape: Sequence[SizeExpr]) -> tuple[int, ...]:
    """Non-negative, sorted, distinct axes; ``None`` means every axis."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool) or not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a!r} is out of range for a tensor of shape {shape_text(shape)} ({ndim} dimensions)")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r} for shape {shape_text(shape)}")
    return tuple(sorted(out))


def broadcast_subscripts(shape: Sequence[SizeExpr], out_shape: Sequence[SizeExpr], its: Sequence[str]) -> list[str | int]:
    """The subscripts of a tensor of ``shape`` broadcast to ``out_shape`` indexed by ``its``."""
    off = len(out_shape) - len(shape)
    return [0 if is_one(d) and not is_one(out_shape[off + k]) else its[off + k] for k, d in enumerate(shape)]
