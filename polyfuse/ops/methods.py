"""numpy-style methods of graph tensors: ``x.T``, ``x.sum(axis)``, ``x.max()``, ``x.mean()``, ``x.min()``,
``x.reshape(...)`` (``x.view`` is taken: a tensor's ``view`` field records the view it is), ``x.transpose(...)`` and indexing ``x[i]``, ``x[1:-1, ::2]``.

Each is a spelling of an operator of :mod:`polyfuse.ops` (``transpose``, the reductions, ``reshape``,
``select`` and slices), attached to :class:`~polyfuse.frontend.graph.Tensor` when ``polyfuse.ops`` is
imported (the graph module cannot import the operators, which build on it). Slices are affine views: a
start and a positive step that are ints, and a stop that is an int, a negative int (counted from the end),
or, with step 1, an affine size expression (``x[1:N - 1]``); anything else is a :class:`ShapeError` that
names the index.
"""

from __future__ import annotations

from typing import Any

from polyfuse.errors import ShapeError, api_boundary
from polyfuse.frontend.graph import Lowering, Tensor
from polyfuse.frontend.shapes import shape_text
from polyfuse.ops import reduce, shape
from polyfuse.types import Param, SizeExpr


def _T(x: Tensor) -> Tensor:  # noqa: N802 - numpy's spelling
    """The tensor with its axes reversed (``x.T``, numpy's)."""
    return shape.transpose(x)


def _sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return reduce.sum(x, axis, keepdims)


def _max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return reduce.max(x, axis, keepdims)


def _min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return reduce.min(x, axis, keepdims)


def _mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return reduce.mean(x, axis, keepdims)


def _reshape(x: Tensor, *new_shape: Any) -> Tensor:
    """``x.reshape(R, D)`` or ``x.reshape((R, D))`` (one entry may be -1)."""
    if len(new_shape) == 1 and isinstance(new_shape[0], (tuple, list)):
        new_shape = tuple(new_shape[0])
    return shape.reshape(x, new_shape)


def _transpose(x: Tensor, *axes: Any) -> Tensor:
    """``x.transpose()`` (reversed), ``x.transpose(1, 0, 2)`` or ``x.transpose((1, 0, 2))``."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    return shape.transpose(x, axes or None)


def _getitem(x: Tensor, index: Any) -> Tensor:
    """Basic indexing: ints select (the axis goes), slices view; fewer indices than axes keep the rest."""
    items = index if isinstance(index, tuple) else (index,)
    if len(items) > x.ndim:
        raise ShapeError(f"index {index!r}: {len(items)} indices for a tensor of shape {shape_text(x.shape)}")
    out, axis = x, 0
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, slice)):
            raise ShapeError(f"index {index!r}: only ints and slices index a graph tensor (not {type(item).__name__})")
        if isinstance(item, int):
            out = shape.select(out, axis, item)
            continue
        out = _slice(out, axis, item, index)
        axis += 1
    return out


def _slice(x: Tensor, axis: int, item: slice, index: Any) -> Tensor:
    size = x.shape[axis]
    step = 1 if item.step is None else item.step
    start = 0 if item.start is None else item.start
    if not isinstance(step, int) or step < 1 or not isinstance(start, int):
        raise ShapeError(f"index {index!r}: a slice needs an int start and a positive int step (affine views only)")
    if start < 0:
        if size.terms:
            start_expr = size + start
            return _symbolic(x, axis, start_expr, item, index)
        start += size.constant
    stop: Any = item.stop
    if stop is None:
        stop = size
    elif isinstance(stop, int) and stop < 0:
        stop = size + stop
    stop = SizeExpr.of(stop) if isinstance(stop, (int, Param, SizeExpr)) else stop
    if not isinstance(stop, SizeExpr):
        raise ShapeError(f"index {index!r}: a slice's stop must be an int or an affine size expression")
    if not stop.terms:
        return shape.slice_axis(x, axis, start, stop.constant, step)
    if step != 1:
        raise ShapeError(f"index {index!r}: a symbolic stop needs step 1 (the extent must stay affine)")
    return _view(x, axis, SizeExpr.of(start), stop - start)


def _symbolic(x: Tensor, axis: int, start: SizeExpr, item: slice, index: Any) -> Tensor:
    """``x[-k:]`` on a symbolic axis: start ``size - k``, extent ``k`` (step 1 and no stop only)."""
    if item.stop is not None or (item.step or 1) != 1:
        raise ShapeError(f"index {index!r}: a negative start on a symbolic axis takes no stop and step 1")
    return _view(x, axis, start, x.shape[axis] - start)


def _view(x: Tensor, axis: int, start: SizeExpr, extent: SizeExpr) -> Tensor:
    def index(lw: Lowering, subs: list) -> list:
        offset = lw.index([start.constant])[0]
        for name, coeff in start.terms:  # a size by name is an affine function of the scope's params
            offset = offset + lw.index([name])[0] * coeff
        return subs[:axis] + [subs[axis] + offset] + subs[axis + 1 :]

    return x.graph.view("slice", x, x.shape[:axis] + (extent,) + x.shape[axis + 1 :], index)


def attach() -> None:
    """Give :class:`Tensor` its numpy-style methods (each an API boundary, like the operators)."""
    Tensor.T = property(api_boundary(_T))  # type: ignore[attr-defined]
    for name, fn in (("sum", _sum), ("max", _max), ("min", _min), ("mean", _mean), ("reshape", _reshape),
                     ("transpose", _transpose), ("__getitem__", _getitem)):
        setattr(Tensor, name, api_boundary(fn))


attach()
