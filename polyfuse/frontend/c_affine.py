"""Affine translation for the C SCoP frontend: subscripts, loop bounds, ``if`` conditions, array extents.

Everything here denotes a (quasi-)affine function of the enclosing loop iterators and the size params,
built as ``isl.PwAff`` / ``isl.Set`` values by operator in the builder's
:class:`~polyfuse.ir.builder.Scope`:

* an affine expression is an integer constant (a literal or a macro that expands to one), an iterator or a
  size (an ``int`` parameter), combined with ``+``, ``-``, ``*`` by a constant, ``/`` and ``%`` by a non-zero
  constant (truncating toward zero, as C does: :func:`trunc_div`), casts to integer types, and ``c ? a : b`` with an affine condition ``c`` (so PolyBench's
  ``MIN``/``MAX`` macros are exact minima and maxima);
* a condition compares affine expressions (``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``) joined by ``&&``,
  ``||`` and ``!``.

C's ``/`` and ``%`` truncate toward zero; isl's integer division floors, so a quotient whose dividend may be
negative is split by the dividend's sign into two quasi-affine pieces (exact, and a single piece wherever the
dividend's sign is known).

Unsigned operands (``unsigned``/``size_t``/``uint32_t`` sizes, loop variables and constants, ``2u``,
``(unsigned)x``) are exact as long as no unsigned value wraps around: C computes them modulo 2**32 (or 2**64),
the model in the integers. So wherever an unsigned operation or a conversion to an unsigned type could see a
negative value somewhere in the enclosing domain (``n - 1`` with ``unsigned n`` at ``n = 0``, ``i < n`` with a
signed ``i`` that may be negative), the construct is refused with the value that wraps and a hint
(``assume=``, a signed type); values far above 2**31 are not modelled (as signed overflow is not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl
from pycparser import c_ast

from polyfuse.frontend.affine import NameKind
from polyfuse.frontend.c_source import node_text
from polyfuse.ir.builder import Scope
from polyfuse.types import DType, SizeExpr, i32, i64, u32, u64

if TYPE_CHECKING:
    from polyfuse.frontend.scop_c import CReader

AFFINE_HINT = (
    "allowed: integer constants, loop variables and int size parameters, combined with + and -, * by a constant, "
    "/ and % by a non-zero constant, and ?: with an affine condition (MIN/MAX macros)"
)
CONDITION_HINT = (
    "an `if` compares affine expressions of loop variables and sizes, joined by && || !; "
    "use `c ? a : b` in the assigned value for a choice that depends on array values"
)
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")
_INT_TYPES = {"int", "long", "short", "unsigned", "signed", "size_t", "ptrdiff_t", "int32_t", "int64_t", "uint32_t", "uint64_t"}


def int_literal(text: str) -> int | None:
    """The value of a C integer literal (``42``, ``0x2A``, ``052``, ``42UL``), else None."""
    t = text.rstrip("uUlL")
    try:
        if t.lower().startswith("0x"):
            return int(t, 16)
        if t.lower().startswith("0b"):
            return int(t, 2)
        if len(t) > 1 and t.startswith("0"):
            return int(t, 8)
        return int(t)
    except ValueError:
        return None


def literal_type(text: str) -> DType:
    """C's type of an integer literal (x86-64): the first of int, unsigned, long, unsigned long that holds
    it, the unsigned ones only for hex/octal literals or a ``u`` suffix, from long on with an ``l``."""
    t = text.lower()
    suffix = t[len(t.rstrip("ul")):]
    value = int_literal(text) or 0
    decimal = not (t.startswith("0") and len(t.rstrip("ul")) > 1)
    if "u" in suffix:
        kinds = [u64] if "l" in suffix else [u32, u64]
    elif "l" in suffix:
        kinds = [i64] if decimal else [i64, u64]
    else:
        kinds = [i32, i64] if decimal else [i32, u32, i64, u64]
    return next((k for k in kinds if value < 2 ** (k.bits - (0 if k.is_unsigned else 1))), kinds[-1])


def wrap(value: int, dtype: DType) -> int:
    """``value`` converted to the integer type ``dtype`` as gcc converts (modulo 2**bits for unsigned)."""
    return value % 2**dtype.bits if dtype.is_unsigned else value


_RANK = {"i32": 0, "u32": 1, "i64": 2, "u64": 3}


def int_common(a: DType, b: DType) -> DType:
    """The usual arithmetic conversions of two (promoted) integer types: int < unsigned < long < unsigned long."""
    return a if _RANK.get(a.name, 0) >= _RANK.get(b.name, 0) else b


def promoted(dt: DType | None) -> DType:
    return dt if dt is not None and dt.name in _RANK else i32


def point_text(points: isl.Set) -> str:
    """One point of a non-empty set, as ``n = 0, i = 3``."""
    p = points.sample_point()
    out = []
    for kind in (isl.dim_type.param, isl.dim_type.set):
        for k in range(points.dim(kind)):
            out.append(f"{points.get_dim_name(kind, k)} = {p.get_coordinate_val(kind, k).to_python()}")
    return ", ".join(out) or "every point"


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def trunc_div(a: isl.PwAff, d: int) -> isl.PwAff:
    """C's ``a / d`` for a positive constant ``d``, exactly, as a quasi-affine piecewise function: isl's
    division floors, so ``a / d == floor(a / d)`` where ``a >= 0`` and ``-floor(-a / d)`` where ``a < 0``.
    Then ``a % d == a - d * (a / d)`` takes the sign of ``a``, and ``a / -d == -(a / d)``."""
    dv = isl.Val.int_from_si(a.get_ctx(), d)
    up = a.scale_down_val(dv).floor().intersect_domain(a.nonneg_set())
    down = (-a).scale_down_val(dv).floor().neg().intersect_domain((-a).pos_set())
    return up.union_add(down).coalesce()


def is_int_type(node: c_ast.Node) -> bool:
    """Whether a cast's type name is a plain integer type (``(int)``, ``(long)``)."""
    t = node.type if isinstance(node, c_ast.Typename) else node
    return (isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.IdentifierType)
            and bool(set(t.type.names) & _INT_TYPES) and not set(t.type.names) & {"float", "double", "char"})


class CAffine:
    """Translates affine C expressions of one function into isl values (see the module docstring)."""

    def __init__(self, reader: CReader) -> None:
        self.reader = reader

    # ----- integer constants --------------------------------------------------------------------
    def constant_int(self, node: c_ast.Node, scope: Scope | None) -> int | None:
        """The value of an integer constant expression (literals, constants, + - * / % << >> of them)."""
        if isinstance(node, c_ast.Constant):
            return int_literal(node.value) if node.type in ("int", "long", "unsigned int", "unsigned long", "long long",
                                                             "unsigned long long", "unsigned long int", "long int") else None
        t = self.int_type(node, scope)
        if isinstance(node, c_ast.ID):
            b = self.reader.lookup(node.name, scope)
            return b.value if b.kind is NameKind.INT else None
        if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
            v = self.constant_int(node.expr, scope)
            return None if v is None else wrap(-v if node.op == "-" else v, t)
        if isinstance(node, c_ast.Cast) and is_int_type(node.to_type):
            v = self.constant_int(node.expr, scope)
            return None if v is None else wrap(v, t)
        if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-", "*", "/", "%", "<<", ">>"):
            a, c = self.constant_int(node.left, scope), self.constant_int(node.right, scope)
            if a is None or c is None:
                return None
            if node.op in ("/", "%") and c == 0:
                return None
            if node.op in ("<<", ">>") and not 0 <= c < 64:
                return None
            if node.op not in ("<<", ">>"):
                a, c = wrap(a, t), wrap(c, t)
            return wrap({"+": lambda: a + c, "-": lambda: a - c, "*": lambda: a * c, "/": lambda: _trunc_div(a, c),
                    "%": lambda: a - c * _trunc_div(a, c), "<<": lambda: a << c, ">>": lambda: a >> c}[node.op](), t)
        if isinstance(node, c_ast.TernaryOp):
            cond = self.constant_int(node.cond, scope)
            if cond is None:
                return None
            return self.constant_int(node.iftrue if cond else node.iffalse, scope)
        return None

    def int_type(self, node: c_ast.Node, scope: Scope | None) -> DType:
        """The C type (after integer promotion: i32, u32, i64 or u64) of an integer expression of literals,
        constants, loop variables and sizes; i32 for anything else."""
        if isinstance(node, c_ast.Constant):
            return literal_type(node.value) if int_literal(node.value) is not None else i32
        if isinstance(node, c_ast.ID):
            b = self.reader.lookup(node.name, scope)
            if b.kind in (NameKind.ITERATOR, NameKind.PARAM, NameKind.INT, NameKind.SIZE_EXPR):
                return promoted(self.reader.declared_type(node.name))
            return i32
        if isinstance(node, c_ast.BinaryOp):
            if node.op in ("+", "-", "*", "/", "%", "&", "|", "^"):
                return int_common(self.int_type(node.left, scope), self.int_type(node.right, scope))
            return self.int_type(node.left, scope) if node.op in ("<<", ">>") else i32
        if isinstance(node, c_ast.UnaryOp):
            return self.int_type(node.expr, scope) if node.op in ("-", "+", "~") else i32
        if isinstance(node, c_ast.Cast) and is_int_type(node.to_type):
            t = node.to_type.type
            return promoted(self.reader.type_of_names(t.type.names))
        if isinstance(node, c_ast.TernaryOp):
            return int_common(self.int_type(node.iftrue, scope), self.int_type(node.iffalse, scope))
        return i32

    def no_wrap(self, value: isl.PwAff, dtype: DType, node: c_ast.Node, scope: Scope, what: str) -> isl.PwAff:
        """``value``, which C computes in (or converts to) ``dtype``, checked not to wrap around below 0 in
        the domain enclosing ``scope`` (see the module docstring)."""
        if not dtype.is_unsigned:
            return value
        domain = self.reader.domain_at(scope)
        negative = value.neg().pos_set() & domain
        if negative.is_empty():
            return value
        point = point_text(negative)
        raise self.reader.error(
            node, f"`{node_text(node)}` in a {what} is `{dtype.c_name}` and wraps around below 0 (to {2**dtype.bits} + its value) "
                  f"where it is negative, e.g. at {point}: polyfuse does not model unsigned wrap-around in affine expressions",
            hint="make the variables signed (int, long), or state that it cannot happen with assume= (e.g. assume=\"n >= 1\")")

    # ----- affine expressions -------------------------------------------------------------------
    def affine(self, node: c_ast.Node, scope: Scope, what: str = "subscript") -> isl.PwAff:
        """The (quasi-)affine function ``node`` denotes in ``scope``; ``what`` names where it stands."""
        k = self.constant_int(node, scope)
        if k is not None:
            return scope.const(k)
        value = self._affine(node, scope, what)
        if isinstance(node, (c_ast.BinaryOp, c_ast.UnaryOp, c_ast.Cast, c_ast.TernaryOp)):
            t = self.int_type(node, scope)
            if t.is_unsigned:
                operands = [node.left, node.right] if isinstance(node, c_ast.BinaryOp) and node.op not in ("<<", ">>") else \
                    [node.expr] if isinstance(node, (c_ast.UnaryOp, c_ast.Cast)) else []
                for sub in operands:  # a signed operand converted to the unsigned type
                    if not self.int_type(sub, scope).is_unsigned:
                        self.no_wrap(self.affine(sub, scope, what), t, sub, scope, what)
                self.no_wrap(value, t, node, scope, what)
        return value

    def _affine(self, node: c_ast.Node, scope: Scope, what: str) -> isl.PwAff:
        text = node_text(node)
        if isinstance(node, c_ast.ID):
            return self._name(node, scope, what)
        if isinstance(node, c_ast.BinaryOp):
            if node.op in ("+", "-"):
                a, c = self.affine(node.left, scope, what), self.affine(node.right, scope, what)
                return a + c if node.op == "+" else a - c
            if node.op == "*":
                kl, kr = self.constant_int(node.left, scope), self.constant_int(node.right, scope)
                if kl is not None:
                    return self.affine(node.right, scope, what) * kl
                if kr is not None:
                    return self.affine(node.left, scope, what) * kr
                raise self._error(node, f"`{text}` is not affine: a {what} cannot multiply two variables", what)
            if node.op in ("/", "%"):
                d = self.constant_int(node.right, scope)
                if d is None or d == 0:
                    raise self._error(node, f"`{text}` is not affine: {node.op} in a {what} needs a non-zero integer constant "
                                            f"on the right, not `{node_text(node.right)}`", what)
                a = self.affine(node.left, scope, what)
                q = trunc_div(a, abs(d))
                return (q if d > 0 else -q) if node.op == "/" else a - q * abs(d)
            if node.op in _COMPARE or node.op in ("&&", "||"):
                raise self._error(node, f"the condition `{text}` is used as a number in a {what}", what)
            raise self._error(node, f"`{text}` is not affine: operator `{node.op}` is not allowed in a {what}", what)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
            a = self.affine(node.expr, scope, what)
            return -a if node.op == "-" else a
        if isinstance(node, c_ast.TernaryOp):
            cond = self.condition(node.cond, scope)
            a, c = self.affine(node.iftrue, scope, what), self.affine(node.iffalse, scope, what)
            return a.intersect_domain(cond).union_add(c.intersect_domain(scope.universe().subtract(cond))).coalesce()
        if isinstance(node, c_ast.Cast):
            if is_int_type(node.to_type):
                return self.affine(node.expr, scope, what)
            raise self._error(node, f"`{text}` casts to a non-integer type in a {what}", what)
        if isinstance(node, c_ast.ArrayRef):
            raise self._error(node, f"`{text}` reads an array element; a {what} must not depend on array values (indirect access)", what)
        if isinstance(node, c_ast.FuncCall):
            raise self._error(node, f"`{text}` is not affine: a {what} cannot call functions", what)
        if isinstance(node, c_ast.Constant):
            raise self._error(node, f"`{text}` is not an integer: a {what} must be an integer affine expression", what)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("*", "&"):
            raise self._error(node, f"`{text}` uses pointers; a {what} is an integer affine expression", what)
        raise self._error(node, f"`{text}` is not allowed in a {what}", what)

    def _name(self, node: c_ast.ID, scope: Scope, what: str) -> isl.PwAff:
        b = self.reader.lookup(node.name, scope)
        if b.kind is NameKind.ITERATOR:
            return scope.var(node.name)
        if b.kind is NameKind.PARAM and b.value in scope.params:
            return scope.var(b.value)
        if b.kind is NameKind.SIZE_EXPR:  # an int local set before the region to an expression of the sizes
            value = self.affine(b.value, scope, what)
            return self.no_wrap(value, promoted(self.reader.declared_type(node.name)), b.value, scope, what)
        if b.kind is NameKind.UNKNOWN:
            raise self._error(node, f"unknown name `{node.name}` in a {what}", what)
        raise self._error(node, f"`{node.name}` is a {b.kind.value}; a {what} may only use loop variables, int size "
                                f"parameters and integer constants", what)

    def _error(self, node: c_ast.Node, message: str, what: str) -> Exception:
        return self.reader.error(node, message, hint=CONDITION_HINT if what == "condition" else AFFINE_HINT)

    # ----- conditions ---------------------------------------------------------------------------
    def condition(self, node: c_ast.Node, scope: Scope) -> isl.Set:
        """The set of points of ``scope`` where the affine condition ``node`` holds."""
        if isinstance(node, c_ast.BinaryOp) and node.op in ("&&", "||"):
            a, c = self.condition(node.left, scope), self.condition(node.right, scope)
            return a & c if node.op == "&&" else a | c
        if isinstance(node, c_ast.UnaryOp) and node.op == "!":
            return scope.universe().subtract(self.condition(node.expr, scope))
        if isinstance(node, c_ast.BinaryOp) and node.op in _COMPARE:
            left, right = self.affine(node.left, scope, "condition"), self.affine(node.right, scope, "condition")
            t = int_common(self.int_type(node.left, scope), self.int_type(node.right, scope))
            left = self.no_wrap(left, t, node.left, scope, "condition")
            right = self.no_wrap(right, t, node.right, scope, "condition")
            return {"<": left.lt_set, "<=": left.le_set, ">": left.gt_set, ">=": left.ge_set,
                    "==": left.eq_set, "!=": left.ne_set}[node.op](right)
        k = self.constant_int(node, scope)
        if k is not None:
            return scope.universe() if k else scope.universe().subtract(scope.universe())
        if isinstance(node, c_ast.ArrayRef):
            raise self.reader.error(node, f"`{node_text(node)}` reads an array: an `if` condition cannot depend on array values",
                                    hint=CONDITION_HINT)
        if isinstance(node, c_ast.ID) or isinstance(node, c_ast.BinaryOp):
            # `if (n)` or `if (i - 1)`: C's "non-zero" test of an affine expression
            value = self.affine(node, scope, "condition")
            return value.ne_set(scope.const(0))
        raise self.reader.error(node, f"`{node_text(node)}` is not an affine condition", hint=CONDITION_HINT)

    # ----- array subscripts ---------------------------------------------------------------------
    def subscript(self, node: c_ast.ArrayRef, scope: Scope) -> tuple[str, list[isl.PwAff]]:
        """The array and the affine subscripts of ``A[i][j]``, checked against the array's rank."""
        r = self.reader
        subs: list[c_ast.Node] = []
        base: c_ast.Node = node
        while isinstance(base, c_ast.ArrayRef):
            subs.append(base.subscript)
            base = base.name
        subs.reverse()
        text = node_text(node)
        if not isinstance(base, c_ast.ID):
            raise r.error(node, f"`{text}` subscripts `{node_text(base)}`, which is not an array name",
                          hint="subscript a named array: A[i][j] (no pointer arithmetic or struct members)")
        name = base.name
        b = r.lookup(name, scope)
        if b.kind is NameKind.OTHER and isinstance(b.value, str) and b.value.startswith("an array of"):
            raise r.error(base, f"`{name}` is {b.value}: `{text}` cannot be read or written",
                          hint="use a supported element type: (unsigned) char, short, int, long, float or double")
        if b.kind is not NameKind.ARRAY:
            hint = "declare it as an array with its extents: double A[n][m]" if b.kind is NameKind.OTHER else None
            raise r.error(base, f"`{name}` is {b.value if b.kind is NameKind.OTHER and isinstance(b.value, str) else 'a ' + b.kind.value}, "
                                f"not an array, and cannot be subscripted in `{text}`", hint=hint)
        arr = r.array(name, base)
        if len(subs) != arr.ndim:
            raise r.error(node, f"array `{name}` has {arr.ndim} dimension{'s' if arr.ndim != 1 else ''} but `{text}` gives "
                                f"{len(subs)} subscript{'s' if len(subs) != 1 else ''}", hint="index single elements: A[i][j]")
        return name, [self.affine(s, scope, "subscript") for s in subs]

    # ----- array extents ------------------------------------------------------------------------
    def size(self, node: c_ast.Node | None, decl: c_ast.Node, params: tuple[str, ...]) -> SizeExpr:
        """An array extent as an affine expression of the int size parameters ``params``."""
        if node is None:
            raise self.reader.error(decl, f"array `{getattr(decl, 'name', '?')}` has no extent in its first dimension",
                                    hint="write every extent: double A[n][m]")
        k = self.constant_int(node, None)
        if k is not None:
            return SizeExpr((), k)
        if isinstance(node, c_ast.ID) and node.name in params:
            return SizeExpr(((node.name, 1),))
        if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-"):
            a, c = self.size(node.left, decl, params), self.size(node.right, decl, params)
            return a + c if node.op == "+" else a - c
        if isinstance(node, c_ast.BinaryOp) and node.op == "*":
            kl, kr = self.constant_int(node.left, None), self.constant_int(node.right, None)
            if kl is not None:
                return self.size(node.right, decl, params) * kl
            if kr is not None:
                return self.size(node.left, decl, params) * kr
        raise self.reader.error(node, f"array extent `{node_text(node)}` of `{getattr(decl, 'name', '?')}` is not an affine "
                                      "expression of constants and int parameters", hint="e.g. double A[n][m + 1] or A[N][N] with N a macro")
