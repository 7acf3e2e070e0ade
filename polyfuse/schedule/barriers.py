"""``__syncthreads()`` around the compute of a kernel with shared buffers, from the dependences on them
(step 3 of ``promotion.py``).

With ``p`` the prefix at the ``block`` mark (host dims, tile coordinates, the hoisted ``kt``):

* a barrier **before** the compute when the flow dependence copy -> compute of the same ``p`` joins two
  different threads (a thread reads an element another thread copied);
* a barrier **after** the compute when the anti dependence compute -> copy of a later ``p`` of the same
  block (the next ``kt``) joins two different threads (a copy overwrites an element another thread still
  reads).

A barrier is a statement with no accesses printed ``__syncthreads()``, grafted at the ``block`` mark's
level, outside every thread guard, so every thread of the block reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from polyfuse.ir.expr import Const
from polyfuse.ir.program import Statement
from polyfuse.schedule.kernel_tree import diag, identity, prefix_map
from polyfuse.types import i32

# one shared copy: (buffer, copy -> buffer element written, copy domain, copy -> (p, thread coordinates))
Copy = tuple[str, isl.UnionMap, isl.Set, isl.UnionMap]


def barriers_needed(
    copies: Sequence[Copy], reads: isl.UnionMap, prefix: isl.UnionMap, thread: isl.UnionMap, depth: int, n: int, grid_depth: int
) -> tuple[bool, bool]:
    """(barrier before the compute, barrier after it) for the ``copies`` grafted at depth ``depth``.

    ``reads``: compute instance -> buffer element; ``prefix``: compute instance -> ``p``; ``thread``:
    compute instance -> (``p``, thread coordinates of the ``n``-member thread band); the first
    ``grid_depth`` coordinates of ``p`` name the block.
    """
    writes = None
    for _, w, _, _ in copies:
        writes = w if writes is None else writes.union(w)
    copy_threads = None
    for *_, t in copies:
        copy_threads = t if copy_threads is None else copy_threads.union(t)
    flow = writes.apply_range(reads.reverse())  # copy -> compute reading the element it wrote
    same_p = _prefix_of_copies(copies, depth).apply_range(prefix.reverse())
    flow = flow.intersect(same_p)
    sync_before = not _stays_in_thread(flow, copy_threads, thread, depth + n)
    anti = reads.apply_range(writes.reverse())  # compute -> copy overwriting the element it read
    later = prefix.apply_range(_later_same_block(depth, grid_depth)).apply_range(_prefix_of_copies(copies, depth).reverse())
    anti = anti.intersect(later)
    sync_after = not _stays_in_thread(anti.reverse(), copy_threads, thread, depth + n)
    return sync_before, sync_after


def sync_statement(name: str, prefixes: isl.UnionSet) -> tuple[Statement, isl.ScheduleNode]:
    """The barrier statement ``name[p]`` (one instance per prefix) and the extension node placing it."""
    dom = isl.Set.from_union_set(prefixes).set_tuple_name(name)
    ext = diag(isl.Map.from_domain_and_range(isl.Set.from_union_set(prefixes), dom))
    st = Statement(name, dom, (), 0, "=", Const(0, i32), 0, "__syncthreads()")
    return st, isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)


def _prefix_of_copies(copies: Sequence[Copy], depth: int) -> isl.UnionMap:
    """copy instance -> its prefix ``p`` (the first ``depth`` coordinates of a copy statement)."""
    out = None
    for _, _, dom, _ in copies:
        m = isl.UnionMap.from_map(prefix_map(dom, depth))
        out = m if out is None else out.union(m)
    return out


def _later_same_block(depth: int, grid_depth: int) -> isl.UnionMap:
    """``{ p -> p' : p' lexicographically after p, same first grid_depth coordinates }``."""
    space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, depth)
    rel = isl.Map.lex_lt(space)
    for k in range(grid_depth):
        rel = rel.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return isl.UnionMap.from_map(rel)


def _stays_in_thread(rel: isl.UnionMap, copy_threads: isl.UnionMap, thread: isl.UnionMap, dim: int) -> bool:
    """True when ``rel`` (copy -> compute) never joins two different threads (so no barrier is needed)."""
    if rel.is_empty():
        return True
    pairs = rel.apply_domain(copy_threads).apply_range(thread)
    return pairs.subtract(isl.UnionMap.from_map(identity(dim))).is_empty()
