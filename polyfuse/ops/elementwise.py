"""Elementwise operators: one statement each, ``out[I] = f(a[I'], b[I''])`` with numpy broadcasting.

Operands are tensors of one graph or Python numbers (which take the tensor's type, as in numpy).
"""

from __future__ import annotations

from typing import Any

from polyfuse.frontend.formula import binary, const, unary
from polyfuse.frontend.graph import Tensor, elementwise


def add(a: Any, b: Any) -> Tensor:
    return elementwise("add", lambda x, y: x + y, a, b)


def sub(a: Any, b: Any) -> Tensor:
    return elementwise("sub", lambda x, y: x - y, a, b)


def mul(a: Any, b: Any) -> Tensor:
    return elementwise("mul", lambda x, y: x * y, a, b)


def div(a: Any, b: Any) -> Tensor:
    return elementwise("div", lambda x, y: x / y, a, b, float_result=True)


def maximum(a: Any, b: Any) -> Tensor:
    return elementwise("maximum", lambda x, y: binary("max", x, y), a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return elementwise("minimum", lambda x, y: binary("min", x, y), a, b)


def neg(x: Tensor) -> Tensor:
    return elementwise("neg", lambda v: -v, x)


def exp(x: Tensor) -> Tensor:
    return elementwise("exp", lambda v: unary("exp", v), x, float_result=True)


def log(x: Tensor) -> Tensor:
    return elementwise("log", lambda v: unary("log", v), x, float_result=True)


def tanh(x: Tensor) -> Tensor:
    return elementwise("tanh", lambda v: unary("tanh", v), x, float_result=True)


def sqrt(x: Tensor) -> Tensor:
    return elementwise("sqrt", lambda v: unary("sqrt", v), x, float_result=True)


def rsqrt(x: Tensor) -> Tensor:
    """``1 / sqrt(x)``."""
    return elementwise("rsqrt", lambda v: const(1.0, v.dtype) / unary("sqrt", v), x, float_result=True)


def abs(x: Tensor) -> Tensor:  # noqa: A001
    return elementwise("abs", lambda v: unary("abs", v), x)
