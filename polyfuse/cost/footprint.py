"""Per-tile footprints of a kernel's accesses, counted exactly at concrete sizes.

Definitions (the whole model; ``traffic.py`` sums what this module counts):

* A kernel's **tile map** ``Tm`` sends each statement instance to its *tile*: the schedule prefix above
  the kernel (host loops, sequence positions) followed by the kernel's tile loops, i.e. the members of the
  band that tiling produced (``Kernel.tile_sizes``; CUDA: the ``grid`` band, one tile = one thread block;
  C: the outer band of ``tile_band``). A kernel without tile loops (sequential, or ``tile=None`` on C) is
  one tile per execution (per iteration of the host loops around it).
* A read of element ``e`` by instance ``r`` is **covered** when the value it reads (its flow-dependence
  source ``w``, the last writer of ``e`` before ``r``) was written in the same tile: ``Tm(w) = Tm(r)``.
  Covered reads move no global bytes (the value is still in registers, shared memory or cache).
* The **read footprint** of array ``X`` in tile ``t`` is the set of elements read by uncovered reads of
  ``X`` in ``t``; the **write footprint** the set of elements written (``write`` or ``update``) in ``t``.
  Each element of a footprint moves once per tile, whatever the number of accesses to it in the tile
  (reuse inside a tile is counted once: the tile's data is staged once, as a promoted schedule does).
* The traffic of ``X`` in the kernel is the sum over tiles of the footprint sizes, i.e. the number of
  points of the relation ``{ t -> e }``; partial (boundary) tiles count only the elements they touch.
  One exception, the **broadcast operand**: an array the kernel only reads, whose read footprint is the
  same for every tile of a launch and fits in half of a core's L2, is counted once per launch (the
  tiles after the first find it in the cache they share: a layernorm's gain and bias).

Counting is exact (``counting.py``): isl's point scan (``isl_set_count_val``) on what is small, and,
when the scan would visit too many rows, the set taken apart into independent factors, pieces that do not
overlap and the dimensions the others do not determine, polytopes summed over their chambers
(``chambers.py``), or the leading (tile) dimension sliced, runs of slices summed (see
``counting.count_points`` for the one assumption this last way makes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.cost.counting import count_relation, count_set
from polyfuse.cost.machine import cache_sizes
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import member_map
from polyfuse.schedule.model import BLOCK_MARK, GRID_MARK, KERNEL_MARK, PARALLEL_MARK, Kernel

T = isl.schedule_node_type


def fixed_params(prog: Program, params: Mapping[str, int]) -> isl.Set:
    """The parameter set with every size of ``params`` fixed (and the program's assumptions)."""
    ctx = prog.context
    space = ctx.get_space()
    fixed = isl.Set.universe(space)
    for k, p in enumerate(space.get_var_names(isl.dim_type.param)):
        if p in params:
            fixed = fixed.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(ctx.get_ctx(), int(params[p])))
    return fixed & ctx


def missing_params(prog: Program, params: Mapping[str, int]) -> list[str]:
    return [p for p in prog.params if p not in params]


# -- kernels and their tiles ----------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelRegion:
    """A kernel of a schedule tree: its statement instances and their tile map (see the module docstring)."""

    kernel: Kernel
    domain: isl.UnionSet
    tile_map: isl.UnionMap
    tile_dims: int = 0  # the kernel's tile loops: the last dimensions of ``tile_map``'s range


def kernel_regions(tree: isl.Schedule, kernels: Iterable[Kernel]) -> list[KernelRegion]:
    """One :class:`KernelRegion` per kernel mark of ``tree``, in tree order."""
    by_name = {k.name: k for k in kernels}
    out: list[KernelRegion] = []

    def walk(node: isl.ScheduleNode) -> None:
        if node.get_type() == T.mark and node.mark_get_id().get_name() == KERNEL_MARK:
            kernel = node.mark_get_id().user
            kernel = by_name.get(getattr(kernel, "name", ""), kernel)
            out.append(region_below(node.child(0), kernel))
            return
        for k in range(node.n_children()):
            walk(node.child(k))

    walk(tree.get_root())
    return out


def region_below(node: isl.ScheduleNode, kernel: Kernel) -> KernelRegion:
    """The region of ``kernel`` whose subtree starts at ``node`` (just below its kernel mark)."""
    while node.get_type() == T.mark and node.mark_get_id().get_name() in (PARALLEL_MARK, GRID_MARK, BLOCK_MARK):
        node = node.child(0)
    domain = node.get_domain()
    n = len(getattr(kernel, "tile_sizes", ()) or ())
    n = min(n, node.band_n_member()) if node.get_type() == T.band else 0
    return KernelRegion(kernel, domain, tile_map_at(node, n), n)


def tile_map_at(node: isl.ScheduleNode, n: int) -> isl.UnionMap:
    """The prefix schedule above ``node`` followed by the first ``n`` members of the band at ``node``."""
    tm = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    if n and node.get_type() == T.band:
        for k in range(min(n, node.band_n_member())):
            tm = tm.flat_range_product(member_map(node, k))
    return tm


# -- footprints -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayCount:
    """Elements of one array moved by one kernel: summed over tiles (``read``, ``write``)."""

    read: int
    write: int
    read_accesses: int = 0  # (instance, element) pairs of uncovered reads: > read when the tile reuses data


def _restrict_array(umap: isl.UnionMap, array: str) -> isl.UnionMap:
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    out = isl.UnionMap.empty(umap.get_space())
    for m in maps:
        if m.get_tuple_name(isl.dim_type.out) == array:
            out = out.union(isl.UnionMap.from_map(m))
    return out


def accesses_in(prog: Program, kinds: tuple[str, ...], array: str, statements: frozenset[str] | None = None) -> isl.UnionMap:
    """The accesses of ``kinds`` to ``array`` (by the ``statements`` named, default all) as one union map."""
    out = isl.UnionMap.empty(prog.context.get_space())
    for s in prog.statements:
        if statements is not None and s.name not in statements:
            continue
        for a in s.accesses:
            if a.array == array and a.kind in kinds:
                out = out.union(isl.UnionMap.from_map(a.relation))
    return out


def flow_of(prog: Program, array: str, deps, statements: frozenset[str] | None = None) -> isl.UnionMap:
    """The flow dependences through ``array`` (between the ``statements`` named, default all)."""
    out = isl.UnionMap.empty(prog.context.get_space())
    for d in deps:
        if d.kind == "flow" and d.array == array and (statements is None or {d.source, d.sink} <= statements):
            out = out.union(isl.UnionMap.from_map(d.relation))
    return out


def _statement_names(domain: isl.UnionSet) -> frozenset[str]:
    names: list[str] = []
    domain.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return frozenset(names)


def region_counts(
    prog: Program,
    domain: isl.UnionSet,
    tile_map: isl.UnionMap,
    fixed: isl.Set,
    deps,
    skip: frozenset[str] = frozenset(),
    with_accesses: bool = False,
    tile_dims: int = 0,
) -> tuple[dict[str, ArrayCount], int]:
    """Per array (not in ``skip``): elements read and written summed over the tiles of one kernel region,
    and the number of tiles. ``fixed`` fixes every size (:func:`fixed_params`).

    Counted once per region and program: the tile search, the variants of ``pf.schedule`` and smart
    fusion's comparison ask about the same kernels again (the key is the region as isl prints it)."""
    memo = prog._cache.setdefault("region_counts", {})
    key = (domain.to_str(), tile_map.to_str(), fixed.to_str(), id(deps), frozenset(skip), with_accesses, tile_dims)
    if key not in memo:
        memo[key] = _region_counts(prog, domain, tile_map, fixed, deps, skip, with_accesses, tile_dims)
    counts, tiles = memo[key]
    return dict(counts), tiles


def _region_counts(prog: Program, domain: isl.UnionSet, tile_map: isl.UnionMap, fixed: isl.Set, deps,
                   skip: frozenset[str], with_accesses: bool, tile_dims: int) -> tuple[dict[str, ArrayCount], int]:
    domain = domain.intersect_params(fixed)
    tm = tile_map.intersect_domain(domain).intersect_params(fixed)
    inside = _statement_names(domain)
    touched = {a.array for s in prog.statements if s.name in inside for a in s.accesses}
    same_tile = None
    out: dict[str, ArrayCount] = {}
    for name in prog.arrays:
        if name in skip or name not in touched:
            continue
        reads = accesses_in(prog, ("read", "update"), name, inside).intersect_domain(domain).intersect_params(fixed)
        writes = accesses_in(prog, ("write", "update"), name, inside).intersect_domain(domain).intersect_params(fixed)
        if reads.is_empty() and writes.is_empty():
            continue
        exposed = reads
        local = flow_of(prog, name, deps, inside).intersect_params(fixed).intersect_domain(domain).intersect_range(domain)
        if not local.is_empty() and not reads.is_empty():
            if same_tile is None:
                same_tile = tm.apply_range(tm.reverse())
            covered = local.intersect(same_tile).reverse().apply_range(writes).intersect(reads)
            exposed = reads.subtract(covered)
        per_tile = tm.reverse().apply_range(exposed)
        r = _broadcast_count(per_tile, tile_dims, prog.arrays[name].dtype.bits // 8) if writes.is_empty() else None
        r = count_relation(per_tile) if r is None else r
        w = count_relation(tm.reverse().apply_range(writes))
        out[name] = ArrayCount(r, w, count_relation(exposed) if with_accesses else 0)
    tiles = count_set(tm.range()) if not domain.is_empty() else 0
    return out, tiles


def _broadcast_count(per_tile: isl.UnionMap, tile_dims: int, itemsize: int) -> int | None:
    """Elements of a read-only array summed over the launches of a kernel, when every tile of a launch
    reads the same ones (a layernorm's gain and bias, a gemv's vector) and they fit in half of a core's L2
    (``cost/machine.py``): the first tile brings them into the cache that the launch's other tiles share (a
    GPU's L2, a CPU's L2 or L3), so only that read reaches memory. Across launches nothing is assumed: the
    kernels between them may evict or rewrite the array. ``None`` when the rule does not apply.

    ``per_tile`` maps tiles (the launch's prefix, then ``tile_dims`` tile loops) to the elements read."""
    maps = per_tile.get_map_list()
    if tile_dims <= 0 or maps.n_map() != 1:
        return None
    m = maps.get_at(0)
    d = m.dim(isl.dim_type.in_)
    if d < tile_dims:
        return None
    launch = m.project_out(isl.dim_type.in_, d - tile_dims, tile_dims)  # prefix -> elements read in the launch
    to_prefix = isl.Map.identity(m.get_space().domain().map_from_set()).project_out(isl.dim_type.out, d - tile_dims, tile_dims)
    if not to_prefix.intersect_domain(m.domain()).apply_range(launch).is_subset(m):
        return None  # some tile reads less than the whole launch does
    if count_set(isl.UnionSet(launch.range())) * itemsize > cache_sizes()[1] // 2:
        return None
    return count_relation(isl.UnionMap(launch))


def compulsory_counts(prog: Program, fixed: isl.Set, deps) -> dict[str, ArrayCount]:
    """Per array crossing the program boundary: the distinct elements whose incoming value is read
    (reads with no flow source in the program), and, for outputs, the distinct elements written."""
    out: dict[str, ArrayCount] = {}
    for name, arr in prog.arrays.items():
        if arr.role == "temp":
            continue
        reads = accesses_in(prog, ("read", "update"), name).intersect_params(fixed)
        writes = accesses_in(prog, ("write", "update"), name).intersect_params(fixed)
        flow = flow_of(prog, name, deps).intersect_params(fixed)
        covered = flow.reverse().apply_range(writes).intersect(reads)
        r = count_set(reads.subtract(covered).range())
        w = count_set(writes.range()) if arr.role in ("output", "inout") else 0
        if r or w:
            out[name] = ArrayCount(r, w)
    return out
