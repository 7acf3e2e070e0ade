"""Modelled traffic with the reuse that a host loop keeps in the cache: for comparisons on one thread.

``traffic.py`` counts every kernel launch on its own, each tile from memory. Around a host loop that is
pessimistic when every iteration touches little data: what one iteration's kernels read is still in the
cache for the next kernel of the iteration and for the next iterations. atax in its source order is the
case that matters: ``for i: tmp[i] = A[i] . x; y += A[i] * tmp[i]`` reads row ``A[i]`` in one kernel and
again in the next, and ``x`` and ``y`` (17 KB each at PolyBench's LARGE size) in every iteration. Per
launch that is 160 MB; the cache makes it the 32 MB of ``A`` once, half of what the two parallel passes
over ``A`` that ``"smart"`` chooses move (64 MB, correctly modelled), and measured on one thread the
source order ran in 2.7 ms against 4.8 ms.

The rule: a host loop whose iterations touch on average at most half of a core's L2 (all kernels of an
iteration together, each element once per iteration, values produced inside the iteration not read from
memory) moves the distinct data of the whole loop, once per iteration of the host loops around it. Any
other host loop is looked into; a kernel outside such a loop is counted as ``traffic.py`` counts it.

Only the one-thread comparisons use this count (``schedule/fusion/steps.py``): with several threads a
host loop around small parallel kernels pays a barrier per iteration, which bytes do not show, and the
ratings of every other decision stay those of ``traffic.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import islpy as isl

from polyfuse.cost.footprint import fixed_params, region_below, region_counts, tile_map_at
from polyfuse.cost.machine import cache_sizes
from polyfuse.cost.traffic import itemsize
from polyfuse.ir.program import Program
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.model import KERNEL_MARK, Kernel

T = isl.schedule_node_type


def host_reuse_bytes(prog: Program, tree: isl.Schedule, kernels: Iterable[Kernel], contracted: frozenset[str],
                     params: Mapping[str, int], cache_bytes: int | None = None) -> int:
    """Modelled bytes of a schedule tree at ``params`` under the module docstring's rule; ``cache_bytes``
    (default: half of a core's L2) is what one iteration of a host loop may touch on average."""
    limit = cache_sizes()[1] // 2 if cache_bytes is None else cache_bytes
    fixed = fixed_params(prog, params)
    deps = dependences_of(prog)
    by_name = {k.name: k for k in kernels}

    def moved(domain: isl.UnionSet, tile_map: isl.UnionMap, tile_dims: int = 0) -> tuple[int, int]:
        counts, tiles = region_counts(prog, domain, tile_map, fixed, deps, frozenset(contracted), tile_dims=tile_dims)
        return sum((c.read + c.write) * itemsize(prog, a) for a, c in counts.items()), tiles

    def walk(node: isl.ScheduleNode) -> int:
        kind = node.get_type()
        if kind == T.mark and node.mark_get_id().get_name() == KERNEL_MARK:
            kernel = node.mark_get_id().user
            region = region_below(node.child(0), by_name.get(getattr(kernel, "name", ""), kernel))
            return moved(region.domain, region.tile_map, region.tile_dims)[0]
        if kind == T.band:  # above every kernel mark: a host loop
            domain = node.get_domain()
            per_iteration, iterations = moved(domain, tile_map_at(node, node.band_n_member()))
            if iterations and per_iteration <= limit * iterations:
                return moved(domain, tile_map_at(node, 0))[0]
        return sum(walk(node.child(k)) for k in range(node.n_children()))

    return walk(tree.get_root())


def has_host_loop(tree: isl.Schedule) -> bool:
    """Whether some band of ``tree`` lies above a kernel mark (a loop run on the host around kernels)."""

    def walk(node: isl.ScheduleNode) -> bool:
        kind = node.get_type()
        if kind == T.mark and node.mark_get_id().get_name() == KERNEL_MARK:
            return False
        if kind == T.band:
            return True
        return any(walk(node.child(k)) for k in range(node.n_children()))

    return walk(tree.get_root())
