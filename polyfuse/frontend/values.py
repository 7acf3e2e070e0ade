"""Translation of DSL right-hand sides (Python expressions) into expression nodes.

Values, unlike subscripts, need not be affine: ``A[i] * B[j]`` or ``i * j`` are fine. Integer expressions
of iterators and sizes that are affine (``i + 1``, ``i // 2``, ``max(i, N - 1)``) become a single
:class:`IndexValue`, so they keep Python's floor semantics exactly. Types follow the arrays:

* a Python literal takes the type of what it meets (``A[i] + 1.0`` stays f32 for an f32 array); float
  literals on their own, and ``float(x)``, have the program's float type (the widest float among its
  arrays and scalars, f64 when it has none);
* mixed array types promote (i32 < f32 < f64); ``/`` of integers is a float division;
* the result is cast to the type of the assigned element.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from polyfuse.errors import SourceError
from polyfuse.frontend import intrinsics
from polyfuse.frontend.affine import MIN_MAX, NameKind, lookup_table
from polyfuse.ir.builder import Scope
from polyfuse.ir.expr import Binary, Cast, Compare, Const, Expr, IndexValue, Logical, Read, ScalarArg, Unary, Where
from polyfuse.types import DType, i32, promote

if TYPE_CHECKING:
    from polyfuse.frontend.dsl import DslReader

VALUE_HINT = (
    "values may use array elements, scalars, iterators, sizes, numbers, + - * / // % **, pf.where(cond, a, b), "
    "x if cond else y, casts pf.f32(x) / float(x) / int(x), and pf.exp, log, sqrt, tanh, abs, max, min, pow"
)
CALL_HINT = (
    "allowed calls: pf.exp, pf.log, pf.sqrt, pf.tanh, pf.abs, pf.max, pf.min, pf.pow, pf.where, pf.f32/f64/i32(x), "
    "float(x), int(x), abs, min, max, pow, math.exp/log/sqrt/tanh/pow, np.exp/log/sqrt/tanh/abs"
)
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "pow"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}

ReadFn = Callable[[str, list, str], int]


class ValueTranslator:
    """Turns the Python expression of an assignment's right-hand side into an :class:`Expr`."""

    def __init__(self, reader: DslReader) -> None:
        self.reader = reader
        self.scope: Scope | None = None
        self.read: ReadFn = lambda a, s, t: 0

    def infer_dtype(self, node: ast.expr, scope: Scope) -> DType:
        """The type of ``node``'s value: what a local scalar gets from its first assignment."""
        expr = self.translate(node, scope, lambda a, s, t: 0, None)
        if expr.dtype is None:
            raise self.reader.error(node, f"a local scalar cannot hold the condition `{ast.unparse(node)}`", hint="use pf.where(cond, 1.0, 0.0)")
        if isinstance(expr, Const) and isinstance(expr.value, float):
            return self.reader.default_float
        return expr.dtype

    def translate(self, node: ast.expr, scope: Scope, read: ReadFn, target: DType | None) -> Expr:
        """``node`` as an expression in ``scope``; ``read`` registers each array read and returns its index.

        With a ``target`` type the result is cast to it.
        """
        self.scope, self.read = scope, read
        expr = self._value(node)
        if target is not None and expr.dtype is None:
            raise self.reader.error(node, f"the condition `{ast.unparse(node)}` is assigned as a value", hint="use pf.where(cond, 1.0, 0.0)")
        return self._cast(expr, target) if target is not None else expr

    # ----- nodes --------------------------------------------------------------------------------
    def _value(self, node: ast.expr) -> Expr:
        r = self.reader
        k = r.affine.constant_int(node, self.scope)
        if k is not None:
            return Const(k, i32)
        if not isinstance(node, ast.Name) and self._is_index(node):
            try:
                return IndexValue(r.affine.affine(node, self.scope, "value"))
            except SourceError:
                pass  # not affine after all (i * j): an ordinary integer expression
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise r.error(node, f"unsupported constant `{ast.unparse(node)}`", hint=VALUE_HINT)
            return Const(node.value, i32) if isinstance(node.value, int) else Const(node.value, r.default_float)
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Attribute):
            v = r.resolve(node, self.scope)
            if isinstance(v, float):
                return Const(v, r.default_float)
            raise r.error(node, f"`{ast.unparse(node)}` cannot be used as a value", hint=VALUE_HINT)
        if isinstance(node, ast.Subscript):
            array, subs = r.affine.subscript(node, self.scope)
            return Read(self.read(array, subs, ast.unparse(node)), r.builder.arrays[array].dtype)
        if isinstance(node, ast.BinOp):
            op = _BINARY.get(type(node.op))
            if op is None:
                raise r.error(node, f"unsupported operator in `{ast.unparse(node)}`", hint=VALUE_HINT)
            return self._binary(op, self._value(node.left), self._value(node.right), node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.BoolOp):
            parts = [self._boolean(self._value(v), v) for v in node.values]
            out = parts[0]
            for p in parts[1:]:
                out = Logical("and" if isinstance(node.op, ast.And) else "or", out, p)
            return out
        if isinstance(node, ast.IfExp):
            return self._where(node.test, node.body, node.orelse, node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise r.error(node, f"unsupported expression `{ast.unparse(node)}`", hint=VALUE_HINT)

    def _name(self, node: ast.Name) -> Expr:
        r = self.reader
        name = node.id
        b = r.lookup(name, self.scope)
        if b.kind is NameKind.ITERATOR:
            return IndexValue(self.scope.var(name))
        if b.kind is NameKind.PARAM:
            return IndexValue(self.scope.var(b.value))
        if b.kind is NameKind.SIZE_EXPR:
            return IndexValue(r.affine.affine(node, self.scope, "value"))
        if b.kind is NameKind.LOCAL:
            return Read(self.read(name, [], name), r.local_scalars[name])
        if b.kind is NameKind.SCALAR_ARG:
            return ScalarArg(name, r.builder.scalars[name])
        if b.kind is NameKind.ARRAY:
            raise r.error(node, f"array `{name}` is used without subscripts", hint="index single elements: A[i, j]")
        if b.kind is NameKind.INT:
            return Const(b.value, i32)
        if b.kind is NameKind.FLOAT:
            return Const(b.value, r.default_float)
        if b.kind is NameKind.UNKNOWN and name in r.assigned_names:
            raise r.error(node, f"local scalar `{name}` is read before it is assigned", hint=f"assign it first, e.g. `{name} = 0.0`")
        if b.kind is NameKind.UNKNOWN:
            raise r.error(node, f"unknown name `{name}`", hint=VALUE_HINT)
        raise r.error(node, f"`{name}` ({type(b.value).__name__}) cannot be used as a value", hint=VALUE_HINT)

    def _unary(self, node: ast.UnaryOp) -> Expr:
        r = self.reader
        operand = self._value(node.operand)
        if isinstance(node.op, ast.UAdd):
            return self._numeric(operand, node)
        if isinstance(node.op, ast.USub):
            operand = self._numeric(operand, node)
            if isinstance(operand, Const):
                return Const(-operand.value, operand.dtype)
            return Unary("neg", operand, operand.dtype)
        if isinstance(node.op, ast.Not):
            return Unary("not", self._boolean(operand, node.operand), None)
        raise r.error(node, f"unsupported operator in `{ast.unparse(node)}`", hint=VALUE_HINT)

    def _compare(self, node: ast.Compare) -> Expr:
        out: Expr | None = None
        left = self._numeric(self._value(node.left), node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = self._numeric(self._value(right_node), right_node)
            sym = _COMPARE.get(type(op))
            if sym is None:
                raise self.reader.error(node, f"unsupported comparison in `{ast.unparse(node)}`", hint="compare numbers with < <= > >= == !=")
            lhs, rhs = self._unify(left, right)
            cmp = Compare(sym, lhs, rhs)
            out = cmp if out is None else Logical("and", out, cmp)
            left = right
        return out

    def _call(self, node: ast.Call) -> Expr:
        r = self.reader
        f = r.resolve(node.func, self.scope)
        name = ast.unparse(node.func)
        if f is intrinsics.empty:
            raise r.error(node, "pf.empty declares a temporary and is not a value",
                          hint="write `B = pf.empty((N, M), pf.f32)` as its own statement at the top of the program")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise r.error(node, f"`{ast.unparse(node)}`: calls take plain positional arguments", hint=CALL_HINT)
        if f is intrinsics.where:
            if len(node.args) != 3:
                raise r.error(node, f"`{ast.unparse(node)}`: pf.where takes three arguments, pf.where(cond, a, b)")
            return self._where(*node.args, node)
        unary = lookup_table(intrinsics.UNARY, f) or lookup_table(intrinsics.PY_UNARY, f)
        if unary:
            x = self._numeric(self._value(self._one_arg(node, name)), node)
            if unary != "abs" and not x.dtype.is_float:
                x = self._cast(x, r.default_float)
            return Unary(unary, x, x.dtype)
        binary = lookup_table(intrinsics.BINARY, f) or lookup_table(intrinsics.PY_BINARY, f) or lookup_table(MIN_MAX, f)
        if binary:
            if len(node.args) < 2 or (binary == "pow" and len(node.args) != 2):
                raise r.error(node, f"`{ast.unparse(node)}`: {name} takes {'two' if binary == 'pow' else 'two or more'} arguments")
            out = self._value(node.args[0])
            for a in node.args[1:]:
                out = self._binary(binary, out, self._value(a), node)
            return out
        if isinstance(f, DType) or f is float or f is int:
            dt = f if isinstance(f, DType) else (r.default_float if f is float else i32)
            return self._cast(self._numeric(self._value(self._one_arg(node, name)), node), dt)
        raise r.error(node, f"unsupported call `{ast.unparse(node)}`", hint=CALL_HINT)

    def _one_arg(self, node: ast.Call, name: str) -> ast.expr:
        if len(node.args) != 1:
            raise self.reader.error(node, f"`{ast.unparse(node)}`: {name} takes one argument")
        return node.args[0]

    def _where(self, cond_node: ast.expr, a_node: ast.expr, b_node: ast.expr, node: ast.expr) -> Expr:
        cond = self._boolean(self._value(cond_node), cond_node)
        a, b = self._unify(self._numeric(self._value(a_node), a_node), self._numeric(self._value(b_node), b_node))
        return Where(cond, a, b, a.dtype)

    def _is_index(self, node: ast.expr) -> bool:
        """Whether ``node`` is built only from integers, iterators, sizes, + - * // % and min/max."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and not isinstance(node.value, bool)
        if isinstance(node, ast.Name):
            kind = self.reader.lookup(node.id, self.scope).kind
            return kind in (NameKind.ITERATOR, NameKind.PARAM, NameKind.SIZE_EXPR, NameKind.INT)
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)) and self._is_index(node.left) and self._is_index(node.right)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd)) and self._is_index(node.operand)
        if isinstance(node, ast.Call):
            return (lookup_table(MIN_MAX, self.reader.resolve(node.func, self.scope)) is not None and not node.keywords
                    and len(node.args) >= 2 and all(self._is_index(a) for a in node.args))
        return False

    # ----- typing -------------------------------------------------------------------------------
    def _numeric(self, e: Expr, node: ast.AST) -> Expr:
        if e.dtype is None:
            raise self.reader.error(node, f"the condition `{ast.unparse(node)}` is used as a number", hint="use pf.where(cond, a, b)")
        return e

    def _boolean(self, e: Expr, node: ast.AST) -> Expr:
        if e.dtype is not None:
            raise self.reader.error(node, f"the number `{ast.unparse(node)}` is used as a condition", hint="compare it: x > 0")
        return e

    def _unify(self, a: Expr, b: Expr) -> tuple[Expr, Expr]:
        """Give both operands one type; a literal adopts the other side's type."""
        if a.dtype == b.dtype:
            return a, b
        a_lit, b_lit = isinstance(a, Const), isinstance(b, Const)
        if a_lit != b_lit:
            lit, other = (a, b) if a_lit else (b, a)
            dt = other.dtype if other.dtype.is_float or isinstance(lit.value, int) else self.reader.default_float
        else:
            dt = promote(a.dtype, b.dtype)
        return self._cast(a, dt), self._cast(b, dt)

    def _cast(self, e: Expr, dt: DType) -> Expr:
        if e.dtype == dt:
            return e
        return Const(_cast_literal(e.value, dt), dt) if isinstance(e, Const) else Cast(e, dt)

    def _binary(self, op: str, a: Expr, b: Expr, node: ast.AST) -> Expr:
        a, b = self._numeric(a, node), self._numeric(b, node)
        if op in ("/", "pow") and not (a.dtype.is_float or b.dtype.is_float):
            a, b = self._cast(a, self.reader.default_float), self._cast(b, self.reader.default_float)
        a, b = self._unify(a, b)
        if isinstance(a, Const) and isinstance(b, Const):
            folded = _fold(op, a.value, b.value)
            if folded is not None:
                return Const(_cast_literal(folded, a.dtype), a.dtype)
        return Binary(op, a, b, a.dtype)


def _cast_literal(value: Any, dt: DType) -> Any:
    return float(value) if dt.is_float else int(value)


def _fold(op: str, a: Any, b: Any) -> Any:
    """``a op b`` for two literals, or None where folding could change the meaning (division by zero)."""
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "max":
            return max(a, b)
        if op == "min":
            return min(a, b)
    except ZeroDivisionError:
        return None
    return None
