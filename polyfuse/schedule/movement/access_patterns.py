"""How the threads of a CUDA block walk an array, read off the schedule with isl (for ``shared.py``).

A kernel's instances are timed by ``time: instance -> (p, t, s)``: the prefix ``p`` at the ``block`` mark,
the thread coordinates ``t`` (the point band, ``threadIdx.x`` last) and the schedule ``s`` of the
sequential rest of the kernel (the subtree below the point band). Two instances with the same ``p`` and
``s`` whose ``t`` differ by one in the last coordinate are what neighbouring threads of a warp execute
together.

* :func:`walks_outer_dim`: whether neighbouring threads (``threadIdx.x`` and ``threadIdx.x + 1``) touch
  elements that differ in some dimension other than the innermost (a transposed access: consecutive
  threads do not touch consecutive addresses, so global accesses are not coalesced and, in a shared buffer
  of even row length, they hit the same banks). Accesses that stay on one element (a broadcast) or move
  along the innermost dimension are not.
* :func:`live_in_reads`: the elements a tile reads before (or without) writing them itself; only those
  need to be copied into a shared buffer of an array the kernel writes.
"""

from __future__ import annotations

import islpy as isl


def timing(thread: isl.UnionMap, rest: isl.ScheduleNode) -> isl.UnionMap:
    """``instance -> (p, t, s)`` for the instances of ``thread`` (``instance -> (p, t)``), ``rest`` the node
    below the point band (its subtree schedule gives ``s``; nothing when it is a leaf)."""
    if rest.get_type() == isl.schedule_node_type.leaf:
        return thread
    return thread.flat_range_product(rest.get_subtree_schedule_union_map().intersect_domain(thread.domain()))


def walks_outer_dim(access: isl.UnionMap, time: isl.UnionMap, x: int, context: isl.Set) -> bool:
    """Whether two instances at the same ``p`` and ``s``, on threads ``x`` and ``x + 1`` (``x`` the
    position of ``threadIdx.x`` in ``time``), touch elements of ``access`` that differ in a dimension
    other than the innermost one."""
    timed = time.reverse().apply_range(access).intersect_params(context)  # time -> element
    if timed.is_empty():
        return False
    step = _next_thread(time, x)
    pairs = timed.reverse().apply_range(step).apply_range(timed)  # element -> neighbour's element
    found = []

    def check(deltas: isl.Set) -> None:
        for d in range(deltas.dim(isl.dim_type.set) - 1):
            one = isl.Val.int_from_si(deltas.get_ctx(), 1)
            if not deltas.lower_bound_val(isl.dim_type.set, d, one).is_empty() or not deltas.upper_bound_val(
                    isl.dim_type.set, d, one.neg()).is_empty():
                found.append(d)
                return

    pairs.deltas().foreach_set(check)
    return bool(found)


def live_in_reads(reads: list[isl.UnionMap], writes: isl.UnionMap | None, time: isl.UnionMap,
                  prefix: isl.UnionMap) -> isl.UnionMap | None:
    """``p -> e``: the elements read in tile ``p`` (``prefix``: instance -> ``p``) by some read (one map per
    access, instance -> element) that no earlier instance (by ``time``) of the same tile wrote. ``None``
    when there is none."""
    out = None
    for acc in reads:
        live = acc
        if writes is not None:
            same = acc.apply_range(writes.reverse())  # read -> write of the same element
            same = same.intersect(prefix.apply_range(prefix.reverse()))  # ... in the same tile
            earlier = same.intersect(time.lex_gt_union_map(time))  # ... before the read
            live = acc.subtract_domain(earlier.domain())
        m = prefix.reverse().apply_range(live)
        if not m.is_empty():
            out = m if out is None else out.union(m)
    return out.coalesce() if out is not None else None


def _next_thread(time: isl.UnionMap, x: int) -> isl.UnionMap:
    """``{ (.., t_x, ..) -> (.., t_x + 1, ..) }`` on the time space (every other coordinate equal)."""
    out = None
    for space in _range_spaces(time):
        m = isl.Map.universe(isl.Space.map_from_set(space))
        for k in range(space.dim(isl.dim_type.set)):
            if k != x:
                m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
        c = isl.Constraint.equality_alloc(isl.LocalSpace.from_space(m.get_space()))
        c = c.set_coefficient_val(isl.dim_type.out, x, isl.Val.int_from_si(m.get_ctx(), 1))
        c = c.set_coefficient_val(isl.dim_type.in_, x, isl.Val.int_from_si(m.get_ctx(), -1))
        c = c.set_constant_val(isl.Val.int_from_si(m.get_ctx(), -1))
        m = isl.UnionMap.from_map(m.add_constraint(c))
        out = m if out is None else out.union(m)
    return out


def _range_spaces(time: isl.UnionMap) -> list[isl.Space]:
    spaces: list[isl.Space] = []
    time.range().foreach_set(lambda s: spaces.append(s.get_space()))
    return spaces
