"""Assemble a :class:`Program` from a loop nest described by a frontend.

Frontends (the Python DSL, the C reader, the ops graph) only understand their own syntax; they describe
loops, conditions and assignments to a :class:`ProgramBuilder`, which owns every polyhedral decision:
iteration domains, access relations, and the source-order schedule tree. Affine expressions are built by
the frontend as ``isl.PwAff`` values in the builder's current :class:`Scope`, whose set dimensions are the
iterators of the enclosing loops, outermost first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import islpy as isl

from polyfuse.errors import SourceError
from polyfuse.ir.expr import Expr
from polyfuse.ir.program import Access, Array, Program, Statement
from polyfuse.types import DType, SizeExpr


@dataclass(frozen=True)
class Scope:
    """The affine naming context at one point of the loop nest: params and enclosing iterators."""

    space: isl.Space
    iterators: tuple[str, ...]

    def var(self, name: str) -> isl.PwAff:
        return self._vars()[name]

    def has(self, name: str) -> bool:
        return name in self.iterators or name in self.params

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.space.get_var_names(isl.dim_type.param))

    def const(self, value: int) -> isl.PwAff:
        return self._vars()[0] + value

    def universe(self) -> isl.Set:
        return isl.Set.universe(self.space)

    def _vars(self) -> dict:
        return isl.affs_from_space(self.space)


@dataclass
class _Loop:
    iterator: str
    constraints: isl.Set  # in the space of the iterators up to and including this one
    children: list = field(default_factory=list)
    reverse: bool = False  # iterations run from the upper bound down


@dataclass
class _StmtNode:
    name: str


class ProgramBuilder:
    """Mutable assembly line for one :class:`Program`; ``build()`` returns the immutable value."""

    def __init__(self, name: str, params: Sequence[str], filename: str = "<program>", line: int = 0) -> None:
        self.name = name
        self.filename = filename
        self.line = line
        self.params = tuple(params)
        self.ctx = isl.DEFAULT_CONTEXT
        self._param_space = isl.Space.create_from_names(self.ctx, set=[], params=list(self.params))
        self.arrays: dict[str, Array] = {}
        self.scalars: dict[str, DType] = {}
        self.arguments: list[str] = []
        self.statements: list[Statement] = []
        self._root: list = []
        self._stack: list[_Loop] = []
        self._conditions: list[isl.Set] = []  # each in the space of the iterators at its point

    # ----- declarations -------------------------------------------------------------------------
    def param_scope(self) -> Scope:
        return Scope(self._param_space, ())

    def add_array(self, name: str, shape: Sequence[SizeExpr], dtype: DType, role: str, argument: bool) -> None:
        self.arrays[name] = Array(name, tuple(shape), dtype, role)
        if argument:
            self.arguments.append(name)

    def add_scalar(self, name: str, dtype: DType) -> None:
        self.scalars[name] = dtype
        self.arguments.append(name)

    def set_role(self, name: str, role: str) -> None:
        a = self.arrays[name]
        self.arrays[name] = Array(a.name, a.shape, a.dtype, role)

    # ----- structure ----------------------------------------------------------------------------
    def scope(self) -> Scope:
        """The naming context for expressions at the current point of the nest."""
        its = tuple(lp.iterator for lp in self._stack)
        space = isl.Space.create_from_names(self.ctx, set=list(its), params=list(self.params))
        return Scope(space, its)

    @contextmanager
    def loop(
        self, iterator: str, lower: isl.PwAff, upper: isl.PwAff, step: int = 1, reverse: bool = False
    ) -> Iterator[None]:
        """``for iterator in [lower, upper) by step``; bounds are built in the enclosing scope.

        With ``reverse`` the iterations run downwards, ``upper - 1, upper - 1 - step, ...`` while
        ``>= lower`` (C's ``for (i = hi; i >= lo; i -= step)``): the domain is
        ``lower <= i < upper and (upper - 1 - i) % step == 0`` and the loop's band member is ``-i``, so
        the source order decreases along the iterator.
        """
        outer = self.scope()
        inner_space = isl.Space.create_from_names(
            self.ctx, set=[*outer.iterators, iterator], params=list(self.params)
        )
        inner = Scope(inner_space, (*outer.iterators, iterator))
        lo = _lift_pw_aff(lower, 1)
        hi = _lift_pw_aff(upper, 1)
        depth = len(outer.iterators)
        it = isl.PwAff.from_aff(isl.Aff.var_on_domain(isl.LocalSpace.from_space(lo.get_domain_space()), isl.dim_type.set, depth))
        dom = lo.le_set(it) & it.lt_set(hi)
        if step != 1:
            anchor = (hi - 1 - it) if reverse else (it - lo)
            dom = dom & anchor.mod_val(step).eq_set(it * 0)
        node = _Loop(iterator, dom.reset_space(inner.space), reverse=reverse)
        self._current_children().append(node)
        self._stack.append(node)
        try:
            yield
        finally:
            self._stack.pop()

    @contextmanager
    def condition(self, cond: isl.Set) -> Iterator[None]:
        """Statements inside execute only where ``cond`` (a set in the current scope) holds."""
        self._conditions.append(cond)
        try:
            yield
        finally:
            self._conditions.pop()

    def add_statement(
        self,
        target: tuple[str, Sequence[isl.PwAff], str],
        op: str,
        make_value: Callable[[Callable[[str, Sequence[isl.PwAff], str], int]], Expr],
        line: int,
        text: str,
        kind: str | None = None,
    ) -> Statement:
        """Add ``target op value`` at the current point.

        ``target`` is ``(array, subscripts, source text)``. ``make_value`` builds the right-hand side; it
        receives ``read(array, subscripts, text) -> access index`` to register each array read.
        """
        name = f"S{len(self.statements)}"
        scope = self.scope()
        domain = self._current_domain(scope).set_tuple_name(name)
        accesses: list[Access] = []

        def register(array: str, subs: Sequence[isl.PwAff], access_kind: str, access_text: str) -> int:
            accesses.append(Access(array, access_kind, self._relation(domain, array, subs), access_text))
            return len(accesses) - 1

        arr, subs, ttext = target
        target_kind = kind or ("write" if op == "=" else "update")
        target_index = register(arr, subs, target_kind, ttext)
        value = make_value(lambda a, s, t: register(a, s, "read", t))
        stmt = Statement(name, domain, tuple(accesses), target_index, op, value, line, text)
        self.statements.append(stmt)
        self._current_children().append(_StmtNode(name))
        return stmt

    # ----- result -------------------------------------------------------------------------------
    def build(self, assume: isl.Set | None = None) -> Program:
        context = isl.Set.universe(self._param_space)
        for p in self.params:
            context = context & self.param_scope().var(p).ge_set(self.param_scope().const(0))
        if assume is not None:
            context = context & assume
        context = context.params()
        if context.is_empty():
            raise SourceError("the assumed constraints on the sizes can never hold", filename=self.filename, line=self.line)
        stmts = tuple(
            Statement(s.name, s.domain.intersect_params(context), s.accesses, s.target, s.op, s.value, s.line, s.text)
            for s in self.statements
        )
        if not stmts:
            raise SourceError("the program has no statements", filename=self.filename, line=self.line)
        schedule = _schedule_of(self._root, {s.name: s for s in stmts}, self._param_space)
        return Program(
            name=self.name,
            params=self.params,
            context=context,
            arrays=self.arrays,
            scalars=self.scalars,
            arguments=tuple(self.arguments),
            statements=stmts,
            schedule=schedule,
            filename=self.filename,
            line=self.line,
        )

    # ----- internals ----------------------------------------------------------------------------
    def _current_children(self) -> list:
        return self._stack[-1].children if self._stack else self._root

    def _current_domain(self, scope: Scope) -> isl.Set:
        depth = len(scope.iterators)
        dom = scope.universe()
        for k, lp in enumerate(self._stack):
            dom = dom & _lift_set(lp.constraints, depth - (k + 1)).reset_space(scope.space)
        for cond in self._conditions:
            extra = depth - cond.dim(isl.dim_type.set)
            dom = dom & _lift_set(cond, extra).reset_space(scope.space)
        return dom.coalesce()

    def _relation(self, domain: isl.Set, array: str, subs: Sequence[isl.PwAff]) -> isl.Map:
        """The map from each instance of ``domain`` to the element of ``array`` at ``subs``."""
        if not subs:
            rng = isl.Set.universe(self._param_space).set_tuple_name(array)
            return isl.Map.from_domain_and_range(domain, rng)
        dom_space = subs[0].get_domain_space()
        lst = isl.PwAffList.alloc(self.ctx, len(subs))
        for s in subs:
            lst = lst.add(s)
        out_space = isl.Space.create_from_names(self.ctx, set=[f"o{k}" for k in range(len(subs))], params=list(self.params))
        mspace = dom_space.map_from_domain_and_range(out_space)
        rel = isl.Map.from_multi_pw_aff(isl.MultiPwAff.from_pw_aff_list(mspace, lst))
        rel = rel.set_tuple_name(isl.dim_type.in_, domain.get_tuple_name())
        rel = rel.set_tuple_name(isl.dim_type.out, array)
        return rel.intersect_domain(domain)


def _lift_pw_aff(pa: isl.PwAff, extra: int) -> isl.PwAff:
    """``pa`` with ``extra`` unused dimensions appended to its domain."""
    return pa.add_dims(isl.dim_type.in_, extra) if extra else pa


def _lift_set(s: isl.Set, extra: int) -> isl.Set:
    return s.add_dims(isl.dim_type.set, extra) if extra else s


def _schedule_of(nodes: list, stmts: dict[str, Statement], param_space: isl.Space) -> isl.Schedule:
    """The schedule tree of the source order: one band per loop, a sequence per block."""
    parts = [_node_schedule(n, stmts, param_space, 0) for n in nodes]
    parts = [p for p in parts if p is not None]
    sched = parts[0]
    for p in parts[1:]:
        sched = sched.sequence(p)
    return sched


def _statements_under(node) -> list[str]:
    if isinstance(node, _StmtNode):
        return [node.name]
    return [n for c in node.children for n in _statements_under(c)]


def _node_schedule(node, stmts: dict[str, Statement], param_space: isl.Space, depth: int) -> isl.Schedule | None:
    if isinstance(node, _StmtNode):
        return isl.Schedule.from_domain(isl.UnionSet.from_set(stmts[node.name].domain))
    parts = [_node_schedule(c, stmts, param_space, depth + 1) for c in node.children]
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    body = parts[0]
    for p in parts[1:]:
        body = body.sequence(p)
    upa = None
    for name in _statements_under(node):
        dom = stmts[name].domain
        aff = isl.PwAff.from_aff(isl.Aff.var_on_domain(isl.LocalSpace.from_space(dom.get_space()), isl.dim_type.set, depth))
        if node.reverse:
            aff = -aff
        piece = aff.intersect_domain(dom).to_union_pw_aff()
        upa = piece if upa is None else upa.union_add(piece)
    band = isl.MultiUnionPwAff.from_union_pw_aff(upa)
    return body.insert_partial_schedule(band)
