"""CUDA spelling of statement values (the right-hand sides): operators, intrinsics in the precision of
their type, literals, C's truncating integer division where the program asks for it."""

from __future__ import annotations

import math
from collections.abc import Mapping

from polyfuse.codegen.ast import CDialect, StatementCall, expr_to_text
from polyfuse.errors import CodegenError
from polyfuse.ir.expr import Binary, Cast, Compare, Const, Expr, IndexValue, Logical, Read, ScalarArg, Unary, Where

_FLOAT_FUNCS = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "abs": "fabs", "max": "fmax", "min": "fmin", "pow": "pow"}


def value_text(e: Expr, call: StatementCall | None, dialect: CDialect, reads: Mapping[int, str] | None = None) -> str:
    """The CUDA expression of a statement's right-hand side (or a part of it). ``reads``: the text of
    each read by access number, where the caller has it in hand (a register micro-tile's fragments)
    instead of the AST's accesses in ``call``."""
    v = lambda x: value_text(x, call, dialect, reads)  # noqa: E731
    if isinstance(e, Const):
        return _literal(e)
    if isinstance(e, Read):
        if reads is not None and e.access in reads:
            return reads[e.access]
        if call is None:
            raise CodegenError(f"no text for read {e.access} of a statement printed without its AST")
        return expr_to_text(call.accesses[e.access], dialect)
    if isinstance(e, ScalarArg):
        return e.name
    if isinstance(e, IndexValue):
        return f"(({e.dtype.c_name}) {expr_to_text(call.index_expr(e), dialect)})"
    if isinstance(e, Cast):
        return f"(({e.dtype.c_name}) {v(e.operand)})"
    if isinstance(e, Where):
        return f"({v(e.cond)} ? {v(e.if_true)} : {v(e.if_false)})"
    if isinstance(e, (Compare, Logical)):
        op = {"and": "&&", "or": "||"}.get(e.op, e.op)
        return f"({v(e.lhs)} {op} {v(e.rhs)})"
    if isinstance(e, Unary):
        if e.op == "neg":
            return f"(-{v(e.operand)})"
        if e.op == "not":
            return f"(!{v(e.operand)})"
        if e.dtype is not None and e.dtype.is_float:
            return f"{float_function(e.op, e.dtype.name)}({v(e.operand)})"
        return f"{'llabs' if e.op == 'abs' else e.op}({v(e.operand)})"
    if isinstance(e, Binary):
        return _binary(e, v(e.lhs), v(e.rhs))
    raise CodegenError(f"cannot print expression node {e!r} in CUDA")


def float_function(op: str, dtype: str) -> str:
    """The CUDA math function of ``op`` in the precision of ``dtype`` (``expf`` for f32, ``exp`` for f64)."""
    base = _FLOAT_FUNCS[op]
    return base + "f" if dtype == "f32" else base


def _binary(e: Binary, a: str, b: str) -> str:
    text = _binary_text(e, a, b)
    # an i8/i16/u8 operation (the DSL's; C's own promote first) wraps to its type as numpy's does
    return f"(({e.dtype.c_name}) {text})" if e.dtype.name in ("i8", "i16", "u8", "u16") else text


def _binary_text(e: Binary, a: str, b: str) -> str:
    is_float = e.dtype.is_float
    if e.op in ("max", "min", "pow"):
        if is_float:
            return f"{float_function(e.op, e.dtype.name)}({a}, {b})"
        if e.op == "pow":
            return f"(({e.dtype.c_name}) pow((double) {a}, (double) {b}))"
        return f"(({e.dtype.c_name}) pf_{e.op}({a}, {b}))"
    if e.op in ("tdiv", "trem") or (e.dtype.is_unsigned and e.op in ("//", "%")):  # C's truncating integer / and %
        return f"({a} {'/' if e.op in ('tdiv', '//') else '%'} {b})"
    if e.op == "//":
        return f"{'floorf' if e.dtype.name == 'f32' else 'floor'}({a} / {b})" if is_float else f"(({e.dtype.c_name}) pf_floordiv({a}, {b}))"
    if e.op == "%":
        if is_float:
            fl = "floorf" if e.dtype.name == "f32" else "floor"
            return f"({a} - {b} * {fl}({a} / {b}))"
        return f"(({e.dtype.c_name}) pf_floormod({a}, {b}))"
    return f"({a} {e.op} {b})"


def _literal(c: Const) -> str:
    if not c.dtype.is_float:
        return str(int(c.value)) + {"u32": "u", "u64": "ull"}.get(c.dtype.name, "")
    x = float(c.value)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    text = repr(x)
    return text + "f" if c.dtype.name == "f32" else text
