"""The C printer's statement values: a statement's expression tree as C text (``codegen/c.py`` prints the
loops around it). Python's and numpy's semantics are kept where C spells an operation differently: floor
division and modulo (:data:`VALUE_HELPERS`), integer promotion of 8- and 16-bit types (wrapped back to
their type), unsigned operations; float intrinsics print as the vectorisable functions of
:mod:`polyfuse.codegen.c_math`, of which the printer records the parts used. Array accesses are spelled
by :class:`FlatCDialect` (row-major linearised, local scalars by name, row buffers by their last
subscript)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import islpy as isl

from polyfuse.codegen import c_math
from polyfuse.codegen.ast import CDialect, StatementCall
from polyfuse.errors import CodegenError
from polyfuse.ir.expr import Binary, Cast, Compare, Const, Expr, IndexValue, Logical, Read, ScalarArg, Unary, Where
from polyfuse.ir.program import Array
from polyfuse.types import DType, SizeExpr

VALUE_HELPERS = """\
static inline int32_t pf_floordiv_i32(int32_t a, int32_t b) { int32_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int32_t pf_mod_i32(int32_t a, int32_t b) { int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int32_t pf_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int32_t pf_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t pf_abs_i32(int32_t a) { return a < 0 ? -a : a; }
static inline int32_t pf_pow_i32(int32_t a, int32_t b) { int32_t r = 1; while (b-- > 0) r *= a; return r; }
static inline int64_t pf_floordiv_i64(int64_t a, int64_t b) { int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t pf_mod_i64(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t pf_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t pf_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pf_abs_i64(int64_t a) { return a < 0 ? -a : a; }
static inline int64_t pf_pow_i64(int64_t a, int64_t b) { int64_t r = 1; while (b-- > 0) r *= a; return r; }
static inline float pf_mod_f32(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
static inline double pf_mod_f64(double a, double b) { double r = fmod(a, b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
"""
"""Exact Python/numpy semantics for value operations C spells differently (floor division and modulo)."""

# Per-dtype spelling of the value intrinsics: float ones are the vectorisable functions of c_math.py.
_UNARY_FN = {**c_math.UNARY, "i32": {"abs": "pf_abs_i32"}, "i64": {"abs": "pf_abs_i64"}, "u32": {}, "u64": {}}
_BINARY_FN = {
    "f32": {**c_math.BINARY["f32"], "%": "pf_mod_f32"},
    "f64": {**c_math.BINARY["f64"], "%": "pf_mod_f64"},
    "i32": {"max": "pf_max_i32", "min": "pf_min_i32", "pow": "pf_pow_i32", "//": "pf_floordiv_i32", "%": "pf_mod_i32"},
    "i64": {"max": "pf_max_i64", "min": "pf_min_i64", "pow": "pf_pow_i64", "//": "pf_floordiv_i64", "%": "pf_mod_i64"},
    "u32": {}, "u64": {},  # unsigned: C's own operators (floor and truncation agree), wrapping modulo 2**bits
}
_UNSIGNED_INFIX = {"//": "/", "%": "%"}
_PROMOTED = {"i8": "i32", "i16": "i32", "u8": "i32", "u16": "i32"}
"""C computes on char and short in int (integer promotion), so their intrinsics are the int ones."""
_FLOOR = {"f32": "floorf", "f64": "floor"}
_INFIX = {"+": "+", "-": "-", "*": "*", "/": "/", "tdiv": "/", "trem": "%", "&": "&", "|": "|", "^": "^", "<<": "<<", ">>": ">>", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!=",
          "and": "&&", "or": "||"}



class ValuePrinter:
    """Prints statements and their values; the printer class mixing it in provides ``_index`` (an AST
    index expression as C) and ``math_parts`` (the :mod:`c_math` parts used so far)."""

    math_parts: set[str]

    def _index(self, expr: isl.AstExpr) -> str:
        raise NotImplementedError

    def _statement(self, call: StatementCall) -> str:
        stmt = call.statement
        target = self._index(call.write)
        value = strip_parens(self._value(stmt.value, call))
        return f"{target} {stmt.op} {value};  /* {stmt.name} */"

    def _value(self, e: Expr, call: StatementCall) -> str:
        v = lambda x: self._value(x, call)  # noqa: E731
        if isinstance(e, Const):
            return literal(e.value, e.dtype)
        if isinstance(e, Read):
            return self._index(call.accesses[e.access])
        if isinstance(e, ScalarArg):
            return e.name
        if isinstance(e, IndexValue):
            return f"(({e.dtype.c_name}){paren(self._index(call.index_expr(e)))})"
        if isinstance(e, Cast):
            return f"(({e.dtype.c_name}){paren(v(e.operand))})"
        if isinstance(e, Unary):
            return self._unary(e, v(e.operand))
        if isinstance(e, Binary):
            return self._binary(e, v(e.lhs), v(e.rhs))
        if isinstance(e, (Compare, Logical)):
            return f"({v(e.lhs)} {_INFIX[e.op]} {v(e.rhs)})"
        if isinstance(e, Where):
            return f"({v(e.cond)} ? {v(e.if_true)} : {v(e.if_false)})"
        raise CodegenError(f"the C printer cannot print the expression node {e!r}")

    def _unary(self, e: Unary, operand: str) -> str:
        if e.op == "neg":
            return f"(-{operand})"
        if e.op == "not":
            return f"(!{operand})"
        dtype = e.dtype or e.operand.dtype
        assert dtype is not None
        fn = _UNARY_FN[_PROMOTED.get(dtype.name, dtype.name)].get(e.op)
        if fn is None:  # a float function of an integer: compute in double, as numpy does
            return f"(({dtype.c_name}){self._function(_UNARY_FN['f64'][e.op])}((double){operand}))"
        return f"{self._function(fn)}({strip_parens(operand)})"

    def _function(self, name: str) -> str:
        """``name``, recording the part of :mod:`c_math` that defines it (only used parts are emitted)."""
        part = c_math.part_of(name)
        if part is not None:
            self.math_parts.add(part)
        return name

    def _binary(self, e: Binary, lhs: str, rhs: str) -> str:
        kind = _PROMOTED.get(e.dtype.name, e.dtype.name)
        fn = _BINARY_FN[kind].get(e.op)
        if fn is not None:
            text = f"{self._function(fn)}({strip_parens(lhs)}, {strip_parens(rhs)})"
        elif kind in ("u32", "u64") and e.op in _UNSIGNED_INFIX:
            text = f"({lhs} {_UNSIGNED_INFIX[e.op]} {rhs})"
        elif kind in ("u32", "u64") and e.op in ("max", "min"):
            text = f"({lhs} {'>' if e.op == 'max' else '<'} {rhs} ? {lhs} : {rhs})"
        elif e.op == "//":
            text = f"{_FLOOR[kind]}({lhs} / {rhs})"
        else:
            text = f"({lhs} {_INFIX[e.op]} {rhs})"
        # an i8/i16/u8/u16 operation (the DSL's; C's own promote first) wraps to its type as numpy's does
        return f"(({e.dtype.c_name}){text})" if e.dtype.name in _PROMOTED else text


def literal(value: float | int, dtype: DType) -> str:
    """A C literal of ``dtype``: ``0.5f`` for f32, ``0.5`` for f64, ``3`` for i32."""
    if not dtype.is_float:  # an unsigned literal keeps its unsigned type (4294967295 alone would be a long)
        return str(int(value)) + {"u32": "u", "u64": "ull"}.get(dtype.name, "")
    x = float(value)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    text = repr(x)
    if "." not in text and "e" not in text:
        text += ".0"
    text += "f" if dtype.name == "f32" else ""
    return f"({text})" if x < 0 else text


def paren(text: str) -> str:
    return text if re.fullmatch(r"[\w.\[\]]+", text) or strip_parens(text) != text else f"({text})"


def replace_identifier(text: str, name: str, new: str) -> str:
    """``text`` with every occurrence of the C identifier ``name`` (not part of a longer one) replaced by
    ``new``."""
    return re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", new, text)


def strip_parens(text: str) -> str:
    """``text`` without one pair of outer parentheses, when they enclose the whole of it."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and k < len(text) - 1:
            return text
    return text[1:-1]


def size_to_c(size: SizeExpr) -> str:
    """A shape entry as a C expression over the size params, e.g. ``(2 * N + 1)``."""
    parts = [name if c == 1 else f"{c} * {name}" for name, c in size.terms]
    if size.constant or not parts:
        parts.append(str(size.constant))
    text = " + ".join(parts).replace("+ -", "- ")
    return text if len(parts) == 1 and " " not in text else f"({text})"


class FlatCDialect(CDialect):
    """C spelling with row-major linearised array accesses; local scalars are accessed by name alone, row
    buffers (``schedule/row_buffers.py``: one row of an output per thread) by the last subscript."""

    def __init__(self, arrays: dict[str, Array], local_scalars: frozenset[str], row_buffers: frozenset[str] = frozenset()) -> None:
        self.shapes = {name: tuple(size_to_c(s) for s in a.shape) for name, a in arrays.items()}
        self.local_scalars = local_scalars
        self.row_buffers = row_buffers

    def access(self, array: str, indices: Sequence[str]) -> str:
        if array in self.local_scalars:
            return array
        if array in self.row_buffers:
            return f"{array}[{strip_parens(indices[-1])}]"
        if array not in self.shapes:
            raise CodegenError(f"an access to {array!r}, which is not an array of the program")
        if not indices:
            return f"{array}[0]"
        flat = indices[0] if len(indices) > 1 else strip_parens(indices[0])
        for extent, index in zip(self.shapes[array][1:], indices[1:]):
            flat = f"{paren(flat)} * {extent} + {index}"
        return f"{array}[{flat}]"
