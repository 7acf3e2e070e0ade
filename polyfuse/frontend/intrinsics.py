"""Functions usable inside ``@pf.program`` bodies.

Called from plain Python they compute on numbers and numpy arrays (so a program body is still readable
Python); inside a program the frontend recognises them by identity and turns them into expression nodes.
The tables at the end map each function (and the plain-Python spellings the DSL also accepts, such as
``abs``, ``min`` or ``math.exp``) to its expression operator.
"""

from __future__ import annotations

import builtins
import functools
import math
from typing import Any

import numpy as np


def exp(x: Any) -> Any:
    """e ** x."""
    return np.exp(x)


def log(x: Any) -> Any:
    """Natural logarithm."""
    return np.log(x)


def sqrt(x: Any) -> Any:
    """Square root."""
    return np.sqrt(x)


def tanh(x: Any) -> Any:
    """Hyperbolic tangent."""
    return np.tanh(x)


def abs(x: Any) -> Any:  # noqa: A001 - mirrors the builtin on purpose
    """Absolute value."""
    return np.abs(x)


def max(a: Any, b: Any, *rest: Any) -> Any:  # noqa: A001
    """Elementwise maximum of two or more values."""
    return functools.reduce(np.maximum, rest, np.maximum(a, b))


def min(a: Any, b: Any, *rest: Any) -> Any:  # noqa: A001
    """Elementwise minimum of two or more values."""
    return functools.reduce(np.minimum, rest, np.minimum(a, b))


def pow(a: Any, b: Any) -> Any:  # noqa: A001
    """``a ** b`` (computed in floating point inside programs)."""
    return np.power(a, b)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` holds, else ``b``. Inside a program both ``a`` and ``b`` are evaluated, so
    every array element they read must exist; guard partial accesses with an affine ``if`` instead."""
    return np.where(cond, a, b)


def empty(shape: Any, dtype: Any) -> Any:
    """Declares a temporary array inside a program body: ``B = pf.empty((N, M), pf.f32)``; a shape of
    ``()`` declares a local scalar. It has no meaning outside a program."""
    raise TypeError("pf.empty declares a temporary inside a @pf.program body; it is not callable directly")


UNARY = {exp: "exp", log: "log", sqrt: "sqrt", tanh: "tanh", abs: "abs"}
BINARY = {max: "max", min: "min", pow: "pow"}
# Plain Python and numpy spellings accepted too, so that ``abs(x)``, ``math.exp(x)`` or ``np.sqrt(x)`` mean
# what they say. (numpy's binary functions are left out: their third argument is ``out``.)
PY_UNARY = {builtins.abs: "abs", math.exp: "exp", math.log: "log", math.sqrt: "sqrt", math.tanh: "tanh",
            np.exp: "exp", np.log: "log", np.sqrt: "sqrt", np.tanh: "tanh", np.abs: "abs"}
PY_BINARY = {builtins.max: "max", builtins.min: "min", builtins.pow: "pow", math.pow: "pow"}
