"""Shared-memory promotion in one CUDA kernel (step 2 of ``movement.py``), with the copy statements and
barriers it needs.

At the ``block`` mark (prefix ``p`` = host dims, tile coordinates, ``kt``; thread coordinates ``t``) an
array ``X`` of the kernel gets the buffer ``X_shared_kN`` when

* **reuse**: some element is touched by more than one thread for one ``p`` (an exact isl test:
  ``R o R^-1`` minus the identity is not empty, ``R`` = ``(p, t)`` -> element); for an array the kernel
  writes, that can only be elements read by several threads that no thread of the tile writes (anything
  else would be a dependence between threads, which the mapping excludes);
* or **coalescing**: neighbouring threads (``threadIdx.x``, ``threadIdx.x + 1``) of some access touch
  elements that differ in a dimension other than the innermost (``access_patterns.walks_outer_dim``: a
  transpose ``B[j, i] = A[i, j]`` with ``threadIdx.x`` on ``j``), so that its global reads or writes are
  not coalesced; the copies touch the box with ``threadIdx.x`` on the innermost dimension instead.

The buffer holds the per-tile footprint box ``F = P^-1 o Acc`` (``footprint_box.py``) with offset
``off(p)`` affine in ``p``; compute accesses become ``X_shared[acc(i) - off(P(i))]``. When the compute's
own accesses to the buffer are transposed, the innermost buffer dimension is padded by one element (when
even), so that the threads of a warp walking a column hit different banks. The copies (``copies.py``):

* **copy-in** before the compute: a read-only array: ``box(p) & extent(X)``; a written one: exactly the
  elements the tile reads that no earlier instance of the tile wrote (``access_patterns.live_in_reads``);
* **copy-out** after the compute (written arrays): exactly the elements the tile writes, never the rest of
  the box, so elements the program does not write are never clobbered.

Arrays are taken in order of reuse (accesses per footprint element in one tile) while the buffers fit the
budget. Barriers come from ``barriers.py`` over the three phases (copy-ins, compute, copy-outs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl

from polyfuse.analysis.checks import array_extent
from polyfuse.schedule.model import Buffer
from polyfuse.schedule.movement.access_patterns import live_in_reads, walks_outer_dim
from polyfuse.schedule.movement.barriers import Phase, barrier_slots
from polyfuse.schedule.movement.copies import copy_statement, copy_threads, lanes, shared_copy_tree
from polyfuse.schedule.movement.footprint_box import box_map, fixed_box, volume
from polyfuse.schedule.movement.kernel_tree import grid_end, identity, root

if TYPE_CHECKING:
    from polyfuse.schedule.movement.promotion import KernelWork

READS = ("read", "update")
WRITES = ("write", "update")
SECTOR_BYTES = 32  # the unit of a global memory transaction


def promote_shared(work: KernelWork, block: isl.ScheduleNode, budget: int, rest: isl.UnionMap | None) -> isl.Schedule:
    """Promote the kernel's arrays that pay to shared buffers (module docstring); ``rest`` is the schedule
    of the subtree below the point band (``None`` for a leaf), taken before any register copy was grafted
    there. Returns the tree with the copies and barriers grafted at the ``block`` mark."""
    point = block.child(0)
    n = point.band_n_member()
    if len(work.block_sizes) != n:
        return block.get_schedule()
    ctx = work.prog.context
    domain = block.get_domain()
    names = work.names(domain)
    prefix = block.get_prefix_schedule_union_map().intersect_domain(domain)
    depth = block.get_schedule_depth()
    thread = prefix.flat_range_product(point.band_get_partial_schedule_union_map())
    time = thread if rest is None else thread.flat_range_product(rest.intersect_domain(thread.domain()))
    node = block
    ins: list[tuple[isl.UnionMap, isl.UnionMap, isl.UnionMap]] = []  # (buffer writes, global reads, threads)
    outs: list[tuple[isl.ScheduleNode, isl.UnionMap, isl.UnionMap, isl.UnionMap]] = []  # (+ tree to graft)
    for reuse, x, foot, offset, shape, declared, nbytes in _within_budget(_plans(work, block, rest), budget):
        arr = work.prog.arrays[x]
        writes = _union(work.accesses(names, x, WRITES))
        if writes is None:
            fill = box_map(foot.domain(), offset, shape).intersect_range(array_extent(arr, work.prog.params))
        else:
            fill = live_in_reads(work.accesses(names, x, READS), writes, time, prefix)
            fill = isl.Map.from_union_map(fill) if fill is not None else None
        drain = isl.Map.from_union_map(prefix.reverse().apply_range(writes)) if writes is not None else None
        buf = work.fresh(f"{x}_shared_{work.tag}")
        work.buffers.append(Buffer(buf, x, work.kernel.name, "shared", declared, arr.dtype, reuse))
        off = isl.PwMultiAff.from_multi_aff(offset)
        work.rewrite(names, x, buf, lambda s: off.pullback_pw_multi_aff(_pma(prefix, s)))
        if fill is not None and not fill.intersect_params(ctx).is_empty():
            name = work.fresh(f"copy_{buf}")
            ext, cst, local = copy_statement(name, fill.intersect_params(ctx), offset, x, buf, arr.dtype)
            work.statements[name] = cst
            idx = lanes(local, shape, work.block_sizes)
            node = node.graft_before(shared_copy_tree(ext, idx, n, work.block_sizes))
            threads = copy_threads(cst.domain, depth, idx, n, work.block_sizes)
            ins.append((_rel(cst, 0), _rel(cst, 1), threads))
        if drain is not None:
            name = work.fresh(f"copyout_{buf}")
            ext, cst, local = copy_statement(name, drain.intersect_params(ctx), offset, x, buf, arr.dtype, out=True)
            work.statements[name] = cst
            idx = lanes(local, shape, work.block_sizes)
            threads = copy_threads(cst.domain, depth, idx, n, work.block_sizes)
            outs.append((shared_copy_tree(ext, idx, n, work.block_sizes), _rel(cst, 0), _rel(cst, 1), threads))
    if not ins and not outs:
        return node.get_schedule()
    buffers = {b.name for b in work.buffers if b.space == "shared"}
    compute = Phase(_union([work.to_buffers(names, buffers, WRITES)]), _union([work.to_buffers(names, buffers, READS)]), thread)
    phases = [
        Phase(_union([w for w, _, _ in ins]), _union([r for _, r, _ in ins]), _union([t for *_, t in ins])) if ins else None,
        compute,
        Phase(_union([w for _, w, _, _ in outs]), _union([r for _, _, r, _ in outs]), _union([t for *_, t in outs])) if outs else None,
    ]
    slots = barrier_slots(phases, depth, n, grid_end(block))
    prefixes = prefix.range()
    if 1 in slots:
        node = node.graft_before(root(work.sync(prefixes)))
    if 3 in slots:
        node = node.graft_after(root(work.sync(prefixes)))
    for tree, *_ in reversed(outs):
        node = node.graft_after(tree)
    if 2 in slots:
        node = node.graft_after(root(work.sync(prefixes)))
    return node.get_schedule()


def shared_arrays(work: KernelWork, block: isl.ScheduleNode, budget: int, rest: isl.UnionMap | None) -> set[str]:
    """The arrays :func:`promote_shared` would give a shared buffer (same arguments), without promoting
    them: the register windows (``registers.py``) leave those to shared memory."""
    if len(work.block_sizes) != block.child(0).band_n_member():
        return set()
    return {plan[1] for plan in _within_budget(_plans(work, block, rest), budget)}


def _plans(work: KernelWork, block: isl.ScheduleNode, rest: isl.UnionMap | None) -> list[tuple]:
    """``(reuse, array, footprint, offset, box shape, declared shape, bytes)`` of every array that would pay
    in shared memory (reuse across threads, or a transposed access), most reused first."""
    point = block.child(0)
    n = point.band_n_member()
    ctx = work.prog.context
    domain = block.get_domain()
    names = work.names(domain)
    prefix = block.get_prefix_schedule_union_map().intersect_domain(domain)
    depth = block.get_schedule_depth()
    thread = prefix.flat_range_product(point.band_get_partial_schedule_union_map())
    time = thread if rest is None else thread.flat_range_product(rest.intersect_domain(thread.domain()))
    plans = []
    for x in work.arrays(names):
        accesses = work.accesses(names, x)
        acc = _union(accesses)
        transposed = any(walks_outer_dim(a, time, depth + n - 1, ctx) for a in accesses)
        reused = _cross_thread(thread, acc, depth, n)
        if not (transposed or reused):
            continue
        foot = isl.Map.from_union_map(prefix.reverse().apply_range(acc))
        box = fixed_box(foot)
        if box is None:
            continue
        offset, shape = box
        itemsize = work.prog.arrays[x].dtype.numpy().itemsize
        if transposed and not reused and shape[-1] * itemsize < SECTOR_BYTES:
            continue  # a row of the box is narrower than a memory sector: the copies would not coalesce either
        declared = shape[:-1] + (shape[-1] + 1,) if transposed and shape[-1] % 2 == 0 else shape
        nbytes = volume(declared) * itemsize
        plans.append((work.reuse(names, x, prefix, foot), x, foot, offset, shape, declared, nbytes))
    plans.sort(key=lambda c: -c[0])
    return plans


def _within_budget(plans: list[tuple], budget: int) -> list[tuple]:
    """The plans taken in order while their buffers fit ``budget`` bytes (a plan that does not fit is
    skipped, and a later, smaller one may still be taken)."""
    used, out = 0, []
    for plan in plans:
        if used + plan[-1] <= budget:
            used += plan[-1]
            out.append(plan)
    return out


def shared_candidates(work: KernelWork, block: isl.ScheduleNode) -> list[str]:
    """Arrays read (never written) in the kernel of which one tile's threads read some element twice: the
    kernels where hoisting a reduction tile loop above the threads pays (``movement.restructure``)."""
    point = block.child(0)
    domain = block.get_domain()
    names = work.names(domain)
    prefix = block.get_prefix_schedule_union_map().intersect_domain(domain)
    thread = prefix.flat_range_product(point.band_get_partial_schedule_union_map())
    depth, n = block.get_schedule_depth(), point.band_n_member()
    return [x for x in work.arrays(names)
            if not work.accesses(names, x, WRITES) and _cross_thread(thread, _union(work.accesses(names, x)), depth, n)]


def _cross_thread(thread: isl.UnionMap, acc: isl.UnionMap, depth: int, n: int) -> bool:
    """Whether two different threads of one block (``thread``: instance -> ``(p, t)``, ``p`` of ``depth``
    and ``t`` of ``n`` coordinates) touch one element of ``acc`` for one ``p``."""
    r = thread.reverse().apply_range(acc)
    same_p = identity(depth).flat_product(isl.Map.universe(isl.Space.map_from_set(isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, n))))
    pairs = r.apply_range(r.reverse()).intersect(isl.UnionMap.from_map(same_p))
    return not pairs.subtract(isl.UnionMap.from_map(identity(depth + n))).is_empty()


def _union(maps) -> isl.UnionMap | None:
    out = None
    for m in maps:
        if m is not None:
            out = m if out is None else out.union(m)
    return out


def _rel(st, k: int) -> isl.UnionMap:
    return isl.UnionMap.from_map(st.accesses[k].relation)


def _pma(prefix: isl.UnionMap, st) -> isl.PwMultiAff:
    return isl.PwMultiAff.from_map(isl.Map.from_union_map(prefix.intersect_domain(isl.UnionSet.from_set(st.domain))))
