"""Streaming bands (C): kernels whose tiles would reuse nothing that the cache does not keep anyway.

An elementwise chain (``exp(a + 1)``, bias + GELU + residual) touches each element of its big arrays once,
walking them contiguously along the innermost loop; the only arrays it reads more than once are small
(a bias row, layernorm's gain) and stay in cache in any loop order. Tiling such a band saves no traffic,
and it costs bandwidth: a ``256 x 128`` tile walks 512 contiguous bytes of each row, then jumps a whole
row ahead, which breaks the hardware prefetcher's streams (measured on ``exp(a + 1)`` at 4096², 2
threads: 3.7 ms tiled against 2.9 ms untiled, a plain copy 2.4-2.8 ms). :func:`streams` recognises such a
band, and the mapper leaves it untiled: the OpenMP loop is its outermost parallel member, each thread
gets one contiguous block of rows.

The test is conservative, as the rest of the tiling pass is: every band member follows one iterator of
every statement (no skew or shift) or holds it at a constant (fdtd-2d's boundary row ``ey[0][j]``, fused
into the first row of ``hz``'s update), the innermost member is an iterator, no band lies below (so the
statement's other loops are host loops around the kernel: a stencil's time loop), every access is
contiguous or invariant along the innermost member, and the arrays read again across an outer member
(invariant along it) fit together in half a cache tile. A stencil's neighbour reads do not count as
reuse here: their reuse distance is a row or two, which the cache holds untiled. fdtd-2d at LARGE, 1
thread: tiled 1.31 s, streaming 1.18 s, gcc -O3 on the source 0.94 s.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.cost.traffic import itemsize
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.tiling.microtile import access_coefficients, stride_along


def streams(prog: Program, node: isl.ScheduleNode, sizes: Mapping[str, int], cache_bytes: int, l1_bytes: int) -> bool:
    """Whether the band at ``node`` streams (module docstring), at the concrete ``sizes``; ``cache_bytes``
    is the cache tile's budget, ``l1_bytes`` the L1 data cache of one core."""
    if node.band_n_member() < 2 or _band_below(node):
        return False  # one loop is not tiled anyway; a band below: the statements have inner loops
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    reused: set[str] = set()
    for name in names:
        stmt = prog.statement(name)
        walk = _member_walk(node, stmt)
        if walk is None or walk[-1] is None:
            return False
        its = [k for k in walk if k is not None]
        inner = its[-1]
        for acc in stmt.accesses:
            if not prog.arrays[acc.array].shape:
                continue  # a local scalar: a register
            coeffs = access_coefficients(acc.relation)
            if coeffs is None or stride_along(coeffs, inner) == "other":
                return False
            if any(stride_along(coeffs, d) == "zero" for d in its[:-1]):
                reused.add(acc.array)
    footprint = 0
    for a in reused:
        arr = prog.arrays[a]
        try:
            elements = 1
            for n in arr.concrete_shape(sizes):
                elements *= n
        except KeyError:
            return False
        footprint += elements * itemsize(prog, a)
    if footprint > cache_bytes // 2:
        return False
    window = _neighbour_window(prog, node, names, sizes)
    return window is not None and window <= l1_bytes


def _neighbour_window(prog: Program, node: isl.ScheduleNode, names: list[str], sizes: Mapping[str, int]) -> int | None:
    """Bytes of the slabs (rows, for a 2-d array) the band keeps re-reading across its outer member: 0 when
    no array is accessed at two offsets along it (an elementwise band re-reads nothing); for a stencil, the
    span of each array's offsets (``A[i-1..i+1]``: 3 slabs) times its slab, summed over the arrays. Untiled,
    those slabs must stay in L1 between one outer iteration and the next (heat-3d at N=40: 51 KiB of
    planes, 1.49x gcc tiled against 1.28x untiled; jacobi-2d at N=250: 8 KiB of rows, 0.75x tiled against
    0.99x untiled). ``None`` when an access moves with the outer member in a way this does not model."""
    offsets: dict[str, set[int]] = {}
    slab: dict[str, int] = {}
    for name in names:
        stmt = prog.statement(name)
        walk = _member_walk(node, stmt)
        outer = walk[0] if walk else None
        if outer is None:
            continue  # held at a constant there (a boundary row): no re-reading across the member
        for acc in stmt.accesses:
            arr = prog.arrays[acc.array]
            coeffs = access_coefficients(acc.relation)
            if not arr.shape or coeffs is None:
                continue
            moving = [d for d, (its, _params, _const) in enumerate(coeffs) if its[outer]]
            if not moving:
                continue
            if len(moving) != 1 or coeffs[moving[0]][1] or coeffs[moving[0]][0][outer] != 1:
                return None
            d = moving[0]
            try:
                elements = 1
                for n in arr.concrete_shape(sizes)[d + 1:]:
                    elements *= n
            except KeyError:
                return None
            offsets.setdefault(acc.array, set()).add(coeffs[d][2])
            slab[acc.array] = elements * itemsize(prog, acc.array)
    if all(len(o) < 2 for o in offsets.values()):
        return 0
    return sum((max(o) - min(o) + 1) * slab[a] for a, o in offsets.items())


def _band_below(node: isl.ScheduleNode) -> bool:
    """Whether some band lies below ``node`` (``node`` itself excluded)."""
    found: list[bool] = []

    def visit(n: isl.ScheduleNode) -> bool:
        if n.get_type() == isl.schedule_node_type.band:
            found.append(True)
        return not found

    for k in range(node.n_children()):
        node.child(k).foreach_descendant_top_down(visit)
    return bool(found)


def _member_walk(node: isl.ScheduleNode, stmt: Statement) -> list[int | None] | None:
    """For each band member, the iterator of ``stmt`` it equals, or ``None`` where the member holds the
    statement at a constant; ``None`` overall for anything else (a skew, an offset, a parametric value)."""
    mupa = node.band_get_partial_schedule()
    out: list[int | None] = []
    for m in range(node.band_n_member()):
        pieces: list[isl.PwAff] = []
        mupa.get_union_pw_aff(m).foreach_pw_aff(pieces.append)
        mine = [pa for pa in pieces if pa.get_domain_space().get_tuple_name(isl.dim_type.set) == stmt.name]
        affs: list[isl.Aff] = []
        if len(mine) == 1:
            mine[0].foreach_piece(lambda _s, a: affs.append(a))
        if len(affs) != 1 or affs[0].dim(isl.dim_type.div):
            return None
        aff = affs[0]
        if any(not aff.get_coefficient_val(isl.dim_type.param, p).is_zero() for p in range(aff.dim(isl.dim_type.param))):
            return None
        coeffs = [aff.get_coefficient_val(isl.dim_type.in_, k) for k in range(aff.dim(isl.dim_type.in_))]
        nonzero = [k for k, c in enumerate(coeffs) if not c.is_zero()]
        if not nonzero:
            out.append(None)
            continue
        if len(nonzero) != 1 or not coeffs[nonzero[0]].is_one() or not aff.get_constant_val().is_zero():
            return None
        out.append(nonzero[0])
    its = [k for k in out if k is not None]
    return out if len(set(its)) == len(its) else None
