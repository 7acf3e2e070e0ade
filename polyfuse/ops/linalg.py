"""``matmul``: numpy's ``@`` on tensors of any rank (batched, with broadcast batch dimensions).

``(..., M, K) @ (..., K, N) -> (..., M, N)``; a 1-d left operand is a row (its ``M`` dimension is
dropped from the result) and a 1-d right operand a column. Lowers to ``out = 0`` and
``out[b, m, n] += a[b, m, k] * w[b, k, n]`` over ``(b..., m, k, n)``.
"""

from __future__ import annotations

from typing import Any

from polyfuse.errors import PolyfuseError, ShapeError
from polyfuse.frontend.formula import const
from polyfuse.frontend.graph import Graph, Tensor, result_dtype
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import broadcast_shapes, broadcast_subscripts, same_size, shape_text
from polyfuse.types import SizeExpr


def matmul(a: Any, b: Any) -> Tensor:
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise PolyfuseError(f"matmul: both operands must be tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must have at least one dimension, got {shape_text(a.shape)} @ {shape_text(b.shape)}")
    a_shape = ((SizeExpr.of(1),) + a.shape) if a.ndim == 1 else a.shape
    b_shape = (b.shape + (SizeExpr.of(1),)) if b.ndim == 1 else b.shape
    m, k1 = a_shape[-2:]
    k2, n = b_shape[-2:]
    if not same_size(k1, k2):
        raise ShapeError(f"matmul: inner dimensions do not match: {shape_text(a.shape)} @ {shape_text(b.shape)}")
    try:
        batch = broadcast_shapes("matmul", a_shape[:-2], b_shape[:-2])
    except ShapeError:
        raise ShapeError(f"matmul: batch dimensions of {shape_text(a.shape)} @ {shape_text(b.shape)} cannot be broadcast") from None
    dtype = result_dtype([a, b])
    full = batch + (m, n)
    keep = [True] * len(batch) + [a.ndim > 1, b.ndim > 1]
    shape = tuple(s for s, kk in zip(full, keep) if kk)

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        nb = len(batch)

        def out_subs(its: list[str]) -> list[Any]:
            return [i for i, kk in zip(its, keep) if kk]

        with lw.nest(full) as its:
            lw.assign(y, out_subs(its), "=", lambda ld: const(0, dtype), f"{y} = 0")
        # iterators: batch..., m, k, n (row-major friendly: the innermost loop walks rows of b and y)
        with lw.nest(batch + (m, k1, n)) as its:
            bi, mi, ki, ni = its[:nb], its[nb], its[nb + 1], its[nb + 2]
            a_its = broadcast_subscripts(a_shape[:-2], batch, bi) + [mi, ki]
            b_its = broadcast_subscripts(b_shape[:-2], batch, bi) + [ki, ni]
            a_its = a_its[1:] if a.ndim == 1 else a_its
            b_its = b_its[:-1] if b.ndim == 1 else b_its
            lw.assign(y, out_subs(bi + [mi, ni]), "+=", lambda ld: ld(a, a_its) * ld(b, b_its),
                      f"{y} += {lw.array(a)} * {lw.array(b)}")

    return a.graph.apply("matmul", [a, b], shape, dtype, lower)


Graph.matmul_hook = staticmethod(matmul)  # type: ignore[assignment]  # ``a @ b`` on tensors
