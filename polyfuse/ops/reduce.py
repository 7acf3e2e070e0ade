"""Reductions along axes: ``sum``, ``max``, ``min``, ``mean`` (``axis``: an int, a tuple, or None for all;
``keepdims`` as in numpy).

Each lowers to an init statement and an update statement over the full shape (``+=`` for sums,
``acc = max(acc, x)`` from ``-inf`` for max); ``mean`` adds a statement dividing by the element count.
"""

from __future__ import annotations

from typing import Any

from polyfuse.frontend.graph import Tensor, reduction
from polyfuse.types import f32


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return reduction("sum", "sum", lambda v: v, [x], axis, keepdims)


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return reduction("max", "max", lambda v: v, [x], axis, keepdims)


def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return reduction("min", "min", lambda v: v, [x], axis, keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    dtype = x.dtype if x.dtype.is_float else f32
    return reduction("mean", "sum", lambda v: v, [x], axis, keepdims, dtype=dtype, finish=lambda acc, n: acc / n)
