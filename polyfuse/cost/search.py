"""Tile-size selection by the traffic model (``tile="auto"`` with concrete ``params``).

For each kernel band the mapper is about to tile, :class:`TileSearch` evaluates candidate tile shapes
with the traffic model of ``footprint.py`` (the band tiled, the tiles' footprints counted at the sizes)
and returns the feasible shape with the least modelled traffic.

CUDA (the mapped members, innermost = ``threadIdx.x``): powers of two per member, the x size a multiple
of 32 (or the extent of x rounded up to a power of two when that is smaller), with

* ``threads = prod(sizes) <= max_threads`` (1024) and at least one warp when the extents allow it;
* staged shared memory ``<= shared_memory`` (default 48 KiB, ``pf.schedule(..., shared_memory=...)``):
  the arrays a tile *reuses* (fewer footprint elements than uncovered reads) are staged, a chunk of
  ``stage_chunk`` (32) sequential iterations per thread at a time, so the estimate is
  ``sum_X footprint_X(tile) * itemsize_X * min(1, 32 / iterations_per_thread)``;
* enough blocks to fill ``sms`` (132) multiprocessors, or, for a launch of fewer than ``sms`` times
  ``block_work`` (256) statement instances, one block per ``block_work`` instances (a problem too small to
  fill the machine is not forced into one-warp blocks); shapes short of that rank by their shortfall.

The CUDA objective is *sector bytes* (``coalescing.py``): each array's exact bytes times the sectors a warp
moves per useful byte. An array the promotion pass stages in shared memory (one the tile reuses, within the
budget; or one whose accesses are transposed across ``threadIdx.x`` and whose box rows are at least one
32-byte sector wide, ``schedule/movement/shared.py``, when its box fits what is left of the budget) moves by
coalesced copy loops, one box row at a time; an array left in global memory pays the sectors each warp
instruction touches (a transposed access: 32 sectors for 32 elements, 8x its bytes in f32). So a transpose
gets a 2-D tile whose transposed side is staged, not a 1-row tile with uncoalesced stores. Ties go to the
fewer exact bytes, then (small problems) to more blocks, up to ``sms``.

C (the tiled members of the outermost permutable band, at most three searched; more keep 32): sizes in
8..256 (powers of two), the average footprint of a tile (all arrays, read and written) within
``cache_bytes`` (default 256 KiB, ``pf.schedule(..., cache_bytes=...)``), and at least ``c_parallelism``
(16) tiles when the sizes allow it. The search is coordinate descent from the
default 32s (two sweeps over the members).

Remaining ties are broken towards the larger tile (fewer, fuller blocks), then towards the default. Without params
the fixed defaults of ``tiling.py`` are kept (the mapper does not call the search).

Every feasible shape evaluated for a band is kept in ``TileSearch.ranked``, best first, so autotuning
(``pf.compile(..., tune=K)``, ``runtime/tuning.py``) can time the model's K best: :func:`ranked_tiles`
turns those rankings into whole-program tile specifications.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.cost.coalescing import LINE_BYTES, AccessSteps, access_steps, array_factor, band_time
from polyfuse.cost.footprint import count_set, fixed_params, region_counts, tile_map_at
from polyfuse.cost.traffic import itemsize
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import member_map, within_budget
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.movement.footprint_box import fixed_box, volume
from polyfuse.schedule.movement.shared import SECTOR_BYTES
from polyfuse.schedule.tiling.sizes import tile_band


@dataclass(frozen=True)
class Limits:
    """Device limits the search respects (CUDA defaults: an H100-class GPU)."""

    max_threads: int = 1024
    shared_memory: int = 49152
    sms: int = 132
    stage_chunk: int = 32
    block_work: int = 256
    cache_bytes: int = 262144
    c_parallelism: int = 16
    threads: int | None = None  # C: the threads the code will run on (None: OpenMP's default team)


@dataclass(frozen=True)
class Candidate:
    """One evaluated tile shape."""

    sizes: tuple[int, ...]
    traffic_bytes: int
    blocks: int
    threads: int
    staged_bytes: int
    feasible: bool
    sector_bytes: int = -1  # CUDA: the objective (module docstring); -1: the traffic (C)
    coalescing: tuple[str, ...] = ()  # CUDA: why some arrays cost more than their bytes, or are staged
    row_bytes: int = LINE_BYTES  # CUDA: the narrowest staged box row, in bytes, up to a cache line

    @property
    def cost(self) -> int:
        return self.traffic_bytes if self.sector_bytes < 0 else self.sector_bytes

    def describe(self) -> str:
        sectors = f", {self.sector_bytes} B in sectors" if self.sector_bytes >= 0 else ""
        why = f" ({'; '.join(self.coalescing)})" if self.coalescing else ""
        return (f"{'x'.join(map(str, self.sizes))}: {self.traffic_bytes} B{sectors}, {self.blocks} tile(s) in parallel, "
                f"{self.staged_bytes} B staged per tile{'' if self.feasible else ' (over the limits)'}{why}")


def _pow2_upto(n: int, lo: int = 1) -> list[int]:
    out, v = [], lo
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _ceil_pow2(n: int) -> int:
    v = 1
    while v < n:
        v *= 2
    return v


class TileSearch:
    """The mapper's ``choose`` callback: ``(band node, n_parallel, default sizes) -> sizes``.

    ``log`` collects one line per kernel band searched (``Schedule.notes`` shows them); ``ranked`` maps the
    statements of each band searched to its feasible candidates, best first (``ranked[...][0]`` is the
    shape chosen)."""

    def __init__(self, prog: Program, target: str, params: Mapping[str, int], limits: Limits = Limits()) -> None:
        self.prog = prog
        self.target = target
        self.params = dict(params)
        self.limits = limits
        self.fixed = fixed_params(prog, params)
        self.deps = dependences_of(prog)
        self.log: list[str] = []
        self._counts: dict[tuple, tuple] = {}
        self._sizes: dict[str, int] = {}
        self._steps: dict[tuple, list[AccessSteps]] = {}
        self._plain: Candidate | None = None  # the last CUDA band's choice by bytes alone (for the log)
        self.ranked: dict[frozenset[str], tuple[Candidate, ...]] = {}

    def __call__(self, node: isl.ScheduleNode, n_par: int, default: tuple[int, ...]) -> tuple[int, ...]:
        if any(p not in self.params for p in self.prog.params) or not default:
            return default

        def rank() -> list[Candidate] | None:
            extents = [self._extent(node, k) for k in range(node.band_n_member())]
            if self.target == "cuda":
                return self._cuda(node, len(default), extents)
            return self._c(node, default, extents, n_par)

        # each band's search has the stage's whole budget; past it, the default sizes (see within_budget)
        ranked = within_budget(rank, None)
        if ranked is None:
            self.log.append(f"tile search for {', '.join(self._statements(node))}: ran out of its isl budget; "
                            f"default sizes {'x'.join(map(str, default))}")
            return default
        if not ranked:
            return default
        best = ranked[0]
        self.ranked[frozenset(self._statements(node))] = tuple(ranked)
        line = f"tile search for {', '.join(self._statements(node))}: chose {best.describe()}"
        plain = self._plain if self.target == "cuda" else None
        if plain is not None and plain.sizes != best.sizes:
            line += f"; by bytes alone it would be {plain.describe()}"
        self.log.append(line)
        return best.sizes

    # -- evaluation -----------------------------------------------------------------------------------

    def evaluate(self, node: isl.ScheduleNode, sizes: tuple[int, ...], extents: list[int]) -> Candidate:
        key = (str(node.get_domain()), str(node.band_get_partial_schedule()), tuple(sizes))
        if key not in self._counts:
            domain = self._one_launch(node)
            tm = tile_map_at(tile_band(node, sizes), len(sizes))
            counts, tiles = region_counts(self.prog, domain, tm, self.fixed, self.deps, self._private(domain),
                                         tile_dims=len(sizes))
            boxes = self._boxes(node, len(sizes), domain, tm, counts) if self.target == "cuda" else {}
            self._counts[key] = (counts, tiles, count_set(domain), boxes)
        counts, tiles, instances, boxes = self._counts[key]
        domain = node.get_domain()
        traffic = sum((c.read + c.write) * itemsize(self.prog, a) for a, c in counts.items())
        threads = 1
        blocks = 1
        # C: the outermost tile loop runs in parallel, and the next one too when both members are parallel
        # (``collapse(2)``, or the next one alone when the first has a single tile: codegen/c.py)
        c_parallel = 2 if len(sizes) > 1 and node.band_member_get_coincident(0) and node.band_member_get_coincident(1) else 1
        for k, (s, e) in enumerate(zip(sizes, extents)):
            threads *= min(s, e) if e else s
            if self.target == "cuda" or k < c_parallel:
                blocks *= -(-e // s) if e else 1
        tiles = max(tiles, 1)
        if self.target == "cuda":
            per_thread = max(1, -(-instances // max(1, tiles * threads)))
            chunk = min(1.0, self.limits.stage_chunk / per_thread)
            reads = self._reads(domain)
            reused = sorted(a for a, c in counts.items() if reads.get(a, 0) > c.read)
            staged = sum(counts[a].read * itemsize(self.prog, a) for a in reused)
            staged = int(staged / tiles * chunk)
            feasible = threads <= self.limits.max_threads and staged <= self.limits.shared_memory
            sectors, staged, why, row = self._sectors(node, sizes, extents, counts, boxes, reused, staged, chunk)
            return Candidate(tuple(sizes), traffic, blocks, threads, staged, feasible, sectors, why, row)
        staged = int(sum((c.read + c.write) * itemsize(self.prog, a) for a, c in counts.items()) / tiles)
        feasible = staged <= self.limits.cache_bytes
        return Candidate(tuple(sizes), traffic, blocks, threads, staged, feasible)

    # -- coalescing (CUDA) ----------------------------------------------------------------------------

    def steps(self, node: isl.ScheduleNode, n: int) -> list[AccessSteps]:
        """How each access of the band's statements walks memory across ``threadIdx.x`` (the band's member
        ``n - 1``) and ``threadIdx.y`` (member ``n - 2``); the same for every tile shape, so kept per band."""
        key = (str(node.get_domain()), str(node.band_get_partial_schedule()), n)
        if key not in self._steps:
            time, depth = band_time(node)
            skip = self._private(node.get_domain().intersect_params(self.fixed))
            y = depth + n - 2 if n >= 2 else None
            self._steps[key] = access_steps(self.prog, time, depth + n - 1, y, self.fixed, self.params, skip)
        return self._steps[key]

    def _boxes(self, node: isl.ScheduleNode, n: int, domain: isl.UnionSet, tm: isl.UnionMap,
               counts) -> dict[str, tuple[int, ...] | None]:
        """Per array the tile might stage (read more often than its footprint, or accessed transposed):
        the shape of its per-tile footprint box (``footprint_box.fixed_box``, as the promotion pass sizes
        its buffer), ``None`` when it has no constant box."""
        reads = self._reads(domain)
        transposed = {s.array for s in self.steps(node, n) if s.transposed}
        out: dict[str, tuple[int, ...] | None] = {}
        tm = tm.intersect_domain(domain).intersect_params(self.fixed)
        for x, c in counts.items():
            if x not in transposed and reads.get(x, 0) <= c.read:
                continue
            acc = None
            for st in self.prog.statements:
                for a in st.accesses:
                    if a.array == x:
                        m = isl.UnionMap.from_map(a.relation)
                        acc = m if acc is None else acc.union(m)
            foot = tm.reverse().apply_range(acc.intersect_domain(domain))
            box = fixed_box(isl.Map.from_union_map(foot)) if not foot.is_empty() else None
            out[x] = box[1] if box is not None else None
        return out

    def _sectors(self, node, sizes, extents, counts, boxes, reused, staged, chunk) -> tuple[int, int, tuple[str, ...], int]:
        """``(sector bytes, staged bytes per tile, notes, narrowest staged row in bytes up to a cache line)``
        of one shape: which arrays the promotion pass
        would stage (the reused ones, then the transposed ones whose box rows span a sector, while the
        budget lasts), and the sector bytes each array costs (``coalescing.array_factor``)."""
        n = len(sizes)
        steps = self.steps(node, n)
        lanes = min(sizes[-1], extents[n - 1] or sizes[-1])
        rows = min(sizes[-2], extents[n - 2] or sizes[-2], max(1, 32 // lanes)) if n >= 2 else 1
        left = self.limits.shared_memory - staged
        widths = {a: boxes[a][-1] for a in reused if boxes.get(a)}
        why: list[str] = []
        for a in sorted({s.array for s in steps if s.transposed} - set(reused)):
            shape, size = boxes.get(a), itemsize(self.prog, a)
            if not shape or shape[-1] * size < SECTOR_BYTES:
                continue
            padded = shape[:-1] + (shape[-1] + 1,) if shape[-1] % 2 == 0 else shape
            nbytes = int(volume(padded) * size * chunk)
            if nbytes <= left:
                left -= nbytes
                staged += nbytes
                widths[a] = shape[-1]
                why.append(f"{a} staged in shared memory (transposed access), copies coalesced")
        total = 0
        for a, c in sorted(counts.items()):
            size = itemsize(self.prog, a)
            mine = [s for s in steps if s.array == a]
            factor = array_factor(mine, size, lanes, rows, widths.get(a))
            total += int((c.read + c.write) * size * factor)
            if factor > 1 and a not in widths:
                worst = max(mine, key=lambda s: (abs(s.x), abs(s.y)))
                why.append(f"{a} in global memory: {float(factor):g}x its bytes in sectors "
                           f"(step {worst.x} elements along threadIdx.x)")
        row = min([LINE_BYTES] + [w * itemsize(self.prog, a) for a, w in widths.items()])
        return total, staged, tuple(why), row

    def _one_launch(self, node: isl.ScheduleNode) -> isl.UnionSet:
        """The instances of the kernel's first launch (the first iteration of the host loops around it):
        candidates are ranked on one launch, as every launch of a kernel is tiled alike."""
        domain = node.get_domain().intersect_params(self.fixed)
        prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
        if prefix.is_empty() or isl.Set.from_union_set(prefix.range()).dim(isl.dim_type.set) == 0:
            return domain
        first = isl.UnionSet.from_set(isl.Set.from_union_set(prefix.range()).lexmin())
        return prefix.intersect_range(first).domain()

    def _private(self, domain: isl.UnionSet) -> frozenset[str]:
        """Temporaries used only inside this kernel: the contraction pass will likely keep them in
        registers, so they do not count against a shape."""
        inside = set()
        domain.foreach_set(lambda s: inside.add(s.get_tuple_name()))
        out = set()
        for name, arr in self.prog.arrays.items():
            if arr.role != "temp":
                continue
            users = {s.name for s in self.prog.statements if any(a.array == name for a in s.accesses)}
            if users <= inside:
                out.add(name)
        return frozenset(out)

    def _reads(self, domain: isl.UnionSet) -> dict[str, int]:
        """Per array: the read accesses the kernel's instances make (an upper bound on the uncovered
        ones); an array whose read footprint is smaller is reused inside a tile and worth staging."""
        out: dict[str, int] = {}
        for name in self._names(domain):
            st = self.prog.statement(name)
            for a in st.accesses:
                if a.kind in ("read", "update"):
                    out[a.array] = out.get(a.array, 0) + self._size(name)
        return out

    def _size(self, stmt: str) -> int:
        if stmt not in self._sizes:
            self._sizes[stmt] = count_set(isl.UnionSet.from_set(self.prog.statement(stmt).domain).intersect_params(self.fixed))
        return self._sizes[stmt]

    @staticmethod
    def _names(domain: isl.UnionSet) -> list[str]:
        names: list[str] = []
        domain.foreach_set(lambda s: names.append(s.get_tuple_name()))
        return names

    def _extent(self, node: isl.ScheduleNode, k: int) -> int:
        rng = member_map(node, k).intersect_params(self.fixed).range()
        if rng.is_empty():
            return 1
        s = isl.Set.from_union_set(rng)
        lo, hi = s.dim_min_val(0), s.dim_max_val(0)
        if not (lo.is_int() and hi.is_int()):
            return 0
        return int(hi.to_python()) - min(0, int(lo.to_python())) + 1

    @staticmethod
    def _statements(node: isl.ScheduleNode) -> list[str]:
        names: set[str] = set()
        node.get_domain().foreach_set(lambda s: names.add(s.get_tuple_name()))
        return sorted(names, key=lambda n: (len(n), n))

    # -- the two searches -----------------------------------------------------------------------------

    def cuda_key(self, node: isl.ScheduleNode, c: Candidate) -> tuple:
        """The order :meth:`_rank` sorts a CUDA band's candidates by, usable across two layouts of one band
        (the same work: the same blocks needed); smaller is better."""
        need = min(self.limits.sms, -(-count_set(self._one_launch(node)) // self.limits.block_work))
        return (max(0, need - c.blocks), c.cost, c.traffic_bytes, -min(c.blocks, self.limits.sms), -c.row_bytes, -_prod(c.sizes))

    def _pick(self, cands: list[Candidate], default: tuple[int, ...], need_blocks: int) -> Candidate | None:
        ranked = self._rank(cands, default, need_blocks)
        return ranked[0] if ranked else None

    @staticmethod
    def _rank(cands: list[Candidate], default: tuple[int, ...], need_blocks: int, fill: int = 0) -> list[Candidate]:
        """The feasible candidates, best first: the fewest blocks short of ``need_blocks``, the least cost
        (sector bytes on CUDA, bytes on C), the fewest bytes, the most blocks up to ``fill``, the widest
        staged rows up to a cache line (a 32x32 transpose tile before an 8x128 one: the sector model
        cannot tell them apart, DRAM bursts and L2 lines can), the largest tile, the default."""
        ok = [c for c in cands if c.feasible]

        def key(c: Candidate):
            size = 1
            for s in c.sizes:
                size *= s
            return (max(0, need_blocks - c.blocks), c.cost, c.traffic_bytes, -min(c.blocks, fill), -c.row_bytes,
                    -size, c.sizes != default)

        return sorted(ok, key=key)

    def _cuda(self, node: isl.ScheduleNode, n: int, extents: list[int]) -> list[Candidate]:
        ext = [e or 1024 for e in extents[:n]]
        x_opts = [s for s in _pow2_upto(1024, 32)] if ext[-1] >= 32 else [_ceil_pow2(ext[-1])]
        outer_opts = [[s for s in _pow2_upto(min(1024, _ceil_pow2(e)))] for e in ext[:-1]]
        shapes: set[tuple[int, ...]] = set()

        def build(k: int, prefix: tuple[int, ...], threads: int) -> None:
            if k == n - 1:
                for x in x_opts:
                    if threads * x <= self.limits.max_threads:
                        shapes.add(prefix + (x,))
                return
            for s in outer_opts[k]:
                if threads * s <= self.limits.max_threads:
                    build(k + 1, prefix + (s,), threads * s)

        build(0, (), 1)
        min_threads = min(32, _prod(_ceil_pow2(e) for e in ext))
        cands = [self.evaluate(node, sh, extents) for sh in sorted(shapes) if _prod(sh) >= min_threads]
        default = (256,) if n == 1 else (16, 32)[:n]
        work = count_set(self._one_launch(node))
        need = min(self.limits.sms, -(-work // self.limits.block_work))
        ranked = self._rank(cands, default, need, self.limits.sms)
        plain = self._rank([dataclasses.replace(c, sector_bytes=-1) for c in cands], default, need, self.limits.sms)
        self._plain = next((c for c in ranked if plain and c.sizes == plain[0].sizes), None)
        return ranked

    def _c(self, node: isl.ScheduleNode, default: tuple[int, ...], extents: list[int], n_par: int) -> list[Candidate]:
        n = len(default) if node.band_get_permutable() else 1
        opts = [[s for s in _pow2_upto(256, 8) if s < 2 * max(e, 1)] or [8] for e in extents[:n]]
        current = list(default[:n])
        seen: dict[tuple[int, ...], Candidate] = {}

        def ev(sizes: list[int]) -> Candidate:
            key = tuple(min(s, _ceil_pow2(max(e, 1))) for s, e in zip(sizes, extents))
            if key not in seen:
                seen[key] = self.evaluate(node, key, extents)
            return seen[key]

        need = self.limits.c_parallelism if n_par else 0
        for _sweep in range(2):
            for k in range(min(n, 3)):
                cands = [ev(current[:k] + [s] + current[k + 1:]) for s in opts[k]]
                best = self._pick(cands, tuple(current), need)
                if best is not None:
                    current[k] = best.sizes[k]
        return [dataclasses.replace(c, sizes=c.sizes + tuple(default[n:]))
                for c in self._rank(list(seen.values()), tuple(default[:n]), need)]


def ranked_tiles(search: TileSearch, kernels: Iterable[tuple[str, ...]], k: int) -> list[dict[str, tuple[int, ...]]]:
    """The model's ``k`` best whole-program tile specifications (``pf.schedule(tile=...)`` dicts), best first.

    ``kernels`` are the statements of each kernel of the schedule ``search`` served. Candidate ``j`` gives
    every searched kernel its ``j``-th best shape (its last one when it has fewer), so candidate 0 is the
    model's own choice; duplicates are dropped, so fewer than ``k`` may come back. Kernels the search did
    not rank are left out of the dicts (they keep ``"auto"``).
    """
    rankings = [(stmts, search.ranked[frozenset(stmts)]) for stmts in kernels if frozenset(stmts) in search.ranked]
    depth = max((len(r) for _, r in rankings), default=1)
    out: list[dict[str, tuple[int, ...]]] = []
    for j in range(depth):
        spec = {s: r[min(j, len(r) - 1)].sizes for stmts, r in rankings for s in stmts}
        if spec not in out:
            out.append(spec)
        if len(out) == k:
            break
    return out


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out
