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

Counting is exact: :func:`count_points` uses isl's point scan (``isl_set_count_val``) on the relation,
and, when the scan would visit too many rows, drops the dimensions the others determine, sums polytopes
over their chambers (``chambers.py``), or slices the leading (tile) dimension and counts the first, last
and interior slices separately (see its docstring for the one assumption this last way makes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.cost.chambers import sum_over_chambers
from polyfuse.cost.machine import cache_sizes
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import member_map
from polyfuse.schedule.model import BLOCK_MARK, GRID_MARK, KERNEL_MARK, PARALLEL_MARK, Kernel

T = isl.schedule_node_type

SCAN_ROWS = 20_000
"""Above this many scanned rows :func:`count_points` slices the leading dimension instead of scanning."""


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


# -- counting -------------------------------------------------------------------------------------------


def _drop_params(s: isl.Set) -> isl.Set:
    n = s.dim(isl.dim_type.param)
    return s.project_out(isl.dim_type.param, 0, n) if n else s


def _bounds(s: isl.Set, k: int) -> tuple[int, int]:
    lo, hi = s.dim_min_val(k), s.dim_max_val(k)
    if not (lo.is_int() and hi.is_int()):
        raise ValueError(f"unbounded set while counting footprints: {s}")
    return int(lo.to_python()), int(hi.to_python())


def _rows(s: isl.Set, limit: int) -> int:
    """The rows isl's scan of ``s`` visits (every dimension but the last), or more than ``limit``."""
    rows = 1
    for k in range(s.dim(isl.dim_type.set) - 1):
        lo, hi = _bounds(s, k)
        rows *= hi - lo + 1
        if rows > limit:
            break
    return rows


MAX_PERIOD = 64
"""Slices are summed by residue classes of at most this period; a set whose slice counts may have a longer
period has every slice counted (see :func:`count_points`)."""


def count_points(s: isl.Set) -> int:
    """The exact number of integer points of the bounded, parameter-free set ``s``.

    A set whose dimensions fall into groups that no constraint links (a tile index and the array index it
    bounds; a box) is the product of its groups' counts (:func:`_count_factored`). Otherwise small sets
    are scanned by isl (``count_val``: every dimension but the last is enumerated). Larger ones first lose
    the dimensions the others determine (:func:`_without_determined_dims`: a tile index given by the element
    it covers) and are split into disjoint basic sets (:func:`_disjoint_pieces`); a polytope left is summed
    slice by slice along dimension 0 over its chambers (``chambers.py``: exact, a few slices per chamber).
    Otherwise (integer divisions, too many chambers) it is sliced along dimension 0 (``[lo, hi]``) as
    follows. The count of slice ``t`` is a quasi-polynomial in ``t``: a
    polynomial on each residue class of ``t`` modulo a period that divides the least common multiple
    ``P`` of the other dimensions' coefficients and of the integer divisions' (:func:`_period`; 1 for a
    tile footprint ``32t <= e < 32t + 32``, 3 for the multiples of 3 it holds). The interior slices of
    each residue class are summed by :func:`_sum_slices`: a run whose counts lie on a line at seven
    sample points (its ends, their neighbours, its quartiles and middle: equal counts for
    translation-invariant interior tiles, a line for triangular domains) is taken to lie on that line
    throughout, which is exact where the slice count is concave, as the lengths of a convex set's slices
    are; other runs are bisected (a skewed band: constant in the middle, linear near each end), down to
    counting every slice of short runs. Where ``P`` exceeds :data:`MAX_PERIOD` every slice is counted.
    """
    s = _drop_params(s)
    if s.is_empty():
        return 0
    if s.dim(isl.dim_type.set) <= 1:
        return int(s.count_val().to_python())
    product = _count_factored(s)
    if product is not None:
        return product
    if _rows(s, SCAN_ROWS) <= SCAN_ROWS:
        return int(s.count_val().to_python())
    fewer = _without_determined_dims(s)
    if fewer is not None:
        return count_points(fewer)
    pieces = _disjoint_pieces(s)
    if pieces is not None:
        return sum(count_points(piece) for piece in pieces)
    lo, hi = _bounds(s, 0)
    ctx = s.get_ctx()

    def at(v: int) -> int:
        return count_points(s.fix_val(isl.dim_type.set, 0, isl.Val.int_from_si(ctx, v)).project_out(isl.dim_type.set, 0, 1))

    if hi - lo + 1 > 8:
        exact = sum_over_chambers(s, lo, hi, at)
        if exact is not None:
            return exact
    period = _period(s)
    if hi - lo + 1 <= 8 or period > MAX_PERIOD:
        return sum(at(v) for v in range(lo, hi + 1))
    total = 0
    for r in range(period):
        n = (hi - (lo + r)) // period + 1 if lo + r <= hi else 0
        if n <= 0:
            continue
        first = lo + r

        def term(j: int, first: int = first) -> int:
            return at(first + period * j)

        total += _sum_slices(term, 0, n - 1, term(0), term(n - 1))
    return total


def _without_determined_dims(s: isl.Set) -> isl.Set | None:
    """``s`` with every dimension that the others determine projected out (a tile index given by the
    element it covers, ``t = floor(e / 32)``; an element index equal to an iterator), or ``None`` when no
    dimension is determined. Exact: a dimension is dropped only where the map from the other dimensions to
    it is single-valued, so the projection has exactly as many points; and it leaves fewer dimensions to
    scan or slice (cholesky's footprint at 1024: 20 s sliced, 0.4 s after dropping its two tile indices)."""
    flat = s.flatten() if s.is_wrapping() else s
    dropped = False
    k = flat.dim(isl.dim_type.set) - 1
    while k >= 0 and flat.dim(isl.dim_type.set) > 1:
        if isl.Map.from_domain(flat).move_dims(isl.dim_type.out, 0, isl.dim_type.in_, k, 1).is_single_valued():
            flat, dropped = flat.project_out(isl.dim_type.set, k, 1), True
        k -= 1
    return flat if dropped else None


def _disjoint_pieces(s: isl.Set) -> list[isl.Set] | None:
    """The basic sets of ``s`` made disjoint, each as a set, when there are several (their counts add up,
    and each may lose dimensions the union does not determine: a footprint's ``A[o0, i0]`` part), else
    ``None``."""
    flat = s.flatten() if s.is_wrapping() else s
    if flat.n_basic_set() <= 1:
        return None
    pieces = flat.make_disjoint().get_basic_sets()
    return [isl.Set.from_basic_set(p) for p in pieces] if len(pieces) > 1 else None


def _period(s: isl.Set) -> int:
    """The least common multiple of the absolute coefficients of every dimension but 0 and of every integer
    division in the constraints of ``s``, and of the divisions' denominators: a multiple of the period of
    its slice counts along dimension 0."""
    flat = s.flatten() if s.is_wrapping() else s
    period = 1
    for piece in flat.get_basic_sets():
        n, nd = piece.dim(isl.dim_type.set), piece.dim(isl.dim_type.div)
        values = []
        for c in piece.get_constraints():
            values += [c.get_coefficient_val(isl.dim_type.set, k) for k in range(1, n)]
            values += [c.get_coefficient_val(isl.dim_type.div, d) for d in range(nd)]
        for d in range(nd):
            try:
                values.append(piece.get_div(d).get_denominator_val())
            except isl.Error:
                pass  # an unknown division: its constraints' coefficients count
        for v in values:
            k = abs(int(v.to_python())) if v.is_int() else 1
            if k > 1:
                period = period * k // math.gcd(period, k)
                if period > MAX_PERIOD:
                    return period
    return period


def _sum_slices(at, a: int, z: int, ca: int, cz: int) -> int:
    """``sum(at(v) for v in range(a, z + 1))`` given ``ca = at(a)`` and ``cz = at(z)`` (see
    :func:`count_points`)."""
    n = z - a + 1
    if n <= 2:
        return ca + (cz if n == 2 else 0)
    if n <= 8:
        return ca + cz + sum(at(v) for v in range(a + 1, z))
    mid = (a + z) // 2
    q1, q3 = (a + mid) // 2, (mid + z) // 2
    cm = at(mid)
    if (cz - ca) % (z - a) == 0:
        slope = (cz - ca) // (z - a)
        if cm == ca + slope * (mid - a) and all(at(v) == ca + slope * (v - a) for v in (q1, q3, a + 1, z - 1)):
            return n * (ca + cz) // 2
    return _sum_slices(at, a, mid, ca, cm) + _sum_slices(at, mid + 1, z, at(mid + 1), cz)


def _count_factored(s: isl.Set) -> int | None:
    """The points of ``s`` as a sum over disjoint basic sets of products of independent factors (groups of
    dimensions that no constraint or integer division links, e.g. a tile index and the array index it
    bounds), each counted on its own; ``None`` when some piece does not factor. Exact, and far cheaper than
    scanning or slicing the whole set (a 7-d stencil footprint: 0.5 s scanned, milliseconds factored)."""
    flat = s.flatten() if s.is_wrapping() else s
    pieces = flat.get_basic_sets()
    groups = [_independent_dims(piece) for piece in pieces]
    if any(len(g) == 1 for g in groups):
        return None
    if len(pieces) > 1:
        pieces = flat.make_disjoint().get_basic_sets()
        groups = [_independent_dims(piece) for piece in pieces]
        if any(len(g) == 1 for g in groups):
            return None
    total = 0
    n = flat.dim(isl.dim_type.set)
    for piece, piece_groups in zip(pieces, groups):
        product = 1
        for group in piece_groups:
            factor = isl.Set.from_basic_set(piece)
            for k in reversed(range(n)):
                if k not in group:
                    factor = factor.project_out(isl.dim_type.set, k, 1)
            product *= count_points(factor)
            if product == 0:
                break
        total += product
    return total


def _independent_dims(piece: isl.BasicSet) -> list[set[int]]:
    """The groups of set dimensions of ``piece`` that no constraint links, directly or through an
    integer division (a division links the dimensions of its definition and of the constraints using it)."""
    n, nd = piece.dim(isl.dim_type.set), piece.dim(isl.dim_type.div)
    group = list(range(n + nd))  # set dimensions, then divisions

    def root(k: int) -> int:
        while group[k] != k:
            k = group[k]
        return k

    def link(nodes: list[int]) -> None:
        for k in nodes[1:]:
            group[root(k)] = root(nodes[0])

    for c in piece.get_constraints():
        link([k for k in range(n) if not c.get_coefficient_val(isl.dim_type.set, k).is_zero()]
             + [n + d for d in range(nd) if not c.get_coefficient_val(isl.dim_type.div, d).is_zero()])
    for d in range(nd):
        try:
            div = piece.get_div(d)
        except isl.Error:
            continue  # an unknown division (an existential variable): only its constraints (above) link it
        if div.is_nan():
            continue
        link([n + d] + [k for k in range(n) if not div.get_coefficient_val(isl.dim_type.in_, k).is_zero()]
             + [n + e for e in range(nd) if not div.get_coefficient_val(isl.dim_type.div, e).is_zero()])
    out: dict[int, set[int]] = {}
    for k in range(n):
        out.setdefault(root(k), set()).add(k)
    return list(out.values())


def count_relation(rel: isl.UnionMap) -> int:
    """The number of ``(t, e)`` pairs of a union map, each map counted as its wrapped set."""
    total = 0
    maps: list[isl.Map] = []
    rel.foreach_map(maps.append)
    for m in maps:
        total += count_points(m.wrap())
    return total


def count_set(uset: isl.UnionSet) -> int:
    sets: list[isl.Set] = []
    uset.foreach_set(sets.append)
    return sum(count_points(s) for s in sets)


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
