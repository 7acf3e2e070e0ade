"""Host/kernel split, kernel marks, and the C parallel / CUDA grid and block mapping.

Walking the tree from the root (:func:`split`):

* a band whose first member is parallel (coincident) starts a kernel;
* a band whose leading members carry dependences stays on the host (a *host loop*, e.g. a stencil's
  time loop or LU's pivot loop) when something below it is parallel: its non-parallel leading members
  are split off and the walk goes on below; otherwise the whole subtree is one sequential kernel;
* sequences and sets of independent subtrees become several kernels, one per child;
* a statement reached with no band at all gets a kernel of its own (CUDA: grid (1,), block (1,)).

Inside a kernel (:func:`map_kernel`), with the marks of ``model.py``:

* C: ``kernel`` mark -> ``parallel`` mark -> the (tiled) band whose first member is parallel; a sequential
  kernel has only the ``kernel`` mark (above its band, tiled when permutable).
* CUDA: ``kernel`` mark -> ``grid`` mark -> tile band (exactly the mapped members, outermost first;
  the innermost maps to ``blockIdx.x``) -> ``block`` mark -> point band (the same members, to
  ``threadIdx``) -> the rest of the kernel, sequential in each thread. A sequential kernel has no grid or
  block mark and is launched as grid (1,), block (1,).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.cost.machine import cache_sizes
from polyfuse.cost.traffic import itemsize
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView, T, member_map, prefix_through
from polyfuse.schedule.mapping.choices import Choices, chosen_in, lead_with
from polyfuse.schedule.mapping.element_share import element_share, split_threads
from polyfuse.schedule.model import BLOCK_MARK, GRID_MARK, KERNEL_MARK, ONE_KERNEL_MARK, PARALLEL_MARK, Kernel
from polyfuse.schedule.tiling.cuda_microtile import SHARED_LIMIT, cuda_contraction, sized_for_the_gpu
from polyfuse.schedule.tiling.interchange import stride_one_innermost
from polyfuse.schedule.tiling.jam import mark_jam
from polyfuse.schedule.tiling.microtile import find_contraction, micro_tile, reorder
from polyfuse.schedule.tiling.rowwise import NOT_ROW_WISE, row_members, rows_first
from polyfuse.schedule.tiling.sizes import sizes_for, tile_band
from polyfuse.schedule.tiling.streaming import streams
from polyfuse.schedule.tiling.tile_shapes import lane_tile
from polyfuse.schedule.tiling.wavefront import describe, wavefront

SERIAL_INSTANCES = 4096  # C: a kernel launch with fewer statement instances runs on one thread (_work_per_launch)


@dataclass(frozen=True)
class KernelInfo:
    """A kernel and the maps its legality and contraction are judged with.

    ``outer`` maps each instance to the schedule prefix above the parallel members, ``thread`` to the
    prefix through them (the identity of the thread that runs it); both ``None`` for a sequential kernel.
    ``flat_depth`` is the number of dimensions of ``tree.get_map()`` that precede the kernel's first
    non-thread loop (thread dimensions included).
    """

    kernel: Kernel
    domain: isl.UnionSet
    outer: isl.UnionMap | None
    thread: isl.UnionMap | None
    flat_depth: int


def split(node: isl.ScheduleNode, make_kernel: Callable[[isl.ScheduleNode], isl.ScheduleNode]) -> isl.ScheduleNode:
    """Apply ``make_kernel`` at every kernel root below ``node``; returns the node at the same position."""
    kind = node.get_type()
    if kind == T.leaf:
        return make_kernel(node)
    if kind == T.mark and node.mark_get_id().get_name() == ONE_KERNEL_MARK:  # (fusion/steps.py)
        return make_kernel(node.delete())
    if kind == T.band:
        lead = _leading_sequential(node)
        if lead == 0:
            return make_kernel(node)
        if not _has_parallel(node):
            return make_kernel(node)
        if lead < node.band_n_member():
            node = node.band_split(lead)
        return split(node.child(0), make_kernel).parent()
    for k in range(node.n_children()):
        node = split(node.child(k), make_kernel).parent()
    return node


def statements_of(node: isl.ScheduleNode) -> tuple[str, ...]:
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    return tuple(sorted(set(names), key=lambda n: (len(n), n)))


class Mapper:
    """Builds the kernels of one tree for one target (the ``make_kernel`` callback of :func:`split`)."""

    def __init__(self, prog: Program, target: str, tile, params: Mapping[str, int] | None, choose=None,
                 microtiles: bool = False, cache_bytes: int | None = None, parallel: Choices | None = None,
                 view: DepView | None = None, shared_memory: int = SHARED_LIMIT, wavefronts: bool = False) -> None:
        self.prog = prog
        self.view = view  # the dependences, for the C kernel shapes that ask them (``jam.py``)
        self.microtiles = microtiles  # C: register micro-tiles for contraction bands (``microtile.py``)
        self.wavefronts = wavefronts  # C: parallel tiles on the diagonals of a sequential band (``wavefront.py``)
        self.cache_bytes = cache_bytes
        self.shared_memory = shared_memory  # CUDA: static shared memory a block may use (micro-tiles' operand tiles)
        self.target = target
        self.tile = tile
        self.params = params
        self.choose = choose  # (node, n_parallel, default sizes) -> sizes: the "auto" tile search, or None
        self.kernels: list[KernelInfo] = []
        self.parallel = parallel  # the user's parallel loops per statement (``choices.py``)

    def __call__(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        name = f"kernel{len(self.kernels)}"
        stmts = statements_of(node)
        domain = node.get_domain()
        flat = flat_depth(node)
        chosen = chosen_in(self.prog, node, self.parallel, stmts)
        if chosen is not None:  # the user's parallel loops lead the band; no kernel shape reorders them
            node = lead_with(self.prog, node, *chosen)
        parallel_band = node.get_type() == T.band and node.band_member_get_coincident(0)
        work = self._work_per_launch(node) if parallel_band and chosen is None else None
        serial = (f"{work} statement instances per launch at these sizes, fewer than {SERIAL_INSTANCES}: starting "
                  "the OpenMP team would cost more than it saves") if work is not None and work < SERIAL_INSTANCES else ""
        if parallel_band and not serial:
            n_par = _leading_parallel(node)
            shapes = self.target == "c" and chosen is None
            micro = self._micro(node, stmts) if shapes else None
            row_wise = shapes and micro is None and self.microtiles and _auto(self.tile, stmts)
            n_rows, walk = row_members(self.prog, node) if row_wise else NOT_ROW_WISE
            cuda_micro = self._cuda_micro(node, stmts) if self.target == "cuda" and chosen is None else None
            if cuda_micro is not None:
                node, plan = cuda_micro
                return self._cuda(node, name, stmts, domain, flat, (1,) * len(plan.batch) + (plan.block_rows, plan.block_lanes),
                                  plan)
            if micro is not None:
                node, sizes = micro
            elif n_rows:
                node, sizes = rows_first(self.prog, node, n_rows, walk), ()
            elif shapes and self._streams(node, stmts):
                sizes = ()  # untiled: each thread walks one contiguous block of rows (``streaming.py``)
            else:
                sizes = sizes_for(self.tile, self.target, stmts, node.band_n_member(), n_par)
                if self.target == "cuda" and chosen is None and _auto(self.tile, stmts):
                    node, sizes = self._cuda_layout(node, stmts, n_par, sizes)
                elif self.choose is not None and _auto(self.tile, stmts):
                    sizes = self.choose(node, n_par, sizes)  # (the search itself asks for parallel tiles, but
                if self.target == "c" and _auto(self.tile, stmts):  # its smallest tile is 8: short extents)
                    sizes = self._enough_parallel_tiles(node, sizes, n_par)
                if not node.band_get_permutable():
                    sizes = sizes[: max(n_par, 1) if self.target == "cuda" else 1]  # strip-mining parallel members is always legal
                if self.target == "cuda":
                    return self._cuda(node, name, stmts, domain, flat, sizes)
                node = tile_band(node, sizes)
                if len(sizes) == node.band_n_member() and node.n_children() == 1 and node.child(0).get_type() == T.band:
                    node = stride_one_innermost(self.prog, node.child(0)).parent()
            if shapes and micro is None and self.view is not None:
                node = mark_jam(self.prog, node, self.view, tiled=bool(sizes))  # recurrences below a parallel loop run interleaved
            return self._parallel(node, Kernel(name, stmts, parallel_depth=1, tile_sizes=tuple(sizes)), domain, flat)
        launch = ((1,), (1,)) if self.target == "cuda" else ((), ())
        sizes = ()
        # (a sequential band of one loop is not tiled: strip-mining a single loop reuses nothing and only
        # puts min/max bounds in the way of the vectoriser)
        if self.target == "c" and node.get_type() == T.band and node.band_get_permutable() and node.band_n_member() > 1:
            # (a contraction too small for the team still gets its register tile: doitgen's 60 x 60 per launch)
            micro = self._micro(node, stmts) if parallel_band and chosen is None else None
            if micro is not None:
                node, sizes = micro
            else:
                sizes = sizes_for(self.tile, "c", stmts, node.band_n_member(), 0)
                diagonal = None
                if self.wavefronts and not parallel_band and self.params is not None:
                    diagonal = wavefront(self.prog, node, sizes, self._work_per_launch(node), self._bounds)
                if diagonal is not None:  # a host loop over the diagonals of tiles around a parallel kernel
                    kernel = Kernel(name, stmts, parallel_depth=1, tile_sizes=tuple(sizes), wavefront=describe(sizes))
                    return self._parallel(diagonal, kernel, domain, flat_depth(diagonal)).parent()
                node = tile_band(node, sizes)
        kernel = Kernel(name, stmts, grid=launch[0], block=launch[1], tile_sizes=tuple(sizes), serial=serial)
        self.kernels.append(KernelInfo(kernel, domain, None, None, flat))
        return node.insert_mark(isl.Id(KERNEL_MARK, user=kernel))

    def _parallel(self, node: isl.ScheduleNode, kernel: Kernel, domain: isl.UnionSet, flat: int) -> isl.ScheduleNode:
        """C: ``kernel``'s marks above ``node``, a band whose first member is its OpenMP loop (``flat``: the
        flattened schedule's dimensions above it); returns the kernel mark."""
        self.kernels.append(KernelInfo(kernel, domain, prefix_through(node, 0), prefix_through(node, 1), flat + 1))
        return node.insert_mark(isl.Id(PARALLEL_MARK)).insert_mark(isl.Id(KERNEL_MARK, user=kernel))

    def _streams(self, node: isl.ScheduleNode, stmts: tuple[str, ...]) -> bool:
        """C: whether the band is left untiled because its tiles would reuse nothing (``streaming.py``);
        says so in the tile search's log."""
        if self.params is None or not _auto(self.tile, stmts) or not node.band_get_permutable():
            return False
        l1, l2 = cache_sizes()
        if not streams(self.prog, node, self.params, self.cache_bytes or STREAMING_CACHE_BYTES, l1, l2, os.cpu_count() or 1):
            return False
        # the OpenMP loop is the first member with more than one iteration (isl elides a single one); it
        # alone must give every thread work, as no tile loops can be collapsed with it
        extents = [self._extent(node, k) for k in range(node.band_n_member() - 1)]
        outer = next((e for e in extents if e != 1), 0)
        if outer < 2 * (os.cpu_count() or 1) or not node.band_member_get_coincident(extents.index(outer)):
            return False
        log = getattr(self.choose, "log", None)
        if log is not None:
            log.append(f"{', '.join(stmts)}: not tiled: every access walks memory contiguously along the innermost "
                       "loop or not at all, and the arrays read again stay in cache (tiles would save no traffic)")
        return True

    def _work_per_launch(self, node: isl.ScheduleNode) -> int | None:
        """C: the statement instances of one launch of the kernel below ``node`` at the given sizes (an
        upper bound: bounding boxes); ``None`` with unknown sizes or for CUDA. A launch with fewer than
        ``SERIAL_INSTANCES`` is left sequential: starting the OpenMP team would cost more than it saves."""
        if self.target != "c" or self.params is None:
            return None
        fixed = self._param_values()
        total = 0
        sets: list[isl.Set] = []
        node.get_domain().intersect_params(fixed).foreach_set(sets.append)
        for s in sets:
            volume = box_volume(s)
            if volume is None:
                return None
            total += volume
        hosts = 1
        if node.get_schedule_depth():  # the host loops' iterations (the prefix may land in several spaces)
            prefixes: list[isl.Set] = []
            node.get_prefix_schedule_union_map().intersect_domain(node.get_domain()).intersect_params(fixed).range().foreach_set(prefixes.append)
            volumes = [box_volume(p) for p in prefixes]
            if any(v is None for v in volumes):
                return None
            hosts = max(volumes, default=1)
        return total // max(hosts, 1)

    def _enough_parallel_tiles(self, node: isl.ScheduleNode, sizes: tuple[int, ...], n_par: int) -> tuple[int, ...]:
        """C: ``sizes`` with the tiles of the first two parallel members halved until their tile loops give
        every thread work (at least two tiles per core, where the extents allow): a tile that covers a
        whole dimension (batch 1, all filters in one tile) would otherwise leave the parallel loop with a
        single iteration and the kernel on one thread."""
        members = [k for k in range(min(n_par, 2, len(sizes)))]
        extents = [self._extent(node, k) for k in members]
        if not members or not all(extents):
            return sizes
        want = 2 * (os.cpu_count() or 1)
        out = list(sizes)

        def tiles() -> int:
            n = 1
            for k, e in zip(members, extents):
                n *= -(-e // out[k])
            return n

        while tiles() < want:
            growable = [k for k, e in zip(members, extents) if out[k] > 1 and -(-e // out[k]) < e]
            if not growable:
                break
            k = max(growable, key=lambda m: out[m])
            out[k] = max(1, out[k] // 2)
        return tuple(out)

    def _micro(self, node: isl.ScheduleNode, stmts: tuple[str, ...]) -> tuple[isl.ScheduleNode, tuple[int, ...]] | None:
        """The band micro-tiled (tile band, cache tile sizes) when it is a lone contraction whose reordered
        band still starts with a parallel member; else ``None``."""
        if not self.microtiles or len(stmts) != 1 or not node.band_get_permutable() or not _auto(self.tile, stmts):
            return None
        found = find_contraction(self.prog, node, row_less=True)
        if found is None:
            return None
        first = found.order[0]
        if first >= node.band_n_member() or not node.band_member_get_coincident(first):
            return None
        outer = 1  # iterations of the parallel members above the rows (a convolution's output rows, a batch)
        for k in found.others:
            if not node.band_member_get_coincident(k):
                break
            outer *= self._extent(node, k) or 1
        # (the lane tiles run in parallel too, collapsed with the row tiles: 3072 lanes in tiles of 256 give 12)
        size = itemsize(self.prog, self.prog.statement(found.statement).write.array)
        lane_extent = self._extent(node, found.lane)
        lanes = -(-lane_extent // lane_tile(size, self.cache_bytes)) if lane_extent else 1
        enough = 2 * (os.cpu_count() or 1)
        all_rows = None if outer > 1 or found.rows is None else (self._extent(node, found.rows) or None)
        rows = None if outer >= enough or lanes >= enough else all_rows
        row_tiles = -(-enough // lanes) if lane_extent else 8
        return micro_tile(self.prog, node, found, self.cache_bytes, rows, self._extent, row_tiles, all_rows)

    def _cuda_micro(self, node: isl.ScheduleNode, stmts: tuple[str, ...]):
        """CUDA: the band reordered for a register micro-tile and its plan (``tiling/cuda_microtile.py``)
        when it is a lone rectangular contraction and micro-tiles are on; else ``None``."""
        if not self.microtiles or len(stmts) != 1 or not _auto(self.tile, stmts):
            return None
        found = cuda_contraction(self.prog, node, self.shared_memory)
        if found is None or self.params is None:
            return found
        node, plan = found  # (band order: batch, rows, lane, reduction)
        extents = [self._extent(node, k) for k in range(len(plan.batch) + 2)]
        stmt = self.prog.statement(plan.statement)
        sizes = {r.access: itemsize(self.prog, stmt.accesses[r.access].array) for r in plan.staged}
        return node, sized_for_the_gpu(plan, extents, sizes, self.shared_memory)

    def _cuda_layout(self, node: isl.ScheduleNode, stmts: tuple[str, ...], n_par: int,
                     sizes: tuple[int, ...]) -> tuple[isl.ScheduleNode, tuple[int, ...]]:
        """CUDA: the band with its mapped members first (:meth:`_thread_members_first`) and their tile
        sizes. Two members are mapped by default; where three parallel members have more than one
        iteration and the tile search runs (every size known), it also tries mapping three (a
        convolution's filters too, with the rows and columns) and keeps the layout its ranking prefers:
        more blocks where the GPU would be short of them, then fewer sector bytes (a 3-D stencil keeps
        its planes in a thread, with the register window along them)."""
        useful = [k for k in range(n_par) if self._span(node, k) != 1]
        two = self._thread_members_first(node, useful, len(sizes))
        if self.choose is None:
            return two, sizes
        key = getattr(self.choose, "cuda_key", None)
        if len(sizes) != 2 or len(useful) < 3 or key is None:
            return two, self.choose(two, n_par, sizes)
        log = self.choose.log
        sizes_two = self.choose(two, n_par, sizes)
        best_two = self.choose.ranked.get(frozenset(stmts), (None,))[0]
        three = self._thread_members_first(node, useful, 3)
        sizes_three = self.choose(three, n_par, (1,) + tuple(sizes))
        best_three = self.choose.ranked.get(frozenset(stmts), (None,))[0]
        if best_two is None or best_three is None or key(two, best_two) <= key(three, best_three):
            if best_three is not None and len(log) >= 1:
                log.pop()  # (the three-member layout's line)
            return two, sizes_two
        if len(log) >= 2:
            del log[-2]  # (the two-member layout's line)
        return three, sizes_three

    def _thread_members_first(self, node: isl.ScheduleNode, useful: list[int], n_map: int) -> isl.ScheduleNode:
        """CUDA: the band reordered so that the ``n_map`` members mapped to blocks and threads (the band's
        first) are the innermost ``n_map`` of ``useful``, its leading parallel members that have more than
        one iteration at the given sizes: a convolution's rows and columns rather than its batch of one and its
        filters, a batched matmul's rows and columns rather than its batch, a 3-D stencil's two inner
        dimensions. ``threadIdx.x`` then runs along the innermost (contiguous) dimension, two output
        dimensions reach the threads, and the outer parallel members run inside each thread (a 3-D
        stencil's planes one after another, with a register window along them). Unchanged when that is
        already the order or the band cannot be reordered."""
        if not node.band_get_permutable() or n_map < 1:
            return node
        mapped = useful[-n_map:]
        if not mapped or mapped == list(range(len(mapped))):
            return node
        return reorder(node, mapped + [k for k in range(node.band_n_member()) if k not in mapped])

    def _span(self, node: isl.ScheduleNode, k: int) -> int:
        """How many values band member ``k`` takes over the node's instances at the given sizes (``max -
        min + 1``); 0 when unknown."""
        bounds = self._bounds(node, k)
        return bounds[1] - bounds[0] + 1 if bounds else 0

    def _cuda(self, node, name, stmts, domain, flat, sizes, microtile=None) -> isl.ScheduleNode:
        n = len(sizes)
        threads, share = 0, 1
        if microtile is None and self.params is not None and _auto(self.tile, stmts) and node.get_type() == T.band:
            extents = [self._extent(node, k) for k in range(n)]
            threads, share = element_share(self.prog, stmts, node.band_n_member(), sizes, extents)
            if share > 1:  # (several iterations a thread along threadIdx.x: ``element_share.py``)
                sizes = tuple(sizes[:-1]) + (threads * share,)
        node = tile_band(node, sizes)  # tile band: exactly the n mapped members
        point = node.child(0)
        if share > 1:
            point = split_threads(point, threads)
            node = point.parent()
        grid = tuple(reversed([self._extent(node, k) for k in range(n)]))
        block = tuple(reversed([min(s, self._extent(point, k) or s) for k, s in enumerate(sizes)]))
        if share > 1:
            block = (threads,) + block[1:]
        shared = 0
        if microtile is not None:  # 16 x 16 threads, each a register tile of the block's outputs
            block = microtile.threads + (1,) * (n - 2)
            shared = microtile.shared_bytes({r.access: itemsize(self.prog, self.prog.statement(microtile.statement).accesses[r.access].array)
                                              for r in microtile.staged})
        outer, thread = prefix_through(node, 0), prefix_through(point, n)
        kernel = Kernel(name, stmts, grid=grid, block=block, parallel_depth=n, tile_sizes=tuple(sizes), shared_bytes=shared,
                        microtile=microtile, thread_share=share if share > 1 else 0)
        self.kernels.append(KernelInfo(kernel, domain, outer, thread, flat + 2 * n))
        node = point.insert_mark(isl.Id(BLOCK_MARK)).parent()
        node = node.insert_mark(isl.Id(GRID_MARK))
        return node.insert_mark(isl.Id(KERNEL_MARK, user=kernel))

    def _extent(self, node: isl.ScheduleNode, k: int) -> int:
        """``max + 1`` of band member ``k`` over the node's instances at the given sizes; 0 if unknown."""
        bounds = self._bounds(node, k)
        return 1 if bounds == () else (bounds[1] + 1 if bounds else 0)

    def _bounds(self, node: isl.ScheduleNode, k: int) -> tuple[int, ...] | None:
        """``(min, max)`` of band member ``k`` over the node's instances at the given sizes; ``()`` when it
        has none, None when unknown (no sizes, or a bound that is not a number)."""
        if self.params is None:
            return None
        rng = member_map(node, k).intersect_params(self._param_values()).range()
        if rng.is_empty():
            return ()
        s = isl.Set.from_union_set(rng)
        lo, hi = s.dim_min_val(0), s.dim_max_val(0)
        return (int(lo.to_python()), int(hi.to_python())) if lo.is_int() and hi.is_int() else None

    def _param_values(self) -> isl.Set:
        ctx = self.prog.context
        fixed = isl.Set.universe(ctx.get_space())
        for k, p in enumerate(ctx.get_space().get_var_names(isl.dim_type.param)):
            if self.params is not None and p in self.params:
                fixed = fixed.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(ctx.get_ctx(), int(self.params[p])))
        return fixed & ctx


def box_volume(s: isl.Set) -> int | None:
    """The number of points of ``s``'s bounding box (its parameters fixed); ``None`` when unbounded."""
    if s.is_empty():
        return 0
    volume = 1
    for k in range(s.dim(isl.dim_type.set)):
        lo, hi = s.dim_min_val(k), s.dim_max_val(k)
        if not (lo.is_int() and hi.is_int()):
            return None
        volume *= int(hi.to_python()) - int(lo.to_python()) + 1
    return volume


STREAMING_CACHE_BYTES = 262144
"""The cache a streaming band's re-read arrays must fit in (half of it) when the mapper is given none."""


def _auto(tile, statements) -> bool:
    if isinstance(tile, Mapping):
        tile = next((tile[s] for s in statements if s in tile), "auto")
    return tile == "auto"


def flat_depth(node: isl.ScheduleNode) -> int:
    """How many dimensions of the flattened schedule (``Schedule.get_map``) lie above ``node``: each band
    member counts one, each sequence or set node one (the position of the child)."""
    depth = 0
    for g in range(1, node.get_tree_depth() + 1):
        anc = node.ancestor(g)
        if anc.get_type() == T.band:
            depth += anc.band_n_member()
        elif anc.get_type() in (T.sequence, T.set):
            depth += 1
    return depth


def _leading_sequential(node: isl.ScheduleNode) -> int:
    n = 0
    while n < node.band_n_member() and not node.band_member_get_coincident(n):
        n += 1
    return n


def _leading_parallel(node: isl.ScheduleNode) -> int:
    n = 0
    while n < node.band_n_member() and node.band_member_get_coincident(n):
        n += 1
    return n


def _has_parallel(node: isl.ScheduleNode) -> bool:
    found = [False]

    def visit(n: isl.ScheduleNode) -> bool:
        if n.get_type() == T.band and any(n.band_member_get_coincident(k) for k in range(n.band_n_member())):
            found[0] = True
        return not found[0]

    node.foreach_descendant_top_down(visit)
    return found[0]
