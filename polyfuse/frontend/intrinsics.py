"""Functions usable inside ``@pf.program`` bodies.

Called from plain Python they compute on numbers (so a program body is still readable Python); inside a
program the frontend recognises them by identity and turns them into expression nodes.
"""

from __future__ import annotations

import builtins
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
    return np.sqrt(x)


def tanh(x: Any) -> Any:
    return np.tanh(x)


def abs(x: Any) -> Any:  # noqa: A001 - mirrors the builtin on purpose
    return np.abs(x)


def max(a: Any, b: Any) -> Any:  # noqa: A001
    return np.maximum(a, b)


def min(a: Any, b: Any) -> Any:  # noqa: A001
    return np.minimum(a, b)


def pow(a: Any, b: Any) -> Any:  # noqa: A001
    return np.power(a, b)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` holds, else ``b``."""
    return np.where(cond, a, b)


def empty(shape: Any, dtype: Any) -> Any:
    """Declares a temporary array inside a program body."""
    raise TypeError("pf.empty declares a temporary inside a @pf.program body; it is not callable directly")


UNARY = {exp: "exp", log: "log", sqrt: "sqrt", tanh: "tanh", abs: "abs"}
BINARY = {max: "max", min: "min", pow: "pow"}
# Plain Python spellings accepted too, so that ``abs(x)`` or ``math.exp(x)`` mean what they say.
PY_UNARY = {builtins.abs: "abs", math.exp: "exp", math.log: "log", math.sqrt: "sqrt", math.tanh: "tanh"}
PY_BINARY = {builtins.max: "max", builtins.min: "min", builtins.pow: "pow", math.pow: "pow"}
