"""Views and reshapes: each becomes a ``pf.ops`` view (no copy, no statement), read through by whatever
operator consumes it. Semantics are logical (row-major element order), so a view of a transposed tensor
is exactly what torch computes whatever the strides were."""

from __future__ import annotations

import math
from typing import Any

from polyfuse import ops
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.shapes import is_one
from polyfuse.frontend.torch.aten.registry import aten, ints, tensor, unsupported
from polyfuse.types import SizeExpr

_MAX = 2**62


@aten("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(x: Any, shape: Any) -> Tensor:
    return ops.reshape(tensor(x), list(shape))


@aten("aten.permute.default")
def permute(x: Any, dims: Any) -> Tensor:
    return ops.permute(tensor(x), ints(dims, "dims"))


@aten("aten.transpose.int")
def transpose(x: Any, d0: int, d1: int) -> Tensor:
    x = tensor(x)
    n = max(x.ndim, 1)
    perm = list(range(x.ndim))
    if x.ndim:
        perm[d0 % n], perm[d1 % n] = perm[d1 % n], perm[d0 % n]
    return ops.permute(x, perm)


@aten("aten.t.default", "aten.numpy_T.default")
def t(x: Any) -> Tensor:
    x = tensor(x)
    return x if x.ndim < 2 else ops.permute(x, list(range(x.ndim))[::-1])


@aten("aten.expand.default")
def expand(x: Any, shape: Any, implicit: bool = False) -> Tensor:
    x = tensor(x)
    off = len(shape) - x.ndim
    sizes = [x.shape[k - off] if isinstance(s, int) and s == -1 else s for k, s in enumerate(shape)]
    return ops.expand(x, sizes)


@aten("aten.unsqueeze.default")
def unsqueeze(x: Any, dim: int) -> Tensor:
    return ops.unsqueeze(tensor(x), dim)


@aten("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def squeeze(x: Any, dim: Any = None) -> Tensor:
    x = tensor(x)
    return ops.squeeze(x, None if dim is None else [d for d in ints(dim, "dim") if x.ndim])


@aten("aten.select.int")
def select(x: Any, dim: int, index: int) -> Tensor:
    return ops.select(tensor(x), dim, index)


@aten("aten.slice.Tensor")
def slice_(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Tensor:
    x = tensor(x)
    size = x.shape[dim % x.ndim]
    n = None if size.terms else size.constant
    start = 0 if start is None else start
    end = _MAX if end is None else end
    if n is not None:
        start = max(0, start + n if start < 0 else start)
        end = min(n, end + n if end < 0 else end)
        end = max(end, start)
        if start == 0 and end == n and step == 1:
            return x
    elif start < 0 or end < 0:
        raise unsupported("negative slice bounds on a dynamic dimension")
    elif end >= _MAX and start == 0 and step == 1:
        return x
    return ops.slice_axis(x, dim, start, None if end >= _MAX else end, step)


def _sizes_along(x: Tensor, dim: int, sizes: list[int]) -> list[Tensor]:
    out, start = [], 0
    for s in sizes:
        out.append(ops.slice_axis(x, dim, start, start + s))
        start += s
    return out


@aten("aten.split.Tensor", "aten.split_with_sizes.default")
def split(x: Any, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
    x = tensor(x)
    size = x.shape[dim % x.ndim]
    if size.terms:
        raise unsupported("split along a dynamic dimension")
    n = size.constant
    if isinstance(split_size, int):
        sizes = [min(split_size, n - k) for k in range(0, n, split_size)] or [0]
    else:
        sizes = ints(split_size, "split sizes")
    return tuple(_sizes_along(x, dim, sizes))


@aten("aten.unbind.int")
def unbind(x: Any, dim: int = 0) -> tuple[Tensor, ...]:
    x = tensor(x)
    size = x.shape[dim % x.ndim]
    if size.terms:
        raise unsupported("unbind along a dynamic dimension")
    return tuple(ops.select(x, dim, k) for k in range(size.constant))


@aten("aten.unflatten.int")
def unflatten(x: Any, dim: int, sizes: Any) -> Tensor:
    x = tensor(x)
    d = dim % x.ndim
    return ops.reshape(x, list(x.shape[:d]) + list(sizes) + list(x.shape[d + 1:]))


@aten("aten.flatten.using_ints")
def flatten(x: Any, start: int = 0, end: int = -1) -> Tensor:
    x = tensor(x)
    if x.ndim == 0:
        return ops.reshape(x, [1])
    s, e = start % x.ndim, end % x.ndim
    mid = x.shape[s:e + 1]
    if any(m.terms for m in mid) and sum(1 for m in mid if not is_one(m)) > 1:
        raise unsupported("flatten of dynamic dimensions")
    merged = SizeExpr.of(math.prod(m.constant for m in mid)) if not any(m.terms for m in mid) else next(m for m in mid if not is_one(m))
    return ops.reshape(x, list(x.shape[:s]) + [merged] + list(x.shape[e + 1:]))
