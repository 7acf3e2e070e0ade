"""The table itself and the decorator the operator-family modules register with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polyfuse.errors import UnsupportedOperator
from polyfuse.frontend.graph import Tensor

Handler = Callable[..., Any]
TABLE: dict[str, Handler] = {}


def aten(*names: str) -> Callable[[Handler], Handler]:
    """Register the decorated function for each ATen overload name (``"aten.add.Tensor"``)."""
    def register(fn: Handler) -> Handler:
        for n in names:
            if n in TABLE:
                raise ValueError(f"{n} is registered twice")
            TABLE[n] = fn
        return fn

    return register


def tensor(x: Any, what: str = "operand") -> Tensor:
    if not isinstance(x, Tensor):
        raise UnsupportedOperator(f"{what} must be a tensor, got {type(x).__name__}")
    return x


def ints(v: Any, what: str) -> list[int]:
    """A list of plain ints (a single int becomes a one-element list)."""
    vals = [v] if isinstance(v, int) else list(v)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
        raise UnsupportedOperator(f"{what} must be ints, got {v!r}")
    return vals


def unsupported(why: str) -> UnsupportedOperator:
    return UnsupportedOperator(why)
