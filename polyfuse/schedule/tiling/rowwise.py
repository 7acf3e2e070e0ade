"""Row-wise kernels on the C target: one row at a time, in L1, with the row's reductions in registers.

softmax, log-softmax, layernorm, rmsnorm and every row reduction feeding elementwise work are kernels
whose statements all start with the same *row* iterators (``i0`` of ``x[i0, i1]``) and have at most one
more, walked within the row. isl's fused schedule tiles such a kernel as 256 rows x the whole row and
makes three passes over the tile, which does not fit L2, and leaves the per-row maxima and sums in
global temporaries. :func:`rows_first` rebuilds the kernel's tree as::

    band (row members, parallel) -> sequence of groups -> band (the inner iterator) -> sequence of statements

in source order, where consecutive statements share one inner loop when every dependence between them
goes forward along it (``exp(x - max)`` and ``sum += exp`` share one; ``max`` and ``exp(x - max)``
cannot). The inner loops walk the row the way the kernel's schedule already does (:func:`walk_direction`:
deriche's anti-causal pass runs each row from its end), and "forward" is along that walk. Each row's
values then live from one statement to the next inside one iteration of the parallel loop, so contraction
(``privatize.py``) turns the per-row temporaries into scalars, and the C printer gives each inner
reduction loop ``#pragma omp simd reduction`` when ``reassociate`` allows it. ``pf.schedule`` re-checks
the whole tree for legality and keeps the ordinary tiling of every kernel when it fails.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.bands import T, single_affs, statement_filters
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.tiling.accesses import access_coefficients, stride_along

NOT_ROW_WISE = (0, 1)


def row_members(prog: Program, node: isl.ScheduleNode) -> tuple[int, int]:
    """How many leading members of the band at ``node`` are row members (parallel, and equal to the
    statement's iterator of the same position for every statement), and which way the kernel walks the
    row (:func:`walk_direction`). :data:`NOT_ROW_WISE` (no row members) when the kernel is not row-wise:
    fewer than two statements, no reduction within a row, some statement with more than one iterator
    beyond the rows, or inner loops that do not all walk one way."""
    if node.get_type() != T.band:
        return NOT_ROW_WISE
    names = _statements(node)
    stmts = [prog.statement(s) for s in names]
    if len(stmts) < 2:
        return NOT_ROW_WISE
    n = 0
    while n < node.band_n_member() and node.band_member_get_coincident(n) and _identity_member(node, n, names):
        n += 1
    if n == 0 or any(s.depth > n + 1 or s.depth < n for s in stmts):
        return NOT_ROW_WISE
    if not any(s.depth == n + 1 and _invariant_along(s, n) for s in stmts):
        return NOT_ROW_WISE  # no reduction within a row: elementwise kernels keep their 2-D tiles
    if not all(_walks_rows(s, n) for s in stmts if s.depth == n + 1):
        return NOT_ROW_WISE  # a strided read along the row (gemm written as dot products): tiles serve it better
    direction = walk_direction(prog, node, n)
    if direction is None:
        return NOT_ROW_WISE  # the inner loops do not all walk one way along their iterator (skewed, or some reversed)
    return n, direction


def walk_direction(prog: Program, node: isl.ScheduleNode, n_rows: int) -> int | None:
    """How the kernel's schedule at ``node`` walks the inner iterator of every statement that loops within
    a row: ``1`` upwards, ``-1`` downwards (a C loop ``for (j = n - 1; j >= 0; j--)``), ``None`` when the
    statements disagree or one is not walked monotonically along it. The row-wise tree keeps that walk:
    a recurrence along the row (``xp2 = xp1`` read by the next element) holds only in its own direction."""
    subtree = node.get_subtree_schedule_union_map()
    found: set[int] = set()
    for name in _statements(node):
        stmt = prog.statement(name)
        if stmt.depth != n_rows + 1:
            continue
        dom = isl.UnionSet.from_set(stmt.domain)
        step = isl.UnionMap.from_map(_next_along(stmt, n_rows)).intersect_domain(dom).intersect_range(dom)
        if step.is_empty():
            continue  # at most one element a row: either way
        sched = subtree.intersect_domain(dom)
        ahead = sched.lex_lt_union_map(sched)
        if step.is_subset(ahead):
            found.add(1)
        elif step.reverse().is_subset(ahead):
            found.add(-1)
        else:
            return None
    if len(found) > 1:
        return None
    return found.pop() if found else 1


def _next_along(stmt, k: int) -> isl.Map:
    """``{ S[.., x_k, ..] -> S[.., x_k + 1, ..] }``: each instance of ``stmt`` to the next along iterator ``k``."""
    space = stmt.domain.get_space()
    step = isl.Map.from_domain_and_range(isl.Set.universe(space), isl.Set.universe(space))
    mspace = step.get_space()
    for m in range(stmt.depth):
        c = _eq(mspace, m)
        if m == k:  # out_k = in_k + 1
            c = c.set_constant_val(isl.Val.int_from_si(mspace.get_ctx(), 1))
        step = step.add_constraint(c)
    return step


def rows_first(prog: Program, node: isl.ScheduleNode, n_rows: int, direction: int) -> isl.ScheduleNode:
    """The kernel band at ``node`` rebuilt as described in the module docstring, its inner loops walked
    upwards (``direction`` 1) or downwards (-1), as :func:`row_members` found; returns the row band."""
    names = sorted(_statements(node), key=lambda s: prog.statements.index(prog.statement(s)))
    groups = _groups(prog, _hoist_row_statements(prog, names, n_rows), n_rows, direction)
    if n_rows < node.band_n_member():
        node = node.band_split(n_rows)
    if node.n_children() == 1 and node.child(0).get_type() != T.leaf:
        node = node.child(0).cut().parent()
    node = node.child(0).insert_sequence(statement_filters(prog, groups))
    for k, group in enumerate(groups):
        child = node.child(k).child(0)
        if prog.statement(group[0]).depth == n_rows + 1:
            child = child.insert_partial_schedule(_inner_member(prog, group, n_rows, direction))
            child = child.band_set_permutable(1)
            if len(group) > 1:
                child = child.child(0).insert_sequence(statement_filters(prog, [[s] for s in group])).parent()
            node = child.parent().parent()
        elif len(group) > 1:
            node = child.insert_sequence(statement_filters(prog, [[s] for s in group])).parent().parent()
        else:
            node = child.parent().parent()
    return node.parent()


def _hoist_row_statements(prog: Program, names: Sequence[str], n_rows: int) -> list[str]:
    """Source order, with each statement that has no inner loop (an accumulator's initialisation) moved
    up to just after the last statement it depends on, so that it does not split two inner loops that
    could be fused (``sum = 0`` between ``y = exp(x - max)`` and ``sum += y``)."""
    order: list[str] = []
    for s in names:
        if not _shallow(prog.statement(s), n_rows):
            order.append(s)
            continue
        linked = {d.source for d in dependences_of(prog) if d.sink == s} | {d.sink for d in dependences_of(prog) if d.source == s}
        last = max((k for k, t in enumerate(order) if t in linked), default=-1)
        order.insert(last + 1, s)
    return order


def _groups(prog: Program, names: Sequence[str], n_rows: int, direction: int) -> list[list[str]]:
    """Consecutive statements of the same depth, split where fusing the inner loop (walked upwards for
    ``direction`` 1, downwards for -1) would run a sink before its source."""
    groups: list[list[str]] = []

    def kind(name: str) -> tuple[bool, int]:
        stmt = prog.statement(name)
        return _shallow(stmt, n_rows), stmt.depth

    for s in names:
        if groups and kind(groups[-1][0]) == kind(s) and all(_fusable(prog, a, s, n_rows, direction) for a in groups[-1]):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _shallow(stmt, n_rows: int) -> bool:
    """Whether ``stmt`` runs once per row: no iterator beyond the rows, or one fixed to a single value
    (``keepdims`` reductions write ``m[i, 0]``)."""
    if stmt.depth == n_rows:
        return True
    val = stmt.domain.plain_get_val_if_fixed(isl.dim_type.set, n_rows)
    return not val.is_nan()


def _fusable(prog: Program, a: str, b: str, n_rows: int, direction: int) -> bool:
    depth = prog.statement(a).depth
    if depth == n_rows:
        return True  # no inner loop: statements run in source order within the row
    for d in dependences_of(prog):
        if {d.source, d.sink} != {a, b} or d.source == d.sink:
            continue
        rel = d.relation
        space = rel.get_space()
        backward = isl.Map.universe(space)
        for m in range(n_rows):
            backward = backward.add_constraint(_eq(space, m))
        backward = backward.add_constraint(_later(space, n_rows, direction))  # the source visited after the sink
        if not rel.intersect(backward).is_empty():
            return False
    return True


def _eq(space: isl.Space, m: int) -> isl.Constraint:
    c = isl.Constraint.equality_alloc(isl.LocalSpace.from_space(space))
    return c.set_coefficient_val(isl.dim_type.in_, m, 1).set_coefficient_val(isl.dim_type.out, m, -1)


def _later(space: isl.Space, k: int, direction: int) -> isl.Constraint:
    c = isl.Constraint.inequality_alloc(isl.LocalSpace.from_space(space))  # direction * (in_k - out_k) - 1 >= 0
    c = c.set_coefficient_val(isl.dim_type.in_, k, direction).set_coefficient_val(isl.dim_type.out, k, -direction)
    return c.set_constant_val(isl.Val.int_from_si(space.get_ctx(), -1))


def _inner_member(prog: Program, group: Sequence[str], n_rows: int, direction: int) -> isl.MultiUnionPwAff:
    params = prog.context.get_space().get_var_names(isl.dim_type.param)
    sign = "" if direction > 0 else "-"
    pieces = []
    for s in group:
        its = prog.statement(s).iterators
        pieces.append(f"{s}[{', '.join(its)}] -> [({sign}{its[n_rows]})]")
    prefix = f"[{', '.join(params)}] -> " if params else ""  # (isl reads "[] -> ..." differently)
    return isl.MultiUnionPwAff(f"{prefix}[{{ {'; '.join(pieces)} }}]")


def _invariant_along(stmt, k: int) -> bool:
    """Whether the element ``stmt`` writes does not move with its iterator ``k`` (a reduction along it)."""
    coeffs = access_coefficients(stmt.write.relation)
    return coeffs is not None and stmt.depth > k and not any(c[0][k] for c in coeffs)


def _walks_rows(stmt, k: int) -> bool:
    """Whether every access of ``stmt`` is contiguous or invariant along its iterator ``k``."""
    for acc in stmt.accesses:
        coeffs = access_coefficients(acc.relation)
        if coeffs is None or stride_along(coeffs, k) == "other":
            return False
    return True


def _identity_member(node: isl.ScheduleNode, m: int, names: Sequence[str]) -> bool:
    affs = single_affs(node.band_get_partial_schedule().get_union_pw_aff(m))
    if affs is None or len(affs) != len(names):
        return False
    for aff in affs.values():
        if aff.dim(isl.dim_type.div) or not aff.get_constant_val().is_zero():
            return False
        for k in range(aff.dim(isl.dim_type.in_)):
            want = 1 if k == m else 0
            if aff.get_coefficient_val(isl.dim_type.in_, k).to_python() != want:
                return False
        if any(not aff.get_coefficient_val(isl.dim_type.param, p).is_zero() for p in range(aff.dim(isl.dim_type.param))):
            return False
    return True


def _statements(node: isl.ScheduleNode) -> list[str]:
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    return names
