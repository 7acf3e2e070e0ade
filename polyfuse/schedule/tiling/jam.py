"""Interleaved recurrences on the C target: a parallel point loop unrolled and jammed into the sequential loop
inside it.

A loop that carries a dependence from each iteration to the next (a *recurrence*: deriche's filters
``y[j] = a*x[j] + b*y[j-1] + ...``, adi's tridiagonal sweeps ``p[j] = -c / (a*p[j-1] + b)``) runs at the
latency of that chain: each iteration waits for the previous one's multiplies, adds and divides, 10 to
30 cycles, while the core could issue several such chains at once. When the loop around it is parallel
(the rows or columns of a tile, each filtered on its own), its iterations are independent chains. Running
``JAM`` of them in step, each with its own copy of the scalars it carries, keeps ``JAM`` chains in flight;
where the chains are neighbouring columns, their loads and stores are also contiguous, and the compiler's
straight-line (SLP) vectoriser packs them into vectors.

This pass only marks the loop: a :data:`JAM_MARK` (user: the factor) above the point loop of a tiled
parallel member with a recurrence inside it (an untiled member is strip-mined by the factor first). The C printer
(:mod:`polyfuse.codegen.c_jam`) does the unrolling where the loop nest has the expected shape (the
sequential loop is innermost, its bounds do not depend on the jammed iterator, and it is no reduction it
would vectorise anyway), and prints the loop unchanged otherwise. Legal because the marked loop is
parallel: its iterations share no dependence (scalars included: a scalar the loop's coincidence was
granted by privatising is private to one iteration, and each jammed copy gets its own).
"""

from __future__ import annotations

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.bands import FLAG_BUDGET, DepView, T, carries, within_budget
from polyfuse.schedule.tiling.sizes import tile_band

JAM_MARK = "jam"
JAM = 4
"""Chains run in step: enough to cover a multiply-add chain's latency (about four results in flight per
cycle of latency on the targets measured), and few enough that each copy's carried scalars stay in
registers with 16 of them."""


def mark_jam(prog: Program, band: isl.ScheduleNode, view: DepView, tiled: bool) -> isl.ScheduleNode:
    """The kernel band ``band`` with a :data:`JAM_MARK` above the point loop of its last parallel member
    that has a recurrence after it (later in the band or in a band below); the printer jams the mark's
    outermost loop. ``tiled``: ``band`` is a tile band and its only child the point band, split before
    that member; otherwise (a one-member band left untiled: ``streaming.py``, ``rowwise.py``) the member
    is first strip-mined by :data:`JAM`. Returns the node at ``band``'s position."""
    if JAM < 2 or band.get_type() != T.band or (tiled and (band.n_children() != 1 or band.child(0).get_type() != T.band)):
        return band
    node = band.child(0) if tiled else band
    k = _jammed_member(prog, node, view)
    if k is None:
        return band
    if not tiled and node.band_n_member() > 1:
        return band  # (strip-mining one member of several would split the band: a different loop nest)
    depth = band.get_tree_depth()
    if k > 0:
        node = node.band_split(k).child(0)
    if not tiled:
        node = tile_band(node, (JAM,)).child(0)
    node = node.insert_mark(isl.Id(JAM_MARK, user=JAM))  # (no split below the member: the same loop nest)
    while node.get_tree_depth() > depth:
        node = node.parent()
    return node


def _jammed_member(prog: Program, band: isl.ScheduleNode, view: DepView) -> int | None:
    """The last parallel member of ``band``, when a recurrence follows it (:func:`_recurrence`)."""
    n = band.band_n_member()
    flags = [bool(band.band_member_get_coincident(k)) for k in range(n)]
    last = next((k for k in reversed(range(n)) if flags[k]), None)
    if last is None:
        return None
    after = next((j for j in range(last + 1, n) if not flags[j]), None)
    found = (band, after) if after is not None else _sequential_below(band.child(0))
    return last if found is not None and _recurrence(prog, *found, view) else None


def _sequential_below(node: isl.ScheduleNode) -> tuple[isl.ScheduleNode, int] | None:
    """The first band member at or below ``node`` that is not parallel (the band and the position)."""
    if node.get_type() == T.band:
        k = next((k for k in range(node.band_n_member()) if not node.band_member_get_coincident(k)), None)
        if k is not None:
            return node, k
    for c in range(node.n_children()):
        found = _sequential_below(node.child(c))
        if found is not None:
            return found
    return None


def _recurrence(prog: Program, band: isl.ScheduleNode, k: int, view: DepView) -> bool:
    """Whether member ``k`` of ``band`` carries a flow dependence between statements that it iterates (that
    it does not hold at a constant), other than a reduction's update of its own accumulator: a value
    passed from one iteration to the next. A member is also flagged sequential for a dependence from a
    statement run once before it (lu's pivot division before the row update), for a sum or a maximum, and
    for anti or output dependences: loops the compiler vectorises, which jamming would only break up."""
    iterated = set()
    partial = band.band_get_partial_schedule().get_at(k).intersect_domain(band.get_domain())
    partial.foreach_pw_aff(lambda pa: None if pa.is_cst() else iterated.add(pa.get_domain_space().get_tuple_name(isl.dim_type.set)))
    from polyfuse.schedule.mapping.rows import reduction_op  # (mapping imports this module)

    # a sum or an extremum: the printer vectorises it when reassociation is allowed
    reductions = {name for name in iterated if reduction_op(prog.statement(name)) in ("sum", "max", "min")}
    deps = isl.UnionMap.empty(view.space)
    for d in view.deps:
        if d.kind == "flow" and d.source in iterated and d.sink in iterated and not (d.source == d.sink and d.source in reductions):
            deps = deps.union(isl.UnionMap.from_map(d.relation))
    if deps.is_empty():
        return False
    return within_budget(lambda: carries(band, k, deps), False, FLAG_BUDGET)  # (unanswered: no jam)
