"""The user's choice of parallel loops (``pf.schedule(..., parallel={"S1": "j"})``, CLI ``--parallel S1:j``).

A choice names, for one statement, the iterator(s) whose loop(s) should run in parallel in that statement's
kernel, outermost first: the C target's OpenMP loop (a second one is collapsed with it), the CUDA target's
mapped dimensions. The mapper (``kernels.py``) reorders the kernel's band so that they lead
(:func:`lead_with`); the tree is then checked like any other. A loop that carries a dependence, or that is
not a member of the band, is refused here with an :class:`IllegalTransformError` naming it (and the
dependence), never silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.errors import IllegalTransformError, PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import T, member_map
from polyfuse.schedule.tiling.microtile import member_iterators, reorder

Choices = Mapping[str, tuple[str, ...]]


def parallel_choices(prog: Program, parallel: Mapping[str, str | Sequence[str]] | None) -> dict[str, tuple[str, ...]] | None:
    """``parallel`` checked against ``prog`` and normalised (statement -> iterator names); ``None`` for none."""
    if not parallel:
        return None
    if not isinstance(parallel, Mapping):
        raise PolyfuseError(f"parallel= must map statement names to iterator names (e.g. {{'S1': 'j'}}), got {parallel!r}")
    out: dict[str, tuple[str, ...]] = {}
    names = [s.name for s in prog.statements]
    for stmt_name, its in parallel.items():
        if stmt_name not in names:
            raise PolyfuseError(f"parallel= names statement {stmt_name!r}, which {prog.name} does not have "
                                f"(its statements: {', '.join(names)})")
        stmt = prog.statement(stmt_name)
        chosen = (its,) if isinstance(its, str) else tuple(its)
        if not chosen or len(chosen) > 3 or len(set(chosen)) != len(chosen):
            raise PolyfuseError(f"parallel= for {stmt_name}: give one to three distinct iterator names, got {its!r}")
        for it in chosen:
            if it not in stmt.iterators:
                raise PolyfuseError(f"parallel= for {stmt_name}: {it!r} is not one of its loop iterators "
                                    f"({', '.join(stmt.iterators) or 'none'}; line {stmt.line}: {stmt.text})")
        out[stmt_name] = chosen
    return out


def chosen_in(prog: Program, node: isl.ScheduleNode, choices: Choices | None,
              statements: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
    """The (statement, iterators) choice that applies to the kernel at band ``node``, if any. Choices for
    several statements of one kernel must designate the same band members."""
    if not choices or node.get_type() != T.band:
        return None
    hits = [(s, choices[s]) for s in statements if s in choices]
    if len(hits) > 1:
        members = {tuple(_member_of(prog, node, s, it) for it in its) for s, its in hits}
        if len(members) > 1:
            raise PolyfuseError("parallel= gives different loops for statements of one kernel: "
                                + ", ".join(f"{s}: {', '.join(its)}" for s, its in hits))
    return hits[0] if hits else None


def _member_of(prog: Program, node: isl.ScheduleNode, statement: str, iterator: str) -> int | None:
    stmt = prog.statement(statement)
    dims = member_iterators(node, stmt)
    k = stmt.iterators.index(iterator)
    return dims.index(k) if dims is not None and k in dims else None


def lead_with(prog: Program, node: isl.ScheduleNode, statement: str, iterators: tuple[str, ...]) -> isl.ScheduleNode:
    """The band at ``node`` reordered so that the members running ``statement``'s ``iterators`` lead, in
    that order; :class:`IllegalTransformError` when one is not a member, carries a dependence, or the band
    cannot be reordered."""
    stmt = prog.statement(statement)
    dims = member_iterators(node, stmt)
    loops = ", ".join(stmt.iterators[d] for d in dims) if dims else "none as plain iterators"
    if dims is None:
        raise IllegalTransformError(f"parallel= for {statement}: its kernel's loops are not plain loops over its "
                                    f"iterators (a skewed or fused band), so {', '.join(iterators)} cannot be chosen; "
                                    f"try fusion='min' (line {stmt.line}: {stmt.text})")
    wanted = []
    for it in iterators:
        k = stmt.iterators.index(it)
        if k not in dims:
            raise IllegalTransformError(f"parallel= for {statement}: loop {it!r} is not a loop of its kernel's band "
                                        f"(that band's loops: {loops}; line {stmt.line}: {stmt.text})")
        m = dims.index(k)
        if not node.band_member_get_coincident(m):
            raise IllegalTransformError(f"parallel= for {statement}: loop {it!r} cannot run in parallel: "
                                        f"{_carried(prog, node, m)} (line {stmt.line}: {stmt.text})")
        wanted.append(m)
    order = wanted + [m for m in range(node.band_n_member()) if m not in wanted]
    if order == list(range(node.band_n_member())):
        return node
    if not node.band_get_permutable():
        raise IllegalTransformError(f"parallel= for {statement}: the loops of its kernel ({loops}) cannot be reordered "
                                    f"to put {', '.join(iterators)} outermost (line {stmt.line}: {stmt.text})")
    return reorder(node, order)


def _carried(prog: Program, node: isl.ScheduleNode, m: int) -> str:
    """Which dependence member ``m`` of the band at ``node`` carries (for the error message)."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    same_outer = prefix.apply_range(prefix.reverse())
    member = member_map(node, m)
    for d in prog.dependences():
        rel = isl.UnionMap.from_map(d.relation) if isinstance(d.relation, isl.Map) else d.relation
        rel = rel.intersect_domain(domain).intersect_range(domain).intersect(same_outer)
        if rel.is_empty():
            continue
        moved = rel.apply_domain(member).apply_range(member)
        if not moved.is_subset(moved.domain().identity()):
            return (f"the {d.kind} dependence on {d.array!r} from {d.source} to {d.sink} is carried by it "
                    f"(distance {d.distance_text()})")
    return "a dependence between its instances is carried by it"
