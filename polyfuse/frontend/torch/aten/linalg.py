"""Matrix products: ``mm``, ``bmm``, ``matmul``, ``addmm`` (``beta * bias + alpha * a @ b``), ``linear``
(``x @ w.T + b``, the transpose a view), ``baddbmm``."""

from __future__ import annotations

from typing import Any

from polyfuse import ops
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.torch.aten.registry import aten, tensor, unsupported


@aten("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def mm(a: Any, b: Any) -> Tensor:
    return ops.matmul(tensor(a), tensor(b))


def _affine(bias: Any, prod: Tensor, beta: Any, alpha: Any) -> Tensor:
    if alpha != 1:
        prod = ops.mul(prod, alpha)
    if beta == 0:
        return prod
    bias = tensor(bias, "bias")
    return ops.add(ops.mul(bias, beta) if beta != 1 else bias, prod)


@aten("aten.addmm.default")
def addmm(bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _affine(bias, ops.matmul(tensor(a), tensor(b)), beta, alpha)


@aten("aten.baddbmm.default")
def baddbmm(bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _affine(bias, ops.matmul(tensor(a), tensor(b)), beta, alpha)


@aten("aten.linear.default")
def linear(x: Any, w: Any, b: Any = None) -> Tensor:
    w = tensor(w, "weight")
    if w.ndim != 2:
        raise unsupported(f"linear with a {w.ndim}-d weight")
    y = ops.matmul(tensor(x), ops.permute(w, (1, 0)))
    return y if b is None else ops.add(y, tensor(b, "bias"))
