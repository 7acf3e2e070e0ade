"""Finding one's way in a mapped CUDA kernel's schedule tree, and the small isl maps the data-movement
modules (``promotion.py``, ``copies.py``, ``barriers.py``) build on.

``mapping.py`` lays a CUDA kernel out as ``kernel`` mark -> ``grid`` mark -> tile band -> [a hoisted
reduction tile band, ``promotion.restructure``] -> ``block`` mark -> point band -> rest. Kernels are found
by position (the n-th ``kernel`` mark in a depth-first walk), since every edit returns a new tree.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.schedule.bands import T
from polyfuse.schedule.model import BLOCK_MARK, GRID_MARK, KERNEL_MARK, Kernel


def kernel_marks(tree: isl.Schedule) -> list[isl.ScheduleNode]:
    """The ``kernel`` marks of ``tree`` in depth-first order."""
    out: list[isl.ScheduleNode] = []

    def visit(node: isl.ScheduleNode) -> None:
        if node.get_type() == T.mark and node.mark_get_id().get_name() == KERNEL_MARK:
            out.append(node)
            return
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(tree.get_root())
    return out


def count_kernels(tree: isl.Schedule) -> int:
    return len(kernel_marks(tree))


def kernel_mark(tree: isl.Schedule, n: int) -> isl.ScheduleNode:
    return kernel_marks(tree)[n]


def with_kernels(tree: isl.Schedule, by_name: Mapping[str, Kernel]) -> isl.Schedule:
    """``tree`` with the ``Kernel`` of each kernel mark named in ``by_name`` replaced by the new record."""
    for n in range(count_kernels(tree)):
        mark = kernel_mark(tree, n)
        k = mark.mark_get_id().user
        if getattr(k, "name", None) in by_name:
            tree = mark.delete().insert_mark(isl.Id(KERNEL_MARK, user=by_name[k.name])).get_schedule()
    return tree


def kernel_parts(mark: isl.ScheduleNode) -> tuple[isl.ScheduleNode, isl.ScheduleNode] | None:
    """(tile band, block mark) of a CUDA kernel laid out as ``mapping.py`` does, else None (also for a
    kernel with a register micro-tile: its printer moves its data, ``tiling/cuda_microtile.py``)."""
    if getattr(mark.mark_get_id().user, "microtile", None) is not None:
        return None
    grid = mark.child(0)
    if grid.get_type() != T.mark or grid.mark_get_id().get_name() != GRID_MARK:
        return None
    tile = grid.child(0)
    if tile.get_type() != T.band:
        return None
    block = tile.child(0)
    if block.get_type() == T.band:  # a hoisted reduction tile loop
        block = block.child(0)
    if block.get_type() != T.mark or block.mark_get_id().get_name() != BLOCK_MARK:
        return None
    if block.child(0).get_type() != T.band:
        return None
    return tile, block


def tile_band_above(block: isl.ScheduleNode) -> isl.ScheduleNode:
    """The tile band (below the grid mark) above ``block``."""
    node = block.parent()
    while not (node.parent().get_type() == T.mark and node.parent().mark_get_id().get_name() == GRID_MARK):
        node = node.parent()
    return node


def grid_end(block: isl.ScheduleNode) -> int:
    """The schedule depth just below the tile band: the first ``grid_end`` prefix coordinates name a block."""
    tile = tile_band_above(block)
    return tile.get_schedule_depth() + tile.band_n_member()


def root(node: isl.ScheduleNode) -> isl.ScheduleNode:
    return node.get_schedule().get_root()


def identity(dim: int) -> isl.Map:
    return isl.Map.identity(isl.Space.map_from_set(isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, dim)))


def diag(m: isl.Map) -> isl.Map:
    """``m`` (from an anonymous prefix space to a same-sized named copy) restricted to equal coordinates."""
    for k in range(min(m.dim(isl.dim_type.in_), m.dim(isl.dim_type.out))):
        m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return m


def prefix_map(dom: isl.Set, depth: int) -> isl.Map:
    """instance of ``dom`` -> its first ``depth`` coordinates (the prefix ``p`` of a grafted statement)."""
    m = isl.Map.from_domain_and_range(dom, isl.Set.universe(isl.Space.set_alloc(dom.get_ctx(), 0, depth)).align_params(dom.get_space()))
    return diag(m)
