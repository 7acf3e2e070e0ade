"""Schedule-tree helpers shared by the scheduling passes: isl option scopes, prefix maps, and the
coincidence / permutability flags of bands computed from the dependences.

Privatisation is part of every question asked here. An anti or output dependence on a temporary ``X``
does not constrain a loop ``L`` when every flow dependence of ``X`` stays inside one iteration of the
schedule prefix through ``L`` (each iteration then gets its own copy of ``X``; see ``privatize.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.deps import Dep

T = isl.schedule_node_type
R = TypeVar("R")

QUOTA_MESSAGE = "maximal number of operations exceeded"
"""How isl reports that a call ran past the context's operation limit."""

FLAG_BUDGET = 1_000_000
"""isl operations one band-flag question (permutable? member k coincident?) may take while a budget is in
force. Past it the answer is the conservative one -- not permutable, not coincident: never tiled, run
sequentially -- which is always legal, so one hard question costs parallelism, not the whole policy.
(Quasi-affine subscripts such as ``A[i % 3, i // 2]`` can make these subset tests explode.)"""


def bounded_flag(question: Callable[[], bool]) -> bool:
    """``question()``, or ``False`` when isl cannot answer within :data:`FLAG_BUDGET` operations."""
    return within_budget(question, False, FLAG_BUDGET)


def within_budget(work: Callable[[], R], fallback: R, limit: int | None = None) -> R:
    """``work()``, or ``fallback`` when it runs past ``limit`` isl operations (default: the limit in force).

    Applies only under a budget (``pf.schedule(isl_budget=None)`` runs ``work`` without limit). Starts a
    fresh operation count, and leaves one to the stage around it (isl's counter has no getter; see
    ``IslBudget.stage``): a stage made of many bounded steps stays bounded by their number.
    """
    ctx = isl.DEFAULT_CONTEXT
    saved = ctx.get_max_operations()
    if not saved:
        return work()
    ctx.set_max_operations(min(saved, limit) if limit else saved)
    ctx.reset_operations()
    try:
        return work()
    except Exception as e:
        if over_quota(e):
            return fallback
        raise
    finally:
        ctx.set_max_operations(saved)
        ctx.reset_operations()


def over_quota(error: Exception) -> bool:
    """Whether ``error`` comes from isl's operation limit. Not every such failure names the quota (a count
    isl gave up on reads back as ``None``: a TypeError), but once the limit is passed every isl call fails
    until the count is reset, so one probe tells."""
    if QUOTA_MESSAGE in str(error):
        return True
    try:
        isl.Set.universe(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
    except isl.Error as e:
        return QUOTA_MESSAGE in str(e)
    return False


@contextmanager
def isl_options(**options: int) -> Iterator[None]:
    """Set isl context options (``schedule_outer_coincidence=1`` ...) and restore them afterwards.

    Every polyfuse object lives in ``isl.DEFAULT_CONTEXT``, so the options are set there for the duration
    of one call and put back even when isl raises.
    """
    ctx = isl.DEFAULT_CONTEXT
    saved = {k: getattr(ctx, f"get_{k}")() for k in options}
    try:
        for k, v in options.items():
            getattr(ctx, f"set_{k}")(v)
        yield
    finally:
        for k, v in saved.items():
            getattr(ctx, f"set_{k}")(v)


def maps_union(maps: Sequence[isl.Map]) -> isl.UnionMap:
    """The union of ``maps`` (at least one)."""
    out = isl.UnionMap.from_map(maps[0])
    for m in maps[1:]:
        out = out.union(isl.UnionMap.from_map(m))
    return out


def single_affs(upa: isl.UnionPwAff) -> dict[str, isl.Aff] | None:
    """Per statement, the one affine piece of ``upa`` on its domain; ``None`` when some statement has
    several (a piecewise schedule member)."""
    out: dict[str, isl.Aff] = {}
    pieces: list[isl.PwAff] = []
    upa.foreach_pw_aff(pieces.append)
    for pa in pieces:
        affs: list[isl.Aff] = []
        pa.foreach_piece(lambda _s, a: affs.append(a))
        if len(affs) != 1:
            return None
        out[pa.get_domain_space().get_tuple_name(isl.dim_type.set)] = affs[0]
    return out


def statement_filters(prog: Program, groups: Sequence[Sequence[str]]) -> isl.UnionSetList:
    """One filter per group of statement names (the union of their domains), for ``insert_sequence``."""
    filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, len(groups))
    for group in groups:
        u = isl.UnionSet.empty(prog.context.get_space())
        for name in group:
            u = u.union(isl.UnionSet.from_set(prog.statement(name).domain))
        filters = filters.add(u)
    return filters


def member_map(node: isl.ScheduleNode, k: int) -> isl.UnionMap:
    """Member ``k`` of a band node as a union map (restricted to the instances reaching the node)."""
    upa = node.band_get_partial_schedule().get_at(k)
    return isl.UnionMap.from_union_pw_aff(upa).intersect_domain(node.get_domain())


def prefix_through(node: isl.ScheduleNode, n: int) -> isl.UnionMap:
    """The schedule prefix above ``node`` followed by its first ``n`` band members."""
    p = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    for k in range(n):
        p = p.flat_range_product(member_map(node, k))
    return p


def same_value(p: isl.UnionMap) -> isl.UnionMap:
    """``{ s -> t : p(s) = p(t) }``."""
    return p.apply_range(p.reverse())


def _member(node: isl.ScheduleNode, k: int) -> isl.MultiUnionPwAff:
    """:func:`member_map` as a one-member multi union pw aff (for isl's ``*_at_multi_union_pw_aff``)."""
    upa = node.band_get_partial_schedule().get_at(k).intersect_domain(node.get_domain())
    return isl.MultiUnionPwAff.from_union_pw_aff(upa)


def _prefix(node: isl.ScheduleNode, n: int) -> isl.MultiUnionPwAff:
    """:func:`prefix_through` as a multi union pw aff. ``R.eq_at_multi_union_pw_aff(P)`` is
    ``R & same_value(P)`` without building ``same_value`` (which relates every pair of statements)."""
    p = node.get_prefix_schedule_multi_union_pw_aff().intersect_domain(node.get_domain())
    for k in range(n):
        p = p.flat_range_product(_member(node, k))
    return p


class DepView:
    """The dependences of one program, split the way the band questions need them."""

    def __init__(self, deps: tuple[Dep, ...], temps: frozenset[str], space: isl.Space, privatize: bool,
                 answers: dict | None = None) -> None:
        self.deps = deps
        self.space = space
        self.privatize = privatize
        self.temps = temps if privatize else frozenset()
        self._unions: dict[tuple, isl.UnionMap] = {}  # union() results: asked again for every band member
        self._answers = answers if answers is not None else {}  # see remembered()

    @property
    def relaxed(self) -> frozenset[str]:
        """The temporaries whose privatisation can change an answer: those of :attr:`temps` with an anti or
        output dependence (a temporary's flow dependences constrain every view alike). Two views of the same
        dependences with the same ``relaxed`` answer every question alike, so the variants of
        ``pf.schedule`` that differ only in ``privatize`` are one variant when it is empty."""
        return self.temps & frozenset(d.array for d in self.deps if d.kind != "flow")

    def union(self, kinds, arrays=None, exclude=(), among: frozenset[str] | None = None) -> isl.UnionMap:
        """The union of the dependences of ``kinds`` (on ``arrays``, default all, but not on ``exclude``;
        between two statements of ``among``, default all)."""
        key = (frozenset(kinds), None if arrays is None else frozenset(arrays), frozenset(exclude), among)
        if key not in self._unions:
            out = isl.UnionMap.empty(self.space)
            for d in self.deps:
                if (d.kind in kinds and (arrays is None or d.array in arrays) and d.array not in exclude
                        and (among is None or (d.source in among and d.sink in among))):
                    out = out.union(isl.UnionMap.from_map(d.relation))
            self._unions[key] = out
        return self._unions[key]

    def privatizable(self, prefix: isl.MultiUnionPwAff, among: frozenset[str] | None = None) -> frozenset[str]:
        """The temporaries (of ``among``, default all) whose every flow dependence that touches a statement
        under ``prefix`` stays inside one iteration of it. Flows between other statements do not matter: a
        scalar reset at the start of every row of two passes (deriche's ``ym1``) gets a copy per pass."""
        asked = self.temps if among is None else self.temps & among
        if not asked:
            return frozenset()

        def compute() -> frozenset[str]:
            inside = prefix.domain()
            out = []
            for x in asked:
                flow = self.union(("flow",), (x,))
                touching = flow.intersect_domain(inside).union(flow.intersect_range(inside))
                if touching.is_subset(touching.eq_at_multi_union_pw_aff(prefix)):
                    out.append(x)
            return frozenset(out)

        return self.remembered(("privatizable", prefix.to_str(), asked), compute)

    def remembered(self, key: tuple, compute: Callable[[], R]) -> R:
        """``compute()``, the answer to the question ``key`` about this view's dependences, computed once for
        every view that shares this one's answers (``pf.schedule`` gives the views of one program's
        dependences one store). The smart, minimal and whole-component trees and the distributed variants
        hold many of the same bands, and a band's flags and privatisable temporaries follow from its
        schedule prefix (whose text, domain included, is the key) and the view's temporaries: conv2d 3x3
        asks 108 privatisation questions, 39 of them distinct, at 4 ms each."""
        full = (key, self.temps)
        if full not in self._answers:
            self._answers[full] = compute()  # (a question past its budget raises: nothing is kept)
        return self._answers[full]

    def constraining(self, prefix_full: isl.MultiUnionPwAff) -> isl.UnionMap:
        """The dependences that still constrain a loop whose full prefix is ``prefix_full``.

        Only the temporaries with an anti or output dependence between two statements under the prefix
        are asked about: the dependences of the others never link two instances of the band (the callers
        keep only those), so whether they are privatised changes nothing, and the question is costly."""
        found: set[str] = set()
        prefix_full.domain().foreach_set(lambda st: found.add(st.get_tuple_name()))
        names = frozenset(found)
        here = frozenset(d.array for d in self.deps if d.kind != "flow" and d.source in names and d.sink in names)
        free = self.privatizable(prefix_full, here)
        # (only the dependences between two statements under the prefix: the callers keep no other, and
        # leaving the rest out of the union spares isl their intersections, band member after member)
        return self.union(("flow",), among=names).union(self.union(("anti", "output"), exclude=free, among=names))


def annotate(node: isl.ScheduleNode, view: DepView) -> isl.ScheduleNode:
    """Set the coincident and permutable flags of every band below ``node`` from the dependences, after
    merging each chain of nested single-child bands into one band where the merged band is permutable."""
    if node.get_type() == T.band:
        node = _merge_chain(node, view)
        node = _flag(node, view)
    for k in range(node.n_children()):
        node = annotate(node.child(k), view).parent()
    return node


def _merge_chain(node: isl.ScheduleNode, view: DepView) -> isl.ScheduleNode:
    while node.n_children() == 1 and node.child(0).get_type() == T.band:
        inner = node.child(0)
        merged = node.band_get_partial_schedule().flat_range_product(inner.band_get_partial_schedule())
        candidate = inner.delete().parent().delete().insert_partial_schedule(merged)
        if not bounded_flag(lambda: _permutable(candidate, view)):
            break
        node = candidate
    return node


def _flag(node: isl.ScheduleNode, view: DepView) -> isl.ScheduleNode:
    node = node.band_set_permutable(1 if bounded_flag(lambda: _permutable(node, view)) else 0)
    n = node.band_n_member()
    flags = _coincident_members(node, view)
    for k in range(n):
        flag = flags[k] if k < len(flags) else bounded_flag(lambda: coincident(node, k, view))
        node = node.band_member_set_coincident(k, 1 if flag else 0)
    return node


def _coincident_members(node: isl.ScheduleNode, view: DepView) -> list[bool]:
    """:func:`coincident` of the band's members in order, computed incrementally where the dependences that
    constrain them are the same for every member (no temporary under the band that privatisation could
    relax: :meth:`DepView.constraining` then does not depend on the prefix). The dependences active at
    member ``k`` are those active at ``k - 1`` with member ``k - 1`` equal, so each member costs one
    ``eq_at`` and one subset test instead of rebuilding both from the prefix (the band flags' cost on
    doitgen and durbin, two thirds). Each answer is bounded as :func:`bounded_flag` bounds a question; the
    members not answered here (the list stops short) are asked one by one."""
    n = node.band_n_member()
    full = _prefix(node, n)
    found: set[str] = set()
    full.domain().foreach_set(lambda st: found.add(st.get_tuple_name()))
    if view.relaxed & frozenset(d.array for d in view.deps if d.source in found and d.sink in found):
        return []

    def compute() -> tuple[bool, ...]:
        out: list[bool] = []
        state: list[isl.UnionMap] = []

        def step(k: int) -> bool:
            active = state[0] if state else _active(node, view.constraining(full), _prefix(node, 0))
            following = active.eq_at_multi_union_pw_aff(_member(node, k))
            state[:] = [following]
            return active.is_subset(following)

        for k in range(n):
            answer = within_budget(lambda: step(k), None, FLAG_BUDGET)
            if answer is None:  # (past the budget: the rest one by one, conservatively)
                break
            out.append(answer)
        return tuple(out)

    return list(view.remembered(("coincident members", full.to_str(), n), compute))


def _active(node: isl.ScheduleNode, deps: isl.UnionMap, prefix: isl.MultiUnionPwAff) -> isl.UnionMap:
    dom = node.get_domain()
    return deps.intersect_domain(dom).intersect_range(dom).eq_at_multi_union_pw_aff(prefix)


def coincident(node: isl.ScheduleNode, k: int, view: DepView) -> bool:
    """Whether member ``k`` of a band carries no dependence (distance 0 for all deps not carried outside)."""
    through = _prefix(node, k + 1)

    def compute() -> bool:
        active = _active(node, view.constraining(through), _prefix(node, k))
        return active.is_subset(active.eq_at_multi_union_pw_aff(_member(node, k)))

    return view.remembered(("coincident", through.to_str()), compute)


def carries(node: isl.ScheduleNode, k: int, deps: isl.UnionMap) -> bool:
    """Whether member ``k`` of a band carries one of ``deps``: two instances it relates lie in one iteration
    of the loops above the member but in different iterations of the member (no privatisation relaxes it)."""
    active = _active(node, deps, _prefix(node, k))
    return not active.is_subset(active.eq_at_multi_union_pw_aff(_member(node, k)))


def _permutable(node: isl.ScheduleNode, view: DepView) -> bool:
    n = node.band_n_member()
    full = _prefix(node, n)

    def compute() -> bool:
        active = _active(node, view.constraining(full), _prefix(node, 0))
        return all(active.is_subset(active.lex_le_at_multi_union_pw_aff(_member(node, k))) for k in range(n))

    return view.remembered(("permutable", full.to_str(), n), compute)
