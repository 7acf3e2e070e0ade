"""Translation of DSL right-hand sides (Python expressions) into expression nodes.

Values, unlike subscripts, need not be affine: ``A[i] * B[j]`` or ``i * j`` are fine. Types follow the
arrays: a Python literal takes the type of what it meets (``A[i] + 1.0`` stays f32 for an f32 array), and
mixed array types promote (i32 < f32 < f64).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from polyfuse.frontend import intrinsics
from polyfuse.ir.builder import Scope
from polyfuse.ir.expr import Binary, Cast, Compare, Const, Expr, IndexValue, Logical, Read, ScalarArg, Unary, Where
from polyfuse.types import DType, Param, f64, i32, promote

if TYPE_CHECKING:
    from polyfuse.frontend.dsl import DslReader

VALUE_HINT = "values may use array elements, scalars, iterators, sizes, + - * / // % **, comparisons inside pf.where, and pf.exp/log/sqrt/tanh/abs/max/min/pow"

ReadFn = Callable[[str, list, str], int]


class ValueTranslator:
    """Turns the Python expression of an assignment's right-hand side into an :class:`Expr`."""

    def __init__(self, reader: DslReader) -> None:
        self.reader = reader

    def infer_dtype(self, node: ast.expr, scope: Scope) -> DType:
        """The type a local scalar gets from its first assignment."""
        expr = self.translate(node, scope, lambda a, s, t: 0, None, probe=True)
        if expr.dtype is None:
            raise self.reader.error(node, "a local scalar cannot hold a condition", hint="use pf.where(cond, a, b)")
        if isinstance(expr, Const) and isinstance(expr.value, float):
            return self.reader.default_float
        return expr.dtype

    def translate(self, node: ast.expr, scope: Scope, read: ReadFn, target: DType | None, probe: bool = False) -> Expr:
        self.scope, self.read, self.probe = scope, read, probe
        expr = self._value(node)
        if target is not None and expr.dtype is None:
            raise self.reader.error(node, f"cannot assign the condition `{ast.unparse(node)}` to an array element", hint="use pf.where(cond, 1.0, 0.0)")
        if target is not None and expr.dtype != target:
            expr = Const(_cast_literal(expr.value, target), target) if isinstance(expr, Const) else Cast(expr, target)
        return expr

    # ----- nodes --------------------------------------------------------------------------------
    def _value(self, node: ast.expr) -> Expr:
        r = self.reader
        b = r.builder
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise r.error(node, f"unsupported constant {node.value!r}", hint=VALUE_HINT)
            return Const(node.value, i32 if isinstance(node.value, int) else f64)
        if isinstance(node, ast.Name):
            name = node.id
            if name in self.scope.iterators:
                return IndexValue(self.scope.var(name))
            if name in r.local_scalars:
                return self._read(name, [], name, node)
            if name in b.scalars:
                return ScalarArg(name, b.scalars[name])
            if name in b.arrays:
                raise r.error(node, f"array {name!r} is used without subscripts", hint="index single elements: A[i, j]")
            v = r.env.get(name)
            if isinstance(v, Param) and v.name in self.scope.params:
                return IndexValue(self.scope.var(v.name))
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return Const(v, i32 if isinstance(v, int) else f64)
            raise r.error(node, f"unknown name {name!r}", hint=VALUE_HINT)
        if isinstance(node, ast.Subscript):
            array, subs = r.subscript(node, self.scope)
            return self._read(array, subs, ast.unparse(node), node)
        if isinstance(node, ast.BinOp):
            ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "pow"}
            op = ops.get(type(node.op))
            if op is None:
                raise r.error(node, f"unsupported operator in `{ast.unparse(node)}`", hint=VALUE_HINT)
            return self._binary(op, self._value(node.left), self._value(node.right), node)
        if isinstance(node, ast.UnaryOp):
            operand = self._value(node.operand)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.USub):
                if isinstance(operand, Const):
                    return Const(-operand.value, operand.dtype)
                return Unary("neg", self._numeric(operand, node), operand.dtype)
            if isinstance(node.op, ast.Not):
                return Unary("not", self._boolean(operand, node), None)
            raise r.error(node, f"unsupported operator in `{ast.unparse(node)}`", hint=VALUE_HINT)
        if isinstance(node, ast.Compare):
            out: Expr | None = None
            left = self._value(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._value(right_node)
                sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}.get(type(op))
                if sym is None:
                    raise r.error(node, f"unsupported comparison in `{ast.unparse(node)}`", hint=VALUE_HINT)
                lhs, rhs = self._unify(self._numeric(left, node), self._numeric(right, node))
                cmp = Compare(sym, lhs, rhs)
                out = cmp if out is None else Logical("and", out, cmp)
                left = right
            return out
        if isinstance(node, ast.BoolOp):
            parts = [self._boolean(self._value(v), node) for v in node.values]
            out = parts[0]
            for p in parts[1:]:
                out = Logical("and" if isinstance(node.op, ast.And) else "or", out, p)
            return out
        if isinstance(node, ast.IfExp):
            return self._where(node.test, node.body, node.orelse, node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise r.error(node, f"unsupported expression `{ast.unparse(node)}`", hint=VALUE_HINT)

    def _call(self, node: ast.Call) -> Expr:
        r = self.reader
        f = r._resolve(node.func)
        if node.keywords:
            raise r.error(node, f"keyword arguments are not supported in `{ast.unparse(node)}`")
        name = ast.unparse(node.func)
        if f is intrinsics.where:
            if len(node.args) != 3:
                raise r.error(node, "pf.where takes three arguments: pf.where(cond, a, b)")
            return self._where(*node.args, node)
        unary = intrinsics.UNARY.get(f) or intrinsics.PY_UNARY.get(f) if f is not None else None
        if unary:
            if len(node.args) != 1:
                raise r.error(node, f"{name} takes one argument")
            x = self._numeric(self._value(node.args[0]), node)
            if unary != "abs" and not (x.dtype and x.dtype.is_float):
                x = self._to_float(x)
            return Unary(unary, x, x.dtype)
        binary = intrinsics.BINARY.get(f) or intrinsics.PY_BINARY.get(f) if f is not None else None
        if binary:
            if len(node.args) < 2 or (binary == "pow" and len(node.args) != 2):
                raise r.error(node, f"{name} takes {'two' if binary == 'pow' else 'two or more'} arguments")
            out = self._value(node.args[0])
            for a in node.args[1:]:
                out = self._binary(binary, out, self._value(a), node)
            return out
        if isinstance(f, DType):
            if len(node.args) != 1:
                raise r.error(node, f"{name}(x) takes one argument")
            x = self._numeric(self._value(node.args[0]), node)
            return Const(_cast_literal(x.value, f), f) if isinstance(x, Const) else Cast(x, f)
        if f is float or f is int:
            x = self._numeric(self._value(node.args[0]), node)
            dt = f64 if f is float else i32
            return Const(_cast_literal(x.value, dt), dt) if isinstance(x, Const) else Cast(x, dt)
        raise r.error(node, f"unsupported call `{ast.unparse(node)}`", hint=VALUE_HINT)

    def _where(self, cond_node: ast.expr, a_node: ast.expr, b_node: ast.expr, node: ast.expr) -> Expr:
        cond = self._boolean(self._value(cond_node), node)
        a, b = self._unify(self._numeric(self._value(a_node), node), self._numeric(self._value(b_node), node))
        return Where(cond, a, b, a.dtype)

    def _read(self, array: str, subs: list, text: str, node: ast.AST) -> Read:
        dtype = self.reader.builder.arrays[array].dtype
        return Read(self.read(array, subs, text), dtype)

    # ----- typing -------------------------------------------------------------------------------
    def _numeric(self, e: Expr, node: ast.AST) -> Expr:
        if e.dtype is None:
            raise self.reader.error(node, f"a condition is used as a number in `{ast.unparse(node)}`", hint="use pf.where(cond, a, b)")
        return e

    def _boolean(self, e: Expr, node: ast.AST) -> Expr:
        if e.dtype is not None:
            raise self.reader.error(node, f"a number is used as a condition in `{ast.unparse(node)}`", hint="compare it: x > 0")
        return e

    def _to_float(self, e: Expr) -> Expr:
        dt = self.reader.default_float
        return Const(float(e.value), dt) if isinstance(e, Const) else Cast(e, dt)

    def _unify(self, a: Expr, b: Expr) -> tuple[Expr, Expr]:
        """Give both operands one type; a literal adopts the other side's type."""
        if a.dtype == b.dtype:
            return a, b
        a_lit, b_lit = isinstance(a, Const), isinstance(b, Const)
        if a_lit and not b_lit and (b.dtype.is_float or isinstance(a.value, int)):
            return Const(_cast_literal(a.value, b.dtype), b.dtype), b
        if b_lit and not a_lit and (a.dtype.is_float or isinstance(b.value, int)):
            return a, Const(_cast_literal(b.value, a.dtype), a.dtype)
        dt = promote(a.dtype, b.dtype)
        if dt.is_float and not (a_lit and b_lit):
            dt = dt if not (a_lit or b_lit) else dt
        return self._cast(a, dt), self._cast(b, dt)

    def _cast(self, e: Expr, dt: DType) -> Expr:
        if e.dtype == dt:
            return e
        return Const(_cast_literal(e.value, dt), dt) if isinstance(e, Const) else Cast(e, dt)

    def _binary(self, op: str, a: Expr, b: Expr, node: ast.AST) -> Expr:
        a, b = self._numeric(a, node), self._numeric(b, node)
        if op == "/" and not (a.dtype.is_float or b.dtype.is_float):
            a, b = self._to_float(a), self._to_float(b)
        a, b = self._unify(a, b)
        if op == "pow" and not a.dtype.is_float:
            a, b = self._to_float(a), self._to_float(b)
            a, b = self._unify(a, b)
        if isinstance(a, Const) and isinstance(b, Const):
            folded = _fold(op, a.value, b.value)
            if folded is not None:
                return Const(_cast_literal(folded, a.dtype), a.dtype)
        return Binary(op, a, b, a.dtype)


def _cast_literal(value: Any, dt: DType) -> Any:
    return float(value) if dt.is_float else int(value)


def _fold(op: str, a: Any, b: Any) -> Any:
    try:
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
                "max": lambda: max(a, b), "min": lambda: min(a, b)}.get(op, lambda: None)()
    except ZeroDivisionError:
        return None
