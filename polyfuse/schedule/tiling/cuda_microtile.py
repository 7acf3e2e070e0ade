"""Register micro-tiles for contractions on the CUDA target: the CUDA half of the tiling levels that
``microtile.py`` gives the C target.

A contraction (``microtile.py``'s definition: an update ``X[..] += value`` over a band whose members are
its iterators, with a *rows* member, a contiguous *lane* member and a *reduction* member) is laid out on
the GPU in three levels, the known-good shape of a hand-written SGEMM:

* **block tile**: each thread block computes ``BLOCK_ROWS x BLOCK_LANES`` outputs (``blockIdx.y`` over the
  rows, ``blockIdx.x`` over the lanes, ``blockIdx.z`` over one batch member when there is one);
* **stages of k**: the reduction runs in steps of ``K_STAGE``; for each step every operand read is copied
  into a shared-memory tile (``rows x k`` for the reads that move with the rows, ``k x lanes`` for those
  that move with the lane), ``STAGES`` such tiles in flight with ``cp.async`` (sm_80 and later), so the
  copy of step ``t + STAGES - 1`` overlaps the compute of step ``t``; one ``__syncthreads()`` per step;
* **register tile**: each of the ``16 x 16`` threads keeps ``THREAD_ROWS x THREAD_LANES`` accumulators in
  registers across the whole reduction (loaded once, stored once), a contiguous run of rows and lanes so
  that its fragments load 16 bytes at a time from shared memory (``codegen/cuda_micro.py``); per step of
  ``k`` it issues ``THREAD_ROWS * THREAD_LANES`` updates. At sizes that fill the GPU with them, 4-byte
  contractions take :data:`TALL` blocks of 128 x 64 outputs, 8 x 4 a thread (measured faster on an H100).

A read contiguous along ``k`` in memory (``A[i][k]`` of a row-major gemm) keeps that order in its tile
(``rows x k``) and a thread loads its fragments of it four values of ``k`` at a time; the other layout,
``k x width`` with the read transposed on its copy (``CudaMicroTile.k_major``), keeps one ``k``'s fragments
live instead of four, which lets the tall tile fit 64 registers (50 % occupancy on sm_90) instead of 105
(25 %), but it copies those reads 4 bytes at a time, and on an H200 (session 24, f32 gemm 2048^3, 9
interleaved rounds) it ran at 0.62-0.65 of cuBLAS in every variant against 0.72 for ``rows x k``; 64 x 64
tiles: 0.53 against 0.66. It stays available as a plan field for the sweeps.

In the schedule tree the kernel is the ordinary CUDA layout (``mapping/kernels.py``): its band reordered
``(batch, rows, lane, reduction)``, the first members tiled by ``(1, BLOCK_ROWS, BLOCK_LANES)`` and mapped
to the grid, with the plan (:class:`CudaMicroTile`) on the ``Kernel``; legality and the traffic model see
that tree, and ``codegen/cuda_micro.py`` prints the kernel from the plan. Each element still sums its
terms in the source order of ``k`` (the accumulator starts from the element's value), as the reference
does; CUDA's contraction of ``a * b + c`` into a fused multiply-add is the only difference, as in every
other CUDA kernel polyfuse prints.

Only rectangular contractions qualify (every bound of rows, lane and reduction a function of the sizes
alone, one batch member at most, no host loop around the kernel), with every read moving with the rows
or with the lane but not both, of a 4- or 8-byte type; anything else keeps the generic mapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.bands import T
from polyfuse.schedule.tiling.accesses import access_coefficients
from polyfuse.schedule.tiling.microtile import Contraction, contraction_statement, find_contraction, member_iterators, reorder

BLOCK_ROWS = 64
BLOCK_LANES = 64
K_STAGE = 16
THREAD_ROWS = 4
THREAD_LANES = 4
STAGES = 3
"""Copies in flight: three 16-deep steps of a 64 x 64 f32 gemm take 24 KiB of shared memory, so four
blocks (1024 threads, 50 % occupancy on sm_90 at 64 registers) fit an SM."""
TALL = (128, 64, 8, 4)
"""The block and thread tile of 4-byte contractions large enough to fill the GPU with it (rows, lanes,
thread rows, thread lanes): measured on an H100 (f32 gemm 2048^3, 9 interleaved rounds against cuBLAS
FP32), 8 x 4 outputs a thread ran at 0.72 of cuBLAS against 0.66 for 4 x 4, although its 105 registers
allow only 25 % occupancy against 50 %: with 16-byte fragment loads the larger tile's two FMAs per
shared-memory byte matter more than the warps that hide latency. 8 x 8 (128 x 128) ran at 0.58-0.66.
An H200 (session 24) gave the same order: 0.72 for this tile, 0.66 for 4 x 4, 0.53-0.66 for the k-major
variants. ``benchmarks/cuda_acceptance.py`` holds the sweep."""
TALL_K_MAJOR = {"k_stage": 8, "min_blocks": 4}
"""The tall tile's step of k and ``__launch_bounds__`` minimum of blocks an SM where its tiles are stored
``k x width`` (:attr:`CudaMicroTile.k_major`, not the default): ptxas 13.0 then fits the f32 gemm's kernel
in 64 registers without a spill, so four blocks (50 % occupancy on sm_90) run on an SM. On an H200
(session 24) that ran at 0.63 of cuBLAS, against 0.72 for the default ``rows x k`` tiles at 105 registers
and 25 %; the occupancy does not pay for the 4-byte transposing copies."""
SHARED_LIMIT = 48 * 1024  # static shared memory per block
SMS = 132  # an H100's multiprocessors (as ``cost/search.py``'s ``Limits.sms``)


@dataclass(frozen=True)
class StagedRead:
    """One read of the update's value staged through shared memory: ``side`` is ``"rows"`` (a
    ``rows x k`` tile) or ``"lane"`` (``k x lanes``); ``contiguous`` names the tile dimension along which
    the global address moves by one element (``"k"``, ``"rows"``, ``"lane"`` or ``""``), which becomes the
    tile's inner dimension."""

    access: int
    side: str
    contiguous: str


@dataclass(frozen=True)
class CudaMicroTile:
    """The plan of a micro-tiled CUDA kernel (module docstring): the update statement, its iterators
    playing each part (names), and the reads staged through shared memory. ``k_major``: reads contiguous
    along ``k`` are stored ``k x width``, transposed on the copy (:meth:`stored_k_major`), so that a
    thread's fragment of each ``k`` loads 16 bytes at a time and only one ``k``'s fragments are live at
    once (off by default: slower, module docstring). ``min_blocks``: the ``__launch_bounds__`` minimum of blocks an SM (0: none), which caps the
    registers a thread may take."""

    statement: str
    rows: str
    lane: str
    reduction: str
    batch: tuple[str, ...]
    staged: tuple[StagedRead, ...]
    stages: int = STAGES
    block_rows: int = BLOCK_ROWS
    block_lanes: int = BLOCK_LANES
    k_stage: int = K_STAGE
    thread_rows: int = THREAD_ROWS
    thread_lanes: int = THREAD_LANES
    k_major: bool = False
    min_blocks: int = 0

    @property
    def threads(self) -> tuple[int, int]:
        """Threads per block along x (lanes) and y (rows)."""
        return self.block_lanes // self.thread_lanes, self.block_rows // self.thread_rows

    def stored_k_major(self, read: StagedRead) -> bool:
        """Whether ``read``'s tile is stored ``k x width`` (a run of the block's rows or lanes for each
        ``k``, so that a thread's fragment of one ``k`` is contiguous): always where the global address
        moves along the rows or lanes; for reads contiguous along ``k`` too where :attr:`k_major` is set,
        transposed element by element on the copy."""
        return read.contiguous in ("rows", "lane") or (self.k_major and read.contiguous == "k")

    def transposed(self, read: StagedRead) -> bool:
        """Whether the copy of ``read`` transposes it: contiguous along ``k`` in memory, ``k x width`` in
        its tile."""
        return self.k_major and read.contiguous == "k"

    def tile_shape(self, read: StagedRead) -> tuple[int, int]:
        """The (outer, inner) extents of one stage of ``read``'s shared tile, before padding."""
        width = self.block_rows if read.side == "rows" else self.block_lanes
        if self.stored_k_major(read):
            return self.k_stage, width
        return width, self.k_stage

    def padding(self, read: StagedRead, itemsize: int) -> int:
        """Elements of padding after each row of ``read``'s tile. A transposed tile gets 16 bytes: its
        copies store 8 values of ``k`` for each of 4 rows per warp, which then land in 32 different
        banks, and its rows stay 16-byte aligned for the fragment loads. A lane tile stored ``lanes x k``
        gets one element: it is read down a column by the 16 threads of a half-warp, which would hit two
        banks without it."""
        if self.transposed(read):
            return 16 // itemsize
        return int(read.side == "lane" and not self.stored_k_major(read))

    def shared_bytes(self, itemsizes: Mapping[int, int]) -> int:
        total = 0
        for r in self.staged:
            outer, inner = self.tile_shape(r)
            total += outer * (inner + self.padding(r, itemsizes[r.access])) * itemsizes[r.access]
        return total * self.stages

    def __str__(self) -> str:
        return (f"register micro-tile: {self.block_rows} x {self.block_lanes} outputs per block, {self.thread_rows} x "
                f"{self.thread_lanes} per thread in registers over all of {self.reduction}, {self.reduction} in steps of "
                f"{self.k_stage} with {len(self.staged)} operand tile(s) in shared memory, {self.stages} steps in flight "
                "(cp.async)")


def cuda_contraction(prog: Program, node: isl.ScheduleNode, shared_limit: int = SHARED_LIMIT
                     ) -> tuple[isl.ScheduleNode, CudaMicroTile] | None:
    """The band at ``node`` reordered ``(batch, rows, lane, reduction)`` and the plan, when it is a lone
    rectangular contraction at the root's depth (module docstring) whose operand tiles fit
    ``shared_limit`` bytes for two steps at least; else ``None``."""
    if node.get_type() != T.band or node.get_schedule_depth() != 0 or not node.band_get_permutable():
        return None
    found = find_contraction(prog, node)
    if found is None or found.inner or found.outer_reductions or len(found.others) > 1:
        return None
    if node.band_n_member() != len(found.order) or node.n_children() != 1 or node.child(0).get_type() != T.leaf:
        return None
    stmt = prog.statement(found.statement)
    dims = member_iterators(node, stmt)
    if dims is None or any(not node.band_member_get_coincident(m) for m in (*found.others, found.rows, found.lane)):
        return None
    plan = _plan(prog, stmt, found, dims, shared_limit)
    if plan is None:
        return None
    return reorder(node, found.order), plan


def sized_for_the_gpu(plan: CudaMicroTile, extents: list[int], itemsizes: Mapping[int, int], shared_limit: int = SHARED_LIMIT,
                      sms: int = SMS) -> CudaMicroTile:
    """``plan`` with the largest block tile that still launches at least one block per multiprocessor at
    the given sizes (``extents`` of the batch, rows and lane members; 0 unknown): :data:`TALL` (where
    every staged read has 4-byte elements, ``itemsizes`` by access, and two stages fit ``shared_limit``),
    then 64 x 64, then 32 x 32 (2 x 2 accumulators a thread, 2 x 1 for 8-byte ones). Where none
    fills the GPU (an MLP's narrow layer, a small batch of small matrices) the smallest is taken if it
    launches more blocks: idle SMs cost more than the lower reuse of a smaller tile. At unknown sizes,
    the 64 x 64 plan (``plan``) is kept."""
    if not extents or not all(extents):
        return plan

    def blocks(rows: int, lanes: int) -> int:
        n = -(-extents[-2] // rows) * -(-extents[-1] // lanes)
        for e in extents[:-2]:
            n *= e
        return n

    small = dataclasses.replace(plan, block_rows=32, block_lanes=32, thread_rows=2, thread_lanes=max(1, plan.thread_lanes // 2))
    tall = dataclasses.replace(plan, block_rows=TALL[0], block_lanes=TALL[1], thread_rows=TALL[2], thread_lanes=TALL[3],
                               **(TALL_K_MAJOR if plan.k_major else {}))
    stages = _stages(tall, itemsizes, shared_limit, plan.stages)
    tall = dataclasses.replace(tall, stages=stages)
    fits = set(itemsizes.values()) == {4} and plan.thread_lanes == THREAD_LANES and stages >= 2
    for candidate in ([tall] if fits else []) + [plan]:
        if blocks(candidate.block_rows, candidate.block_lanes) >= sms:
            return candidate
    return small if blocks(32, 32) > blocks(plan.block_rows, plan.block_lanes) else plan


def cuda_candidate(prog: Program, stmt: Statement, shared_limit: int = SHARED_LIMIT) -> bool:
    """Whether ``stmt`` alone has the shape of a CUDA micro-tile whose operand tiles fit ``shared_limit``
    bytes (used to distribute a kernel around it, ``microtile.distribute_contractions``)."""
    if not contraction_statement(stmt):
        return False
    write = access_coefficients(stmt.write.relation)
    if write is None:
        return False
    steps = [any(c[0][d] for c in write) for d in range(stmt.depth)]
    lane = [d for d in range(stmt.depth) if write[-1][0][d] == 1 and not any(c[0][d] for c in write[:-1])]
    reductions = [d for d in range(stmt.depth) if not steps[d]]
    if len(lane) != 1 or len(reductions) != 1 or stmt.depth > 4:
        return False
    rows = [d for d in range(stmt.depth) if steps[d] and d != lane[0]]
    for row in rows:  # some choice of rows must stage every read
        found = Contraction(stmt.name, row, lane[0], reductions[0], tuple(d for d in rows if d != row))
        if _plan(prog, stmt, found, list(range(stmt.depth)), shared_limit) is not None:
            return True
    return False


def _plan(prog: Program, stmt: Statement, found: Contraction, dims: list[int], shared_limit: int = SHARED_LIMIT
          ) -> CudaMicroTile | None:
    names = stmt.iterators
    rows, lane, red = dims[found.rows], dims[found.lane], dims[found.reduction]
    batch = tuple(dims[m] for m in found.others)
    if sorted((rows, lane, red, *batch)) != list(range(stmt.depth)) or not rectangular(stmt.domain):
        return None  # (an iterator outside the band, one fixed by the sizes, would need its value printed)
    if prog.arrays[stmt.write.array].dtype.bits // 8 not in (4, 8):
        return None
    staged: list[StagedRead] = []
    itemsizes: dict[int, int] = {}
    for k, acc in enumerate(stmt.accesses):
        if k == stmt.target:
            continue
        coeffs = access_coefficients(acc.relation)
        if coeffs is None:
            return None
        moves = lambda d: any(c[0][d] for c in coeffs)  # noqa: E731
        one = lambda d: coeffs[-1][0][d] == 1 and not any(c[0][d] for c in coeffs[:-1])  # noqa: E731
        if moves(rows) and moves(lane):
            return None
        if not (moves(rows) or moves(lane) or moves(red)):
            continue  # invariant in the tile (a batch-only or constant read): read where it is used
        side = "lane" if moves(lane) else "rows"
        contiguous = "k" if one(red) else ("lane" if one(lane) else ("rows" if one(rows) else ""))
        itemsize = prog.arrays[acc.array].dtype.bits // 8
        if itemsize not in (4, 8):
            return None
        itemsizes[k] = itemsize
        staged.append(StagedRead(k, side, contiguous))
    lanes = THREAD_LANES if prog.arrays[stmt.write.array].dtype.bits <= 32 else THREAD_LANES // 2
    plan = CudaMicroTile(stmt.name, names[rows], names[lane], names[red], tuple(names[b] for b in batch), tuple(staged),
                         thread_lanes=lanes)
    stages = _stages(plan, itemsizes, shared_limit, STAGES)
    if stages >= 2:
        return dataclasses.replace(plan, stages=stages)
    return None


def _stages(plan: CudaMicroTile, itemsizes: Mapping[int, int], shared_limit: int, most: int) -> int:
    """How many steps of ``plan``'s operand tiles fit ``shared_limit`` bytes (and the static limit), at most
    ``most``."""
    return min(most, min(shared_limit, SHARED_LIMIT) // max(plan.shared_bytes(itemsizes) // plan.stages, 1))


def rectangular(domain: isl.Set) -> bool:
    """Whether ``domain`` is the product of one interval per iterator (bounds in the sizes only: a kernel
    computes them once)."""
    n = domain.dim(isl.dim_type.set)
    if domain.dim(isl.dim_type.div) or domain.n_basic_set() != 1:
        return False
    product = isl.Set.universe(domain.get_space())
    for d in range(n):
        only = domain
        for e in sorted(set(range(n)) - {d}, reverse=True):
            only = only.eliminate(isl.dim_type.set, e, 1)
        if not isl.Set.from_basic_set(only.simple_hull()).is_equal(only):
            return False  # (a stride or a hole: not one interval)
        product = product & only
    return product.is_equal(domain)
