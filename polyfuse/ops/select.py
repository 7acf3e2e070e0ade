"""Selection and joining of graph tensors: ``pf.ops.where``, comparisons (``x > 0``), ``pf.ops.concat``.

* ``where(cond, a, b)``: ``a`` where ``cond`` is non-zero, else ``b``, elementwise with broadcasting (one
  statement, ``out[I] = cond[I] != 0 ? a[I] : b[I]``; both sides are evaluated, as in numpy).
* ``x > y`` (``<``, ``>=``, ``<=``; ``pf.ops.greater`` and friends): 1 where it holds, else 0, in the
  operands' type, so ``where(x > 0, x, 0.1 * x)`` reads as in numpy. (``==`` keeps Python's identity
  meaning: tensors are used as dictionary keys; ``pf.ops.equal`` compares values.)
* ``concat(tensors, axis)``: one statement per input, each copying it into its slab of the output at the
  running offset along ``axis`` (extents may be symbolic: the offset is an affine size expression).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from polyfuse.errors import ShapeError, api_boundary
from polyfuse.frontend.formula import Val, const
from polyfuse.frontend.graph import Lowering, Tensor, as_tensors, elementwise, result_dtype
from polyfuse.frontend.shapes import normalize_axes, same_size, shape_text
from polyfuse.ir.expr import Compare, Where
from polyfuse.types import SizeExpr


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond != 0``, else ``b`` (numpy's ``where``; broadcasting)."""

    def select(c: Val, x: Val, y: Val) -> Val:
        zero = const(0, c.dtype)
        return Val(Where(Compare("!=", c.expr, zero.expr), x.expr, y.expr, x.dtype))

    return elementwise("where", select, cond, a, b)


def _comparison(op: str, sym: str) -> Any:
    def compare(a: Any, b: Any) -> Tensor:
        def value(x: Val, y: Val) -> Val:
            return Val(Where(Compare(sym, x.expr, y.expr), const(1, x.dtype).expr, const(0, x.dtype).expr, x.dtype))

        return elementwise(op, value, a, b)

    compare.__name__ = op
    compare.__doc__ = f"1 where ``a {sym} b``, else 0, elementwise in the operands' type."
    return compare


greater = _comparison("greater", ">")
less = _comparison("less", "<")
greater_equal = _comparison("greater_equal", ">=")
less_equal = _comparison("less_equal", "<=")
equal = _comparison("equal", "==")
not_equal = _comparison("not_equal", "!=")


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """The tensors joined along ``axis`` (every other extent equal; numpy's ``concatenate``)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("concat: needs at least one tensor")
    graph, ops = as_tensors("concat", tensors)
    if any(not isinstance(t, Tensor) or t.graph is not graph for t in ops):
        raise ShapeError("concat: every operand must be a tensor of the same graph")
    first = tensors[0]
    (a,) = normalize_axes("concat", axis, first.ndim, first.shape)
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(not same_size(x, y) for k, (x, y) in enumerate(zip(t.shape, first.shape)) if k != a):
            raise ShapeError(f"concat: {shape_text(t.shape)} does not match {shape_text(first.shape)} off axis {axis}")
    extent = SizeExpr.of(0)
    for t in tensors:
        extent = extent + t.shape[a]
    dtype = result_dtype(tensors)

    def lower(lw: Lowering, out: Tensor, array: str) -> None:
        offset = SizeExpr.of(0)
        for t in tensors:
            with lw.nest(t.shape) as its:
                subs: list[Any] = list(its)
                subs[a] = lw.index([its[a]])[0] + lw.size(offset)
                lw.assign(array, subs, "=", lambda load, t=t, its=its: load(t, its), f"{array} = concat({lw.array(t)})")
            offset = offset + t.shape[a]

    return graph.apply("concat", tensors, first.shape[:a] + (extent,) + first.shape[a + 1 :], dtype, lower)


def attach() -> None:
    """Comparison operators on :class:`Tensor` (``x > 0``), each an API boundary."""
    for name, fn in (("__gt__", greater), ("__lt__", less), ("__ge__", greater_equal), ("__le__", less_equal)):
        setattr(Tensor, name, api_boundary(fn))


attach()
