"""``for`` loops of the C SCoP frontend: the loop variable, its start, a constant step and the bounds that
the condition puts on it, turned into a builder loop (decreasing loops keep their source order through the
builder's ``reverse`` loops). Used by :class:`polyfuse.frontend.scop_c.CReader`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl
from pycparser import c_ast

from polyfuse.frontend.affine import NameKind
from polyfuse.frontend.c_affine import point_text
from polyfuse.frontend.c_source import node_text
from polyfuse.ir.builder import Scope
from polyfuse.types import u64

if TYPE_CHECKING:
    from polyfuse.frontend.scop_c import CReader

LOOP_HINT = "loops are `for (i = lo; i < hi; i++)` (or <=, >, >=, ++i, i += c, i--, i -= c) with affine bounds and a constant step"


class CLoops:
    """Reads the ``for`` loops of one function for its :class:`CReader`."""

    def __init__(self, reader: CReader) -> None:
        self.reader = reader

    def read_for(self, node: c_ast.For) -> None:
        """A ``for`` loop and its body (the body through the reader's ``statement``)."""
        b = self.reader.builder
        scope = b.scope()
        it, start = self._loop_init(node, scope)
        step = self._loop_step(node, it)
        if node.cond is None:
            raise self.reader.error(node, f"the loop over `{it}` has no condition", hint=LOOP_HINT)
        bounds = self._loop_bounds(node.cond, it, scope, step)
        lo = self.reader.affine.affine(start, scope, "loop bound")
        lo = self._unsigned_start(node, it, start, lo, scope, step, bounds)
        if step > 0:
            hi = bounds[0]
            for extra in bounds[1:]:
                hi = hi.min(extra)
            with b.loop(it, lo, hi, step):
                self.reader.statement(node.stmt)
        else:
            low = bounds[0]
            for extra in bounds[1:]:
                low = low.max(extra)
            with b.loop(it, low, lo + 1, -step, reverse=True):
                self.reader.statement(node.stmt)

    def _unsigned_start(self, node: c_ast.For, it: str, start: c_ast.Node, lo: isl.PwAff, scope: Scope, step: int,
                        bounds: list[isl.PwAff]) -> isl.PwAff:
        """Where ``it`` is unsigned, or compared with an unsigned bound, its values are unsigned: the start
        must not wrap around, and a decreasing loop must stop before ``it`` goes below 0 (in C it would wrap
        around to a huge value and the loop would go on: ``for (unsigned i = n; i >= 0; i--)`` never ends)."""
        affine = self.reader.affine
        t = self.reader.declared_type(it)
        unsigned = (t is not None and t.is_unsigned) or any(affine.int_type(n, scope).is_unsigned for n in _bound_nodes(node.cond, it))
        if not unsigned:
            return lo
        affine.no_wrap(lo, u64, start, scope, "loop start")
        for n in _bound_nodes(node.cond, it):  # a signed bound converted to the unsigned type
            affine.no_wrap(affine.affine(n, scope, "loop bound"), u64, n, scope, "loop bound")
        if step < 0:
            low = bounds[0]
            for extra in bounds[1:]:
                low = low.max(extra)
            below = (low - (-step)).neg().pos_set() & self.reader.domain_at(scope) & lo.ge_set(low)
            if not below.is_empty():
                raise self.reader.error(node.cond, f"the unsigned loop variable `{it}` of `{node_text(node.cond)}` goes below 0 after its "
                                        f"last iteration, where C wraps it around to a huge value and the loop does not end (e.g. at "
                                        f"{point_text(below)})", hint="use a signed loop variable, or stop at a bound of at least the step")
        return lo

    def _loop_init(self, node: c_ast.For, scope: Scope) -> tuple[str, c_ast.Node]:
        init = node.init
        if isinstance(init, c_ast.DeclList) and len(init.decls) == 1 and init.decls[0].init is not None:
            name, start, where = init.decls[0].name, init.decls[0].init, init.decls[0]
        elif isinstance(init, c_ast.Assignment) and init.op == "=" and isinstance(init.lvalue, c_ast.ID):
            name, start, where = init.lvalue.name, init.rvalue, init.lvalue
        else:
            raise self.reader.error(init if init is not None else node, f"unsupported loop start `{node_text(init) if init is not None else ''}`",
                             hint="start the loop with `i = lo` or `int i = lo`")
        kind = self.reader.lookup(name, scope)
        if kind.kind is NameKind.ITERATOR:
            raise self.reader.error(where, f"loop variable `{name}` shadows the enclosing loop's variable `{name}`", hint="give the inner loop its own variable")
        var = self.reader.locals.get(name)
        if kind.kind is not NameKind.LOCAL or var is None or not var.is_int_scalar:
            raise self.reader.error(where, f"loop variable `{name}` must be an int variable of the function, not {'a ' + kind.kind.value if kind.kind is not NameKind.OTHER else kind.value}",
                             hint="declare it `int i;` in the function or in the loop: for (int i = 0; ...)")
        if name in {n.name for n in walk(start) if isinstance(n, c_ast.ID)}:
            raise self.reader.error(start, f"the start of the loop over `{name}` uses `{name}` itself", hint=LOOP_HINT)
        return name, start

    def _loop_step(self, node: c_ast.For, it: str) -> int:
        nxt = node.next
        step: int | None = None
        if isinstance(nxt, c_ast.UnaryOp) and nxt.op in ("++", "p++", "--", "p--") and is_name(nxt.expr, it):
            step = 1 if "++" in nxt.op else -1
        elif isinstance(nxt, c_ast.Assignment) and is_name(nxt.lvalue, it):
            if nxt.op in ("+=", "-="):
                k = self.reader.affine.constant_int(nxt.rvalue, None)
                step = None if k is None else (k if nxt.op == "+=" else -k)
            elif nxt.op == "=" and isinstance(nxt.rvalue, c_ast.BinaryOp) and nxt.rvalue.op in ("+", "-"):
                l, r = nxt.rvalue.left, nxt.rvalue.right
                if is_name(l, it):
                    k = self.reader.affine.constant_int(r, None)
                    step = None if k is None else (k if nxt.rvalue.op == "+" else -k)
                elif is_name(r, it) and nxt.rvalue.op == "+":
                    step = self.reader.affine.constant_int(l, None)
            if step is None and nxt.op in ("+=", "-=", "="):
                raise self.reader.error(nxt, f"loop step `{node_text(nxt)}` is not a constant step of `{it}`", hint=LOOP_HINT)
        if step is None:
            raise self.reader.error(nxt if nxt is not None else node, f"unsupported loop step `{node_text(nxt) if nxt is not None else ''}`", hint=LOOP_HINT)
        if step == 0:
            raise self.reader.error(nxt, f"loop step `{node_text(nxt)}` is zero", hint=LOOP_HINT)
        return step

    def _loop_bounds(self, cond: c_ast.Node, it: str, scope: Scope, step: int) -> list[isl.PwAff]:
        """The bounds the condition puts on ``it``: exclusive upper bounds for an increasing loop,
        inclusive lower bounds for a decreasing one."""
        if isinstance(cond, c_ast.BinaryOp) and cond.op == "&&":
            return self._loop_bounds(cond.left, it, scope, step) + self._loop_bounds(cond.right, it, scope, step)
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
        if isinstance(cond, c_ast.BinaryOp) and cond.op in flip:
            if is_name(cond.left, it):
                op, other = cond.op, cond.right
            elif is_name(cond.right, it):
                op, other = flip[cond.op], cond.left
            else:
                op, other = None, None
            if op is not None:
                if it in {n.name for n in walk(other) if isinstance(n, c_ast.ID)}:
                    raise self.reader.error(cond, f"the bound in `{node_text(cond)}` uses the loop variable `{it}`", hint=LOOP_HINT)
                bound = self.reader.affine.affine(other, scope, "loop bound")
                if step > 0 and op in ("<", "<="):
                    return [bound if op == "<" else bound + 1]
                if step < 0 and op in (">", ">="):
                    return [bound if op == ">=" else bound + 1]
                direction = "increasing" if step > 0 else "decreasing"
                raise self.reader.error(cond, f"the condition `{node_text(cond)}` of a loop with {direction} `{it}` does not bound it "
                                       f"from {'above' if step > 0 else 'below'}", hint=LOOP_HINT)
        raise self.reader.error(cond, f"unsupported loop condition `{node_text(cond)}`: it must compare `{it}` with an affine bound",
                         hint=LOOP_HINT)


def _bound_nodes(cond: c_ast.Node, it: str) -> list[c_ast.Node]:
    """The bounds that the comparisons of ``cond`` (joined by ``&&``) compare ``it`` with."""
    if isinstance(cond, c_ast.BinaryOp) and cond.op == "&&":
        return _bound_nodes(cond.left, it) + _bound_nodes(cond.right, it)
    if isinstance(cond, c_ast.BinaryOp):
        return [cond.right] if is_name(cond.left, it) else [cond.left] if is_name(cond.right, it) else []
    return []


def is_name(node: c_ast.Node | None, name: str) -> bool:
    return isinstance(node, c_ast.ID) and node.name == name


def walk(node: c_ast.Node | None):  # noqa: ANN202 - a generator of nodes
    """``node`` and every node under it, parents first."""
    if node is None:
        return
    yield node
    for _, child in node.children():
        yield from walk(child)


def assigned_names(items: list[c_ast.Node]) -> set[str]:
    """Names assigned (``x = ...``, ``x op= ...``, ``x++``) or declared anywhere in ``items``."""
    out: set[str] = set()
    for item in items:
        for n in walk(item):
            if isinstance(n, c_ast.Assignment) and isinstance(n.lvalue, c_ast.ID):
                out.add(n.lvalue.name)
            elif isinstance(n, c_ast.UnaryOp) and n.op in ("++", "--", "p++", "p--") and isinstance(n.expr, c_ast.ID):
                out.add(n.expr.name)
            elif isinstance(n, c_ast.Decl) and n.name:
                out.add(n.name)
    return out


def loop_variables(items: list[c_ast.Node]) -> set[str]:
    """The variables that the ``for`` loops in ``items`` start."""
    out: set[str] = set()
    for item in items:
        for n in walk(item):
            if isinstance(n, c_ast.For) and isinstance(n.init, c_ast.Assignment) and isinstance(n.init.lvalue, c_ast.ID):
                out.add(n.init.lvalue.name)
            elif isinstance(n, c_ast.For) and isinstance(n.init, c_ast.DeclList):
                out |= {d.name for d in n.init.decls}
    return out
