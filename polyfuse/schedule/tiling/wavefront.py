"""Tile wavefronts on the C target: parallel tiles for a tiled band that has no parallel loop.

A permutable band whose every member carries a dependence (cholesky's fused factor-and-update nest: the
row, column and step loops all carry one) would run as one sequential kernel. Its tiles still leave room for
parallelism: tiling a permutable band keeps every dependence's distance between tiles non-negative in each
tile loop, so two tiles on the same *anti-diagonal* ``t0 + t1 = w`` of the first two tile loops never depend
on each other (a dependence between them would need a positive distance in one of ``t0``, ``t1`` and a
negative one in the other). The band ``(t0, t1, t2, ...)`` becomes a sequential loop over ``w = t0 + t1``
(a host loop: one OpenMP region around it, a barrier per step) above a band ``(t1, t2, ...)`` whose first
member is parallel; ``t0 = w - t1`` is implied. Inside one tile nothing changes, and tiles ordered by the
band before stay ordered, so the schedule is legal whenever tiling was (both checked anyway: the parallel
loop by :func:`polyfuse.analysis.legality.check_parallel` here, the whole tree by the mapper's caller).

This is Pluto's wavefront of tiles. It pays only where a step has work for every thread: at least two
tiles on some diagonal and, per step on average, at least ``STEP_INSTANCES`` statement instances (a
barrier costs a few microseconds). With one thread it is never done (the diagonal order only moves the
tiles away from the source's order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import islpy as isl

from polyfuse.analysis.legality import check_parallel
from polyfuse.errors import IllegalTransformError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import T, prefix_through, single_affs
from polyfuse.schedule.tiling.sizes import tile_band

STEP_INSTANCES = 65536
"""A wavefront step must average at least this many statement instances (16 times the least work the
mapper gives a parallel launch, ``SERIAL_INSTANCES``: a step's tiles are fewer and more uneven than a
parallel loop's iterations)."""


def wavefront(prog: Program, band: isl.ScheduleNode, sizes: Sequence[int], instances: int | None,
              bounds: Callable[[isl.ScheduleNode, int], tuple[int, ...] | None]) -> isl.ScheduleNode | None:
    """The sequential band ``band`` tiled by ``sizes`` and its tile loops turned into ``w = t0 + t1 -> (t1,
    t2, ...)`` with ``t1`` parallel, or ``None`` where that does not pay (module docstring), the band is
    skewed, or it would not be legal. ``instances``: the kernel's statement instances at the given sizes
    (``None``: unknown, then nothing is done); ``bounds(node, k)``: ``(min, max)`` of band member ``k`` at
    those sizes. Returns the node of the parallel band ``(t1, ...)``; its child is the point band."""
    if (instances is None or band.get_type() != T.band or not band.band_get_permutable() or len(sizes) < 2
            or band.band_n_member() < len(sizes) or any(band.band_member_get_coincident(k) for k in range(band.band_n_member()))
            or _skewed(band)):
        return None
    tiles = tile_band(band, sizes)
    first, second = bounds(tiles, 0), bounds(tiles, 1)
    if not first or not second or first[0] == first[1] or second[0] == second[1]:
        return None  # (one tile along either loop: no diagonal holds two tiles)
    steps = (first[1] + second[1]) - (first[0] + second[0]) + 1
    if instances < STEP_INSTANCES * steps:
        return None
    members = tiles.band_get_partial_schedule()
    step = isl.MultiUnionPwAff.from_union_pw_aff(members.get_at(0).add(members.get_at(1)))
    rest = members.drop_dims(isl.dim_type.set, 0, 1)
    node = tiles.delete().insert_partial_schedule(rest)
    node = node.band_set_permutable(1).band_member_set_coincident(0, 1)
    node = node.insert_partial_schedule(step).child(0)
    try:
        check_parallel(prog, node.get_domain(), prefix_through(node, 0), prefix_through(node, 1))
    except IllegalTransformError:
        return None
    return node


def describe(sizes: Sequence[int]) -> str:
    """What ``explain()`` says of a kernel whose tiles run on diagonals."""
    shape = "x".join(map(str, sizes))
    return (f"wavefront: every loop carries a dependence, so its {shape} tiles run diagonal by diagonal (the first two "
            "tile loops' sum in order, one barrier per diagonal), the tiles of a diagonal in parallel")


def _skewed(band: isl.ScheduleNode) -> bool:
    """Whether some member of ``band`` combines two loop iterators of a statement (isl skewed the nest:
    a stencil's time loop fused into its space loops). The point loops of a skewed band have bounds that
    move with the loops around them, so they do not vectorise, and its tiles are uneven: measured on
    fdtd-2d at PolyBench's MEDIUM size, the time-skewed band's wavefront ran at 0.44 of the time step's
    separate parallel loops on two threads. Unknown (a piecewise member) counts as skewed."""
    members = band.band_get_partial_schedule()
    for k in range(band.band_n_member()):
        affs = single_affs(members.get_at(k))
        if affs is None:
            return True
        for aff in affs.values():
            if sum(not aff.get_coefficient_val(isl.dim_type.in_, d).is_zero() for d in range(aff.dim(isl.dim_type.in_))) > 1:
                return True
    return False
