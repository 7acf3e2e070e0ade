"""Per-tile footprint boxes: the constant-size box a shared buffer holds for one tile.

For a footprint ``F: p -> e`` (tile prefix -> array elements), :func:`fixed_box` finds
``off(p) <= e < off(p) + shape`` containing ``F(p)`` for every ``p``, ``off`` affine in ``p`` and ``shape``
constant; :func:`box_map` turns it back into the relation ``{ p -> e }`` the copy statement runs over.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl


def fixed_box(foot: isl.Map) -> tuple[isl.MultiAff, tuple[int, ...]] | None:
    """A box ``off(p) <= e < off(p) + shape`` holding ``foot(p)`` for every ``p``, with ``off`` affine and
    ``shape`` constant, or None. (What ``get_range_simple_fixed_box_hull`` computes; this islpy does not
    expose the box's offset and size, so each dimension's offset is chosen among the affine pieces of its
    lower bound, the one giving the smallest constant extent.)"""
    wrapped = foot.wrap()
    ls = isl.LocalSpace.from_space(wrapped.get_space())
    to_p = isl.MultiAff.domain_map(foot.get_space())
    depth = foot.dim(isl.dim_type.in_)
    affs, shape = [], []
    for d in range(foot.dim(isl.dim_type.out)):
        e = isl.Aff.var_on_domain(ls, isl.dim_type.set, depth + d)
        best = None
        for _, cand in foot.dim_min(d).get_pieces():
            diff = e - cand.pullback_multi_aff(to_p)
            lo, hi = wrapped.min_val(diff), wrapped.max_val(diff)
            if not (lo.is_int() and hi.is_int()) or lo.to_python() < 0:
                continue
            size = int(hi.to_python()) + 1
            if best is None or size < best[1]:
                best = (cand, size)
        if best is None:
            return None
        affs.append(best[0])
        shape.append(best[1])
    space = foot.get_space()
    lst = isl.AffList.alloc(foot.get_ctx(), len(affs))
    for a in affs:
        lst = lst.add(a)
    return isl.MultiAff.from_aff_list(space, lst), tuple(shape)


def box_map(prefixes: isl.Set, offset: isl.MultiAff, shape: Sequence[int]) -> isl.Map:
    """``{ p -> e : off(p) <= e < off(p) + shape }`` for ``p`` in ``prefixes``."""
    cube = isl.Set.universe(offset.get_space().range())
    for d, s in enumerate(shape):
        cube = cube.lower_bound_val(isl.dim_type.set, d, isl.Val.int_from_si(cube.get_ctx(), 0))
        cube = cube.upper_bound_val(isl.dim_type.set, d, isl.Val.int_from_si(cube.get_ctx(), s - 1))
    off = isl.Map.from_multi_aff(offset).intersect_domain(prefixes)
    return off.sum(isl.Map.from_domain_and_range(prefixes, cube))


def volume(shape: Sequence[int]) -> int:
    """Number of elements of a box of ``shape``."""
    v = 1
    for s in shape:
        v *= s
    return v
