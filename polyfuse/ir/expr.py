"""Value expressions: the right-hand sides of statements.

Expressions are immutable trees. Array reads do not carry subscripts: a :class:`Read` names one of its
statement's accesses by position, and the access's isl map says which element is read. Affine values of
loop iterators and sizes (``A[i] = i * 0.5``) are :class:`IndexValue` nodes holding an ``isl.PwAff`` on the
statement's domain, so every back end prints them through isl's AST builder rather than by substitution.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import islpy as isl

from polyfuse.types import DType, i32

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "tanh", "not")
BINARY_OPS = ("+", "-", "*", "/", "//", "%", "max", "min", "pow", "tdiv", "trem", "&", "|", "^", "<<", ">>")
"""``//`` and ``%`` on integers are Python's floor division and modulo (the DSL); ``tdiv`` and ``trem`` are C's
integer ``/`` and ``%``, which truncate toward zero (``-7 tdiv 2 == -3``, ``-7 trem 2 == -1``; the C frontend).
``& | ^ << >>`` are C's bitwise operators on integers."""
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL_OPS = ("and", "or")


class Expr:
    """Base of expression nodes; every node has a ``dtype`` (``None`` for boolean conditions)."""

    dtype: DType | None

    def children(self) -> tuple[Expr, ...]:
        return ()

    def walk(self) -> Iterator[Expr]:
        """Every node of the tree, parents before children."""
        yield self
        for c in self.children():
            yield from c.walk()


@dataclass(frozen=True)
class Const(Expr):
    value: float | int
    dtype: DType


@dataclass(frozen=True)
class Read(Expr):
    """The value of the element that access number ``access`` of the statement reads."""

    access: int
    dtype: DType


@dataclass(frozen=True)
class ScalarArg(Expr):
    """A scalar argument of the program (``alpha: pf.f32``)."""

    name: str
    dtype: DType


@dataclass(frozen=True)
class IndexValue(Expr):
    """An affine (or quasi-affine) value of the statement's iterators and the sizes."""

    value: isl.PwAff
    dtype: DType = i32


@dataclass(frozen=True)
class Unary(Expr):
    op: str
    operand: Expr
    dtype: DType | None

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: DType

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs)


@dataclass(frozen=True)
class Compare(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: DType | None = None

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs)


@dataclass(frozen=True)
class Logical(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: DType | None = None

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs)


@dataclass(frozen=True)
class Where(Expr):
    """``cond ? if_true : if_false``; both branches are evaluated only for their value."""

    cond: Expr
    if_true: Expr
    if_false: Expr
    dtype: DType

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.if_true, self.if_false)


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    dtype: DType

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


def format_expr(expr: Expr, access_names: list[str] | None = None) -> str:
    """A readable infix rendering, for ``print(program)``; reads print as their access's text."""
    f = lambda e: format_expr(e, access_names)  # noqa: E731
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Read):
        return access_names[expr.access] if access_names else f"read#{expr.access}"
    if isinstance(expr, ScalarArg):
        return expr.name
    if isinstance(expr, IndexValue):
        return format_pw_aff(expr.value)
    if isinstance(expr, Unary):
        if expr.op == "neg":
            return f"-({f(expr.operand)})"
        if expr.op == "not":
            return f"not ({f(expr.operand)})"
        return f"{expr.op}({f(expr.operand)})"
    if isinstance(expr, Binary):
        if expr.op in ("max", "min", "pow", "tdiv", "trem"):
            return f"{expr.op}({f(expr.lhs)}, {f(expr.rhs)})"
        return f"({f(expr.lhs)} {expr.op} {f(expr.rhs)})"
    if isinstance(expr, (Compare, Logical)):
        return f"({f(expr.lhs)} {expr.op} {f(expr.rhs)})"
    if isinstance(expr, Where):
        return f"where({f(expr.cond)}, {f(expr.if_true)}, {f(expr.if_false)})"
    if isinstance(expr, Cast):
        return f"{expr.dtype.name}({f(expr.operand)})"
    raise TypeError(f"unknown expression node {expr!r}")


def format_pw_aff(pa: isl.PwAff) -> str:
    """The body of an isl piecewise affine function without its space, e.g. ``i + 1``."""
    text = pa.to_str()
    body = text[text.index("{") + 1 : text.rindex("}")].strip()
    if "->" in body:
        body = body.split("->", 1)[1].strip()
    if body.startswith("[(") and body.endswith(")]"):
        body = body[2:-2]
    return body
