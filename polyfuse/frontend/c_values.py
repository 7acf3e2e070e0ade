"""Translation of C right-hand sides into expression nodes, with C's typing rules.

Values need not be affine (``A[i][k] * B[k][j]``, ``i * j``). Types follow C, so that a program computes
what the C code computes: an unsuffixed float literal is ``double`` (f64), ``1.0f`` is f32, integer
literals, loop variables and sizes are ``int`` (i32); ``char``/``short`` operands are promoted to ``int``
and binary operators apply the usual arithmetic conversions (int < long < float < double), so ``int / int``
divides integers before any conversion to float; the assigned value is converted to the target's type (a
cast or conversion to an integer truncates toward zero). Integer ``/`` and ``%`` are ``tdiv``/``trem``,
which truncate toward zero as C does (the DSL's ``//``/``%`` floor). ``& | ^ << >>`` act on integers.
Integer expressions of loop variables and sizes that are affine become one :class:`IndexValue` (whose
``/`` and ``%`` truncate too: :func:`polyfuse.frontend.c_affine.trunc_div`).

Math calls: ``sqrt exp log tanh fabs pow fmax fmin`` (``double``) and their ``f`` forms (``float``); the
argument is converted to the function's type as C does. ``c ? a : b`` is a :class:`Where` (PolyBench's
``MIN``/``MAX`` macros expand to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from pycparser import c_ast

from polyfuse.errors import SourceError
from polyfuse.frontend.affine import NameKind
from polyfuse.frontend.c_affine import _COMPARE, is_int_type, promoted, wrap
from polyfuse.frontend.c_source import node_text
from polyfuse.ir.builder import Scope
from polyfuse.ir.expr import Binary, Cast, Compare, Const, Expr, IndexValue, Logical, Read, ScalarArg, Unary, Where
from polyfuse.types import DType, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64

if TYPE_CHECKING:
    from polyfuse.frontend.scop_c import CReader

VALUE_HINT = (
    "a value combines array elements, scalar parameters, local scalars, loop variables, sizes and literals with "
    "+ - * / %, comparisons, && || !, ?:, casts and the math functions sqrt exp log tanh fabs pow fmax fmin (and their f forms)"
)
CALL_HINT = "the only calls allowed are the math functions sqrt exp log tanh fabs pow fmax fmin and their f forms (sqrtf, ...)"
_UNARY_CALLS = {"sqrt": "sqrt", "exp": "exp", "log": "log", "tanh": "tanh", "fabs": "abs"}
_BINARY_CALLS = {"pow": "pow", "fmax": "max", "fmin": "min"}

ReadFn = Callable[[str, list, str], int]


_BASE_TYPES = {
    frozenset({"double"}): f64, frozenset({"float"}): f32,
    frozenset({"char"}): i8, frozenset({"signed", "char"}): i8, frozenset({"unsigned", "char"}): u8,
    frozenset({"short"}): i16, frozenset({"short", "int"}): i16, frozenset({"signed", "short"}): i16,
    frozenset({"signed", "short", "int"}): i16, frozenset({"unsigned", "short"}): u16, frozenset({"unsigned", "short", "int"}): u16,
    frozenset({"int"}): i32, frozenset({"signed"}): i32, frozenset({"signed", "int"}): i32,
    frozenset({"unsigned"}): u32, frozenset({"unsigned", "int"}): u32,
    frozenset({"long"}): i64, frozenset({"long", "int"}): i64, frozenset({"signed", "long"}): i64,
    frozenset({"signed", "long", "int"}): i64, frozenset({"unsigned", "long"}): u64, frozenset({"unsigned", "long", "int"}): u64,
}
"""C's arithmetic type specifiers (gcc on x86-64: char is signed, long is 64 bits; ``long long`` is ``long``).
``unsigned short``/``unsigned``/``unsigned long`` (and ``<stdint.h>``'s ``uint32_t``/``uint64_t``, ``size_t``)
are u16/u32/u64, with C's unsigned arithmetic: the usual arithmetic conversions (int < unsigned < long <
unsigned long), division and ``%`` of unsigned values, logical ``>>``, unsigned comparisons, wrap-around modulo
2**32 or 2**64 and conversions to and from float; the reference interpreter computes in numpy's unsigned types,
which agree. Unsigned sizes and loop variables are affine as signed ones are, where no value wraps around
(:mod:`polyfuse.frontend.c_affine`)."""


def dtype_of_names(names: list[str], typedefs: Mapping[str, list[str]] | None = None) -> DType | None:
    """The dtype of a C type specifier list (``['double']``, ``['unsigned', 'char']``, or a ``typedef`` name
    found in ``typedefs``, e.g. ``base`` for ``typedef char base;``), None if unsupported."""
    seen: set[str] = set()
    while len(names) == 1 and typedefs is not None and names[0] in typedefs and names[0] not in seen:
        seen.add(names[0])
        names = typedefs[names[0]]
    key = [n for n in names if n != "long"]
    longs = len(names) - len(key)
    return _BASE_TYPES.get(frozenset(key + ["long"] * min(longs, 1)))


def c_common_type(a: DType, b: DType) -> DType:
    """C's usual arithmetic conversions: char and short operands become int (integer promotion), then the
    operation happens in the wider of int < unsigned < long < unsigned long < float < double."""
    a, b = integer_promotion(a), integer_promotion(b)
    return a if _RANK[a.name] >= _RANK[b.name] else b


def integer_promotion(dt: DType) -> DType:
    """``char``, ``unsigned char``, ``short`` and ``unsigned short`` compute as ``int``."""
    return i32 if dt.name in ("i8", "u8", "i16", "u16") else dt


_RANK = {"i32": 0, "u32": 1, "i64": 2, "u64": 3, "f32": 4, "f64": 5}
_BITWISE = ("&", "|", "^", "<<", ">>")


def fold_constant(e: Expr) -> Const | None:
    """``e`` evaluated as C would, when it is built from literals by arithmetic and casts only (the
    initialiser ``1.0 / 3``); None otherwise."""
    if isinstance(e, Const):
        return e
    if isinstance(e, Cast):
        x = fold_constant(e.operand)
        if x is None:
            return None
        return Const(float(e.dtype.numpy(x.value)) if e.dtype.is_float else int(np.array(math.trunc(x.value)).astype(e.dtype.numpy)), e.dtype)
    if isinstance(e, Unary) and e.op == "neg":
        x = fold_constant(e.operand)
        return None if x is None else Const(-x.value if e.dtype.is_float else wrap(-x.value, e.dtype), e.dtype)
    if isinstance(e, Binary) and e.op in ("+", "-", "*", "/", "tdiv", "trem"):
        a, b = fold_constant(e.lhs), fold_constant(e.rhs)
        if a is None or b is None or (e.op in ("/", "tdiv", "trem") and b.value == 0):
            return None
        x, y = e.dtype.numpy(a.value), e.dtype.numpy(b.value)
        if e.op in ("tdiv", "trem"):
            q = abs(int(x)) // abs(int(y)) * (1 if (x >= 0) == (y > 0) else -1)
            v = q if e.op == "tdiv" else int(x) - int(y) * q
        else:
            with np.errstate(all="ignore"):  # unsigned arithmetic wraps around, as in C
                v = {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[e.op]
        return Const(float(v) if e.dtype.is_float else int(v), e.dtype)
    return None


class CValues:
    """Turns the C expression of an assignment's right-hand side into an :class:`Expr`."""

    def __init__(self, reader: CReader) -> None:
        self.reader = reader
        self.scope: Scope | None = None
        self.read: ReadFn = lambda a, s, t: 0

    def translate(self, node: c_ast.Node, scope: Scope, read: ReadFn, target: DType) -> Expr:
        """``node`` as an expression in ``scope``, converted to ``target``; ``read`` registers array reads."""
        self.scope, self.read = scope, read
        return self._cast(self._number(node), target)

    def type_of(self, node: c_ast.Node, scope: Scope) -> DType:
        """The C type of the value ``node`` in ``scope`` (its reads are not registered)."""
        saved = self.scope, self.read
        self.scope, self.read = scope, lambda a, s, t: 0
        try:
            return self._number(node).dtype
        finally:
            self.scope, self.read = saved

    # ----- nodes --------------------------------------------------------------------------------
    def _value(self, node: c_ast.Node) -> Expr:
        r = self.reader
        k = r.affine.constant_int(node, self.scope)
        if k is not None:
            return Const(k, r.affine.int_type(node, self.scope))
        if not isinstance(node, (c_ast.ID, c_ast.Constant)) and self._is_index(node):
            try:  # (one whose unsigned arithmetic may wrap around is built operation by operation below)
                return IndexValue(r.affine.affine(node, self.scope, "value"), r.affine.int_type(node, self.scope))
            except SourceError:
                pass  # not affine after all (i * j): an ordinary integer expression
        if isinstance(node, c_ast.Constant):
            return self._constant(node)
        if isinstance(node, c_ast.ID):
            return self._name(node)
        if isinstance(node, c_ast.ArrayRef):
            array, subs = r.affine.subscript(node, self.scope)
            return Read(self.read(array, subs, node_text(node)), r.builder.arrays[array].dtype)
        if isinstance(node, c_ast.BinaryOp):
            return self._binary_op(node)
        if isinstance(node, c_ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, c_ast.TernaryOp):
            cond = self._boolean(node.cond)
            a, b = self._unify(self._number(node.iftrue), self._number(node.iffalse))
            return Where(cond, a, b, a.dtype)
        if isinstance(node, c_ast.Cast):
            dt = self._cast_type(node)
            return self._cast(self._number(node.expr), dt)
        if isinstance(node, c_ast.FuncCall):
            return self._call(node)
        if isinstance(node, c_ast.StructRef):
            raise r.error(node, f"struct member access `{node_text(node)}` is not supported", hint=VALUE_HINT)
        if isinstance(node, c_ast.Assignment):
            raise r.error(node, f"the assignment `{node_text(node)}` is used inside an expression", hint="assign once per statement")
        raise r.error(node, f"unsupported expression `{node_text(node)}`", hint=VALUE_HINT)

    def _constant(self, node: c_ast.Constant) -> Expr:
        if node.type in ("float", "double", "long double"):
            text = node.value
            dt = f32 if text[-1] in "fF" else f64
            try:
                return Const(float(text.rstrip("fFlL")) if not text.lower().startswith("0x") else float.fromhex(text.rstrip("fFlL")), dt)
            except ValueError:
                pass
        raise self.reader.error(node, f"unsupported constant `{node.value}`", hint=VALUE_HINT)

    def _name(self, node: c_ast.ID) -> Expr:
        r = self.reader
        name = node.name
        b = r.lookup(name, self.scope)
        dt = promoted(r.declared_type(name))  # an unsigned size or loop variable is an unsigned value
        if b.kind is NameKind.ITERATOR:
            return IndexValue(self.scope.var(name), dt)
        if b.kind is NameKind.PARAM:
            return IndexValue(self.scope.var(b.value), dt)
        if b.kind is NameKind.SIZE_EXPR:
            return IndexValue(r.affine.affine(node, self.scope, "value"), dt)
        if b.kind is NameKind.LOCAL:
            dt = r.local_scalar(name, node)
            return Read(self.read(name, [], name), dt)
        if b.kind is NameKind.SCALAR_ARG:
            return ScalarArg(name, r.builder.scalars[name])
        if b.kind is NameKind.FLOAT:  # a local initialised to a constant before the region
            return b.value if isinstance(b.value, Const) else Const(b.value, f64)
        if b.kind is NameKind.ARRAY:
            raise r.error(node, f"array `{name}` is used without subscripts", hint="index single elements: A[i][j]")
        if b.kind is NameKind.UNKNOWN:
            raise r.error(node, f"unknown name `{name}`", hint=VALUE_HINT)
        raise r.error(node, f"`{name}` is {b.value} and cannot be used as a value", hint=VALUE_HINT)

    def _binary_op(self, node: c_ast.BinaryOp) -> Expr:
        op = node.op
        if op in ("&&", "||"):
            return Logical("and" if op == "&&" else "or", self._boolean(node.left), self._boolean(node.right))
        if op in _COMPARE:
            a, b = self._unify(self._number(node.left), self._number(node.right))
            return Compare(op, a, b)
        if op not in ("+", "-", "*", "/", "%") + _BITWISE:
            raise self.reader.error(node, f"operator `{op}` in `{node_text(node)}` is not supported", hint=VALUE_HINT)
        left, right = self._number(node.left), self._number(node.right)
        if op in ("%",) + _BITWISE and (left.dtype.is_float or right.dtype.is_float):
            raise self.reader.error(node, f"`{op}` of floating-point values in `{node_text(node)}` is not C", hint=f"use integers with {op}")
        if op in ("<<", ">>"):  # the type is the promoted left operand's
            dt = integer_promotion(left.dtype)
            return Binary(op, self._cast(left, dt), self._cast(right, dt), dt)
        a, b = self._unify(left, right)
        if not a.dtype.is_float and op in ("/", "%"):
            op = "tdiv" if op == "/" else "trem"  # C truncates toward zero
        return Binary(op, a, b, a.dtype)

    def _unary(self, node: c_ast.UnaryOp) -> Expr:
        r = self.reader
        if node.op == "+":
            x = self._number(node.expr)
            return self._cast(x, integer_promotion(x.dtype))
        if node.op == "-":
            x = self._number(node.expr)
            x = self._cast(x, integer_promotion(x.dtype))
            if isinstance(x, Const):
                return Const(-x.value if x.dtype.is_float else wrap(-x.value, x.dtype), x.dtype)
            return Unary("neg", x, x.dtype)
        if node.op == "!":
            return Unary("not", self._boolean(node.expr), None)
        if node.op in ("++", "--", "p++", "p--"):
            raise r.error(node, f"`{node_text(node)}` increments inside an expression", hint="write `x += 1;` as its own statement")
        if node.op in ("*", "&"):
            raise r.error(node, f"pointer operation `{node_text(node)}` is not supported", hint="index arrays: A[i][j]")
        raise r.error(node, f"operator `{node.op}` in `{node_text(node)}` is not supported", hint=VALUE_HINT)

    def _call(self, node: c_ast.FuncCall) -> Expr:
        r = self.reader
        if not isinstance(node.name, c_ast.ID):
            raise r.error(node, f"unsupported call `{node_text(node)}`", hint=CALL_HINT)
        name = node.name.name
        args = list(node.args.exprs) if node.args is not None else []
        base, dt = (name[:-1], f32) if name.endswith("f") and (name[:-1] in _UNARY_CALLS or name[:-1] in _BINARY_CALLS) else (name, f64)
        if base in _UNARY_CALLS:
            if len(args) != 1:
                raise r.error(node, f"`{node_text(node)}`: {name} takes one argument")
            return Unary(_UNARY_CALLS[base], self._cast(self._number(args[0]), dt), dt)
        if base in _BINARY_CALLS:
            if len(args) != 2:
                raise r.error(node, f"`{node_text(node)}`: {name} takes two arguments")
            return Binary(_BINARY_CALLS[base], self._cast(self._number(args[0]), dt), self._cast(self._number(args[1]), dt), dt)
        raise r.error(node, f"call to `{name}` is not supported in a SCoP", hint=CALL_HINT)

    def _cast_type(self, node: c_ast.Cast) -> DType:
        t = node.to_type.type
        if isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.IdentifierType):
            dt = dtype_of_names(t.type.names, self.reader.typedefs)
            if dt is not None:
                return dt
        raise self.reader.error(node, f"cast `{node_text(node)}` is to an unsupported type", hint="cast to int, float or double")

    def _is_index(self, node: c_ast.Node) -> bool:
        """Whether ``node`` is built only from integers, iterators, sizes, + - * / % and int casts."""
        if isinstance(node, c_ast.Constant):
            return self.reader.affine.constant_int(node, self.scope) is not None
        if isinstance(node, c_ast.ID):
            kind = self.reader.lookup(node.name, self.scope).kind
            return kind in (NameKind.ITERATOR, NameKind.PARAM, NameKind.INT, NameKind.SIZE_EXPR)
        if isinstance(node, c_ast.BinaryOp):
            return node.op in ("+", "-", "*", "/", "%") and self._is_index(node.left) and self._is_index(node.right)
        if isinstance(node, c_ast.UnaryOp):
            return node.op in ("-", "+") and self._is_index(node.expr)
        if isinstance(node, c_ast.Cast):
            return is_int_type(node.to_type) and self._is_index(node.expr)
        return False

    # ----- typing -------------------------------------------------------------------------------
    def _number(self, node: c_ast.Node) -> Expr:
        """``node`` as a number; a condition used as a number is 1 or 0, as in C."""
        e = self._value(node)
        if e.dtype is None:
            return Where(e, Const(1, i32), Const(0, i32), i32)
        return e

    def _boolean(self, node: c_ast.Node) -> Expr:
        """``node`` as a condition; a number is true when non-zero, as in C."""
        e = self._value(node)
        if e.dtype is not None:
            return Compare("!=", e, Const(0.0 if e.dtype.is_float else 0, e.dtype))
        return e

    def _unify(self, a: Expr, b: Expr) -> tuple[Expr, Expr]:
        """C's usual arithmetic conversions: both operands to their common type (:func:`c_common_type`)."""
        dt = c_common_type(a.dtype, b.dtype)
        return self._cast(a, dt), self._cast(b, dt)

    def _cast(self, e: Expr, dt: DType) -> Expr:
        if e.dtype == dt:
            return e
        if isinstance(e, Const):  # as C converts: floats truncate toward zero, integers wrap to the width
            return Const(float(e.value) if dt.is_float else int(np.array(math.trunc(e.value)).astype(dt.numpy)), dt)
        return Cast(e, dt)
