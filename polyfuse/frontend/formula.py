"""Element formulas for the graph's lowerings: :class:`Val`, a thin operator-overloading wrapper over
:mod:`polyfuse.ir.expr` nodes (``+ - * /``, unary minus; Python numbers take the other operand's type;
mixed types promote as :func:`polyfuse.types.promote` says).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyfuse.ir.expr import Binary, Cast, Const, Expr, Unary
from polyfuse.types import DType, promote


@dataclass(frozen=True)
class Val:
    """An element formula: wraps an :class:`Expr` with ``+ - * /`` and unary minus; numbers take its type."""

    expr: Expr

    @property
    def dtype(self) -> DType:
        return self.expr.dtype

    def _other(self, o: Any) -> Val:
        return o if isinstance(o, Val) else const(o, self.dtype)

    def _bin(self, op: str, a: Val, b: Val) -> Val:
        dt = promote(a.dtype, b.dtype)
        return Val(Binary(op, cast(a, dt).expr, cast(b, dt).expr, dt))

    def __add__(self, o: Any) -> Val:
        return self._bin("+", self, self._other(o))

    def __radd__(self, o: Any) -> Val:
        return self._bin("+", self._other(o), self)

    def __sub__(self, o: Any) -> Val:
        return self._bin("-", self, self._other(o))

    def __rsub__(self, o: Any) -> Val:
        return self._bin("-", self._other(o), self)

    def __mul__(self, o: Any) -> Val:
        return self._bin("*", self, self._other(o))

    def __rmul__(self, o: Any) -> Val:
        return self._bin("*", self._other(o), self)

    def __truediv__(self, o: Any) -> Val:
        return self._bin("/", self, self._other(o))

    def __rtruediv__(self, o: Any) -> Val:
        return self._bin("/", self._other(o), self)

    def __neg__(self) -> Val:
        return Val(Unary("neg", self.expr, self.dtype))


def const(value: float | int, dtype: DType) -> Val:
    return Val(Const(float(value) if dtype.is_float else int(value), dtype))


def cast(v: Val, dtype: DType) -> Val:
    if v.dtype == dtype:
        return v
    if isinstance(v.expr, Const):
        return const(v.expr.value, dtype)
    return Val(Cast(v.expr, dtype))


def unary(op: str, v: Val) -> Val:
    """``exp``, ``log``, ``sqrt``, ``tanh``, ``abs``, ``neg`` of a float value."""
    return Val(Unary(op, v.expr, v.dtype))


def binary(op: str, a: Val, b: Val | float) -> Val:
    """``max``, ``min``, ``pow`` (or an arithmetic operator) of two values."""
    b = a._other(b)
    return a._bin(op, a, b)
