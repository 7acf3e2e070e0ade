"""Affine translation for the Python DSL: subscripts, loop bounds, ``if`` conditions and ``assume=`` text.

Everything here denotes a (quasi-)affine function of the enclosing loop iterators and the size params, so
that it has an exact polyhedral meaning. The translator builds ``isl.PwAff`` and ``isl.Set`` values by
operator in the builder's :class:`~polyfuse.ir.builder.Scope` (never by printing isl syntax):

* an affine expression is an integer constant, an iterator or a size, combined with ``+``, ``-``, ``*`` by
  an integer constant, ``//`` and ``%`` by a positive integer constant, and ``min(...)`` / ``max(...)``;
* a condition compares affine expressions (``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``, chains such as
  ``0 < i < N``) and joins comparisons with ``and``, ``or`` and ``not``.

Names are resolved by the reader (:meth:`DslReader.lookup`) into a :class:`Binding`, the one place that
decides what a name means at a point of the program.
"""

from __future__ import annotations

import ast
import builtins
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import islpy as isl

from polyfuse.errors import SourceError
from polyfuse.frontend import intrinsics
from polyfuse.ir.builder import Scope
from polyfuse.types import SizeExpr

if TYPE_CHECKING:
    from polyfuse.frontend.dsl import DslReader

AFFINE_HINT = (
    "allowed: integer constants, loop iterators and sizes, combined with + and -, * by an integer constant, "
    "// and % by a positive integer constant, min(...) and max(...)"
)
CONDITION_HINT = (
    "an `if` compares affine expressions of loop iterators and sizes, joined by and / or / not; "
    "use pf.where(cond, a, b) for a choice that depends on array values"
)


class NameKind(enum.Enum):
    """What a name in a program body denotes."""

    ITERATOR = "loop variable"
    PARAM = "size"
    SIZE_EXPR = "size expression"
    INT = "integer constant"
    FLOAT = "float constant"
    LOCAL = "local scalar"
    ARRAY = "array"
    SCALAR_ARG = "scalar argument"
    OTHER = "Python object"
    UNKNOWN = "unknown name"


@dataclass(frozen=True)
class Binding:
    """The meaning of one name: its kind and, for params, constants and objects, its value."""

    kind: NameKind
    value: Any = None


MIN_MAX = {builtins.min: "min", builtins.max: "max", intrinsics.min: "min", intrinsics.max: "max"}


def lookup_table(table: dict[Any, str], obj: Any) -> str | None:
    """``table[obj]`` for a function table keyed by identity; None for anything else (even unhashables)."""
    try:
        return table.get(obj)
    except TypeError:
        return None


class AffineTranslator:
    """Translates affine Python expressions of one program into isl values (see the module docstring)."""

    def __init__(self, reader: DslReader) -> None:
        self.reader = reader

    # ----- integer constants --------------------------------------------------------------------
    def constant_int(self, node: ast.expr, scope: Scope) -> int | None:
        """The value of an integer constant expression (literals, integer globals, + - * // % ** of them)."""
        if isinstance(node, ast.Constant):
            v = node.value
            return v if isinstance(v, int) and not isinstance(v, bool) else None
        if isinstance(node, ast.Name):
            b = self.reader.lookup(node.id, scope)
            return b.value if b.kind is NameKind.INT else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.constant_int(node.operand, scope)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp):
            a, c = self.constant_int(node.left, scope), self.constant_int(node.right, scope)
            if a is None or c is None:
                return None
            op = type(node.op)
            if op is ast.Add:
                return a + c
            if op is ast.Sub:
                return a - c
            if op is ast.Mult:
                return a * c
            if op is ast.FloorDiv and c > 0:
                return a // c
            if op is ast.Mod and c > 0:
                return a % c
            if op is ast.Pow and 0 <= c <= 64:
                return a**c
        return None

    # ----- affine expressions -------------------------------------------------------------------
    def affine(self, node: ast.expr, scope: Scope, what: str = "subscript") -> isl.PwAff:
        """The (quasi-)affine function that ``node`` denotes in ``scope``.

        ``what`` names the place the expression stands in ("subscript", "loop bound", "condition") so that
        an error says where affine expressions are required.
        """
        k = self.constant_int(node, scope)
        if k is not None:
            return scope.const(k)
        text = ast.unparse(node)
        if isinstance(node, ast.Name):
            return self._affine_name(node, scope, what)
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            if op in (ast.Add, ast.Sub):
                a, c = self.affine(node.left, scope, what), self.affine(node.right, scope, what)
                return a + c if op is ast.Add else a - c
            if op is ast.Mult:
                kl, kr = self.constant_int(node.left, scope), self.constant_int(node.right, scope)
                if kl is not None:
                    return self.affine(node.right, scope, what) * kl
                if kr is not None:
                    return self.affine(node.left, scope, what) * kr
                for side in (node.left, node.right):
                    if isinstance(side, ast.Constant) and isinstance(side.value, float):
                        raise self._error(side, f"`{text}` is not an integer: a {what} cannot use the float {side.value!r}", what)
                raise self._error(node, f"`{text}` is not affine: a {what} cannot multiply two variables", what)
            if op in (ast.FloorDiv, ast.Mod):
                d = self.constant_int(node.right, scope)
                sym = "//" if op is ast.FloorDiv else "%"
                if d is None or d <= 0:
                    raise self._error(
                        node, f"`{text}` is not affine: {sym} in a {what} needs a positive integer constant on the right, "
                        f"not `{ast.unparse(node.right)}`", what)
                a = self.affine(node.left, scope, what)
                dv = isl.Val.int_from_si(a.get_ctx(), d)
                return a.scale_down_val(dv).floor() if op is ast.FloorDiv else a.mod_val(dv)
            if op is ast.Div:
                raise self._error(node, f"`{text}` uses true division `/`; a {what} divides with `//` by a positive integer constant", what)
            raise self._error(node, f"`{text}` is not affine: operator `{_op_symbol(node.op)}` is not allowed in a {what}", what)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            a = self.affine(node.operand, scope, what)
            return -a if isinstance(node.op, ast.USub) else a
        if isinstance(node, ast.Call):
            kind = lookup_table(MIN_MAX, self.reader.resolve(node.func, scope))
            if kind and len(node.args) >= 2 and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
                parts = [self.affine(a, scope, what) for a in node.args]
                out = parts[0]
                for p in parts[1:]:
                    out = out.min(p) if kind == "min" else out.max(p)
                return out
            if kind:
                raise self._error(node, f"`{text}`: min and max in a {what} take two or more positional arguments", what)
            raise self._error(node, f"`{text}` is not affine: a {what} can call only min(...) and max(...)", what)
        if isinstance(node, ast.Subscript):
            if what == "condition":
                raise self._error(node, f"`{text}` reads an array: an `if` condition cannot depend on array values", what)
            raise self._error(node, f"`{text}` reads an array element; a {what} must not depend on array values (indirect access)", what)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, float):
                raise self._error(node, f"`{text}` is not an integer: a {what} must be an integer affine expression", what)
            raise self._error(node, f"the constant `{text}` cannot appear in a {what}", what)
        if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            raise self._error(node, f"the condition `{text}` is used as a number in a {what}", what)
        raise self._error(node, f"`{text}` is not allowed in a {what}", what)

    def _affine_name(self, node: ast.Name, scope: Scope, what: str) -> isl.PwAff:
        b = self.reader.lookup(node.id, scope)
        if b.kind is NameKind.ITERATOR:
            return scope.var(node.id)
        if b.kind is NameKind.PARAM and b.value in scope.params:
            return scope.var(b.value)
        if b.kind is NameKind.SIZE_EXPR and all(n in scope.params for n, _ in b.value.terms):
            return size_pw_aff(b.value, scope)
        if b.kind in (NameKind.LOCAL, NameKind.ARRAY, NameKind.SCALAR_ARG, NameKind.FLOAT):
            raise self._error(
                node, f"`{node.id}` is a {b.kind.value}; a {what} may only use loop iterators, sizes and integer constants", what)
        if b.kind is NameKind.UNKNOWN:
            raise self._error(node, f"unknown name `{node.id}` in a {what}", what)
        raise self._error(node, f"`{node.id}` (a {b.kind.value}) cannot appear in a {what}", what)

    def _error(self, node: ast.AST, message: str, what: str) -> SourceError:
        return self.reader.error(node, message, hint=CONDITION_HINT if what == "condition" else AFFINE_HINT)

    # ----- conditions ---------------------------------------------------------------------------
    def condition(self, node: ast.expr, scope: Scope) -> isl.Set:
        """The set of points of ``scope`` where the affine condition ``node`` holds."""
        if isinstance(node, ast.BoolOp):
            parts = [self.condition(v, scope) for v in node.values]
            out = parts[0]
            for p in parts[1:]:
                out = out & p if isinstance(node.op, ast.And) else out | p
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return scope.universe().subtract(self.condition(node.operand, scope))
        if isinstance(node, ast.Compare):
            for op in node.ops:
                if not isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)):
                    raise self.reader.error(
                        node, f"comparison `{_op_symbol(op)}` is not allowed in the condition `{ast.unparse(node)}`",
                        hint="compare affine expressions with < <= > >= == !=")
            out = scope.universe()
            left = self.affine(node.left, scope, "condition")
            for op, right_node in zip(node.ops, node.comparators):
                right = self.affine(right_node, scope, "condition")
                cmp = {ast.Lt: left.lt_set, ast.LtE: left.le_set, ast.Gt: left.gt_set, ast.GtE: left.ge_set,
                       ast.Eq: left.eq_set, ast.NotEq: left.ne_set}[type(op)]
                out = out & cmp(right)
                left = right
            return out
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return scope.universe() if node.value else scope.universe().subtract(scope.universe())
        if isinstance(node, ast.Subscript):
            raise self.reader.error(
                node, f"`{ast.unparse(node)}` reads an array: an `if` condition cannot depend on array values", hint=CONDITION_HINT)
        raise self.reader.error(node, f"`{ast.unparse(node)}` is not an affine condition", hint=CONDITION_HINT)

    # ----- array subscripts ---------------------------------------------------------------------
    def subscript(self, node: ast.Subscript, scope: Scope) -> tuple[str, list[isl.PwAff]]:
        """The array and the affine subscripts of ``A[i, j]``, checked against the array's rank."""
        r = self.reader
        if isinstance(node.value, ast.Subscript):
            raise r.error(node, f"`{ast.unparse(node)}` indexes twice; write one subscript per dimension: "
                                f"`{ast.unparse(node.value.value)}[..., ...]`")
        if not isinstance(node.value, ast.Name):
            raise r.error(node, f"`{ast.unparse(node)}` subscripts `{ast.unparse(node.value)}`, which is not an array name",
                          hint="subscript a named array: A[i, j]")
        name = node.value.id
        b = r.lookup(name, scope)
        if b.kind is not NameKind.ARRAY:
            raise r.error(node.value, f"`{name}` is a {b.kind.value}, not an array, and cannot be subscripted")
        arr = r.builder.arrays[name]
        elems = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        for e in elems:
            if isinstance(e, ast.Slice):
                raise r.error(e, f"slice `{ast.unparse(e)}` in `{ast.unparse(node)}`: subscripts select single elements",
                              hint="write an explicit loop over the range instead of a slice")
        if len(elems) != arr.ndim:
            raise r.error(node, f"array `{name}` has {arr.ndim} dimension{'s' if arr.ndim != 1 else ''} but "
                                f"`{ast.unparse(node)}` gives {len(elems)} subscript{'s' if len(elems) != 1 else ''}")
        return name, [self.affine(e, scope, "subscript") for e in elems]


def size_pw_aff(size: SizeExpr, scope: Scope) -> isl.PwAff:
    """The affine function of the params that a size expression (``2*N + 1``) denotes."""
    out = scope.const(size.constant)
    for name, c in size.terms:
        out = out + scope.var(name) * c
    return out


_OP_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}


def _op_symbol(op: ast.AST) -> str:
    return _OP_SYMBOLS.get(type(op), type(op).__name__)
