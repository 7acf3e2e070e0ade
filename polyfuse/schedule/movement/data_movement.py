"""Explicit data movement for the CUDA target: shared-memory and register promotion as copy statements.

:func:`data_movement` runs after mapping (``mapping.py``) on a legal tree and returns the tree plus a
:class:`~polyfuse.schedule.model.Promotion`. Everything it adds is an ordinary statement placed in the
schedule tree by an isl **extension node** (``ScheduleNode.graft_before`` / ``graft_after``), so the AST
build prints copies like any statement and indexes them through isl.

Per CUDA kernel (``kernel`` -> ``grid`` -> tile band -> ``block`` -> point band -> rest):

1. **Reduction tiling** (:func:`restructure`, here). When the rest is a band of the same permutable band
   (gemm's ``k``), it is tiled by ``K_TILE`` and its tile loop moved above the thread band:
   ``it, jt -> kt -> [block] ii, jj -> kk`` with ``k = K_TILE*kt + kk, 0 <= kk < K_TILE``. This is
   rectangular tiling of a permutable band, so legal; ``check_schedule`` re-checks it.
2. **Shared memory** (``shared.py``), at the ``block`` mark (prefix ``p`` = host dims, tile coordinates,
   ``kt``): an array gets a buffer the size of its per-tile footprint box (``footprint_box.py``) when
   several threads of the block touch one of its elements for one ``p`` (reuse), or when neighbouring
   ``threadIdx.x`` touch elements that differ outside the innermost dimension (a transposed, uncoalesced
   access, ``access_patterns.py``); by reuse, within the shared-memory budget. Compute accesses are
   redirected to the buffer (its innermost dimension padded by one when the compute walks it transposed,
   against bank conflicts). Copy statements (``copies.py``) move data with consecutive threads on
   consecutive global addresses: a **copy-in** before the compute (read-only array: ``box(p) &
   extent(X)``; written array: exactly the elements read before being written in the tile) and, for a
   written array, a **copy-out** after it of exactly the elements the tile writes.
3. **Barriers** (``barriers.py``) from the dependences between the phases copy-in, compute, copy-out on
   the buffers (and, between copies, on the global array): a ``sync`` between two phases of one ``p``
   whose instances on different threads touch one element, one writing (copy -> compute flow, compute ->
   copy-out flow), and between a phase of ``p`` and one of a later ``p`` of the same block (the next
   ``kt``: anti dependences on a reused buffer); the fewest barriers meeting all of them. Barriers sit at
   the level of the ``kt`` loop, outside every thread guard.
4. **Registers**, below the thread band. Accumulators (``promotion.py``): an array of which each thread
   iteration touches exactly one element, touched by no other thread, and accessed more than once (an
   accumulator ``C[i,j] += ...`` over ``kk``) is loaded into ``X_reg_kN`` before (unless written before
   any read) and stored after (when written). Register windows (``registers.py``): an array the kernel
   only reads, not staged in shared memory, whose reads in the thread's innermost sequential loop ``s``
   differ only by constants along ``s`` (``A[i,j,k-1]``, ``A[i,j,k]``, ``A[i,j,k+1]`` of heat-3d with
   ``i, j`` on threads; isl gives the affine functions of the time) is kept in ``X_w0_kN .. X_wD_kN``
   (reuse distance ``D <= 4``): the first ``D`` loaded before the loop, one new element loaded at the
   start of each iteration, the window rotated (``X_w0 = X_w1; ...``) after the compute, so that each
   element is loaded from global memory once per thread.

Everything added is a statement of ``Promotion.statements`` in ``Promotion.tree``; the compute tree
(``Schedule.tree``, what ``check_schedule`` and the traffic model see) is unchanged by steps 2-4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import islpy as isl

from polyfuse.analysis.legality import check_schedule
from polyfuse.errors import IllegalTransformError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import T
from polyfuse.schedule.model import BLOCK_MARK, Kernel, Promotion
from polyfuse.schedule.movement.kernel_tree import count_kernels, kernel_mark, kernel_parts, with_kernels
from polyfuse.schedule.movement.promotion import DEFAULT_SHARED_BYTES, promote, shared_candidates
from polyfuse.schedule.tiling.sizes import tile_band

K_TILE = 32


def data_movement(
    prog: Program,
    tree: isl.Schedule,
    kernels: tuple[Kernel, ...],
    privatized: Mapping[str, isl.UnionMap],
    budget: int = DEFAULT_SHARED_BYTES,
    sizes: Mapping[str, int] | None = None,
) -> tuple[isl.Schedule, tuple[Kernel, ...], Promotion | None]:
    """The whole pass for a CUDA schedule: reduction tiling (re-checked for legality), then promotion.

    Returns the compute tree (what legality and traffic see), the kernels with their ``shared_bytes``, and
    the promotion (``None`` when nothing was promoted).
    """
    contracted = frozenset(privatized)
    moved = restructure(prog, tree, contracted)
    if moved is not tree:
        try:
            check_schedule(prog, moved, privatized)
            tree = moved
        except IllegalTransformError:
            pass
    full, promotion = promote(prog, tree, contracted, budget, sizes=sizes)
    if promotion is None:
        return tree, kernels, None
    tree = with_kernels(tree, promotion.kernels)
    kernels = tuple(promotion.kernels.get(k.name, k) for k in kernels)
    return tree, kernels, dataclasses.replace(promotion, tree=full)


def restructure(prog: Program, tree: isl.Schedule, contracted: frozenset[str] = frozenset(), k_tile: int = K_TILE) -> isl.Schedule:
    """Tile the sequential rest of a CUDA kernel's permutable band and hoist its tile loop above the
    thread band (step 1 of the module docstring), in kernels where some read-only array is read by several
    threads of a block. Other kernels are unchanged; returns ``tree`` itself when nothing changed."""
    for n in range(count_kernels(tree)):
        mark = kernel_mark(tree, n)
        parts = kernel_parts(mark)
        if parts is None or not isinstance(mark.mark_get_id().user, Kernel):
            continue
        tile, block = parts
        if block.parent().get_type() == T.band and block.parent() != tile:
            continue
        if not shared_candidates(prog, mark.mark_get_id().user, contracted, block):
            continue
        point = block.child(0)
        rest = point.child(0)
        if not (rest.get_type() == T.band and tile.band_get_permutable() and rest.band_get_permutable()):
            continue
        if rest.band_n_member() > 1 and _touches_private(prog, rest, contracted):
            # tiling several members reorders each thread's own instances, which a per-thread register
            # (contracted temporary, 0-d temporary) may not survive; check_schedule cannot see that
            continue
        n_thread = point.band_n_member()
        mupa = point.band_get_partial_schedule()
        node = block.delete().delete()  # now at the rest band
        node = tile_band(node, (k_tile,) * node.band_n_member()).child(0)
        node = node.insert_partial_schedule(mupa).band_set_permutable(1)
        for m in range(n_thread):
            node = node.band_member_set_coincident(m, 1)
        tree = node.insert_mark(isl.Id(BLOCK_MARK)).get_schedule()
    return tree




def _touches_private(prog: Program, node: isl.ScheduleNode, contracted: frozenset[str]) -> bool:
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    arrays = {a.array for n in names for a in prog.statement(n).accesses}
    return any(x in contracted or (prog.arrays[x].role == "temp" and prog.arrays[x].ndim == 0) for x in arrays if x in prog.arrays)
