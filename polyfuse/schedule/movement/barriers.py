"""``__syncthreads()`` in a kernel with shared buffers, placed from the dependences between the copy and
compute statements (step 3 of ``movement.py``).

With ``p`` the prefix at the ``block`` mark (host dims, tile coordinates, the hoisted ``kt``), one ``p``
runs three **phases** in order: the copy-ins, the compute, the copy-outs. A barrier can sit in three
**slots**: 1 between copy-ins and compute, 2 between compute and copy-outs, 3 after the copy-outs (the end
of ``p``). Two phases conflict when instances of them touch the same element (a buffer element, or, for the
copies, a global element), one of them writing, on two different threads of the block, either

* within one ``p`` (phase ``a`` before phase ``b``): a barrier is needed in one of the slots ``a+1 .. b``;
* from ``p`` to a later ``p'`` of the same block (the next ``kt``, a buffer reused): a barrier is needed
  after phase ``a`` at ``p`` or before phase ``b`` at ``p'``.

:func:`barrier_slots` returns the fewest slots meeting every need. A barrier is a statement with no
accesses printed ``__syncthreads()``, grafted at the ``block`` mark's level, outside every thread guard, so
every thread of the block reaches it. Threads are compared by their block and thread coordinates, so
instances at two ``p`` of one block on the same thread need no barrier.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from polyfuse.ir.expr import Const
from polyfuse.ir.program import Statement
from polyfuse.schedule.movement.kernel_tree import diag
from polyfuse.types import i32

SLOTS = (1, 2, 3)


@dataclass(frozen=True)
class Phase:
    """The statements of one phase: ``writes`` / ``reads`` map instances to the elements they write / read
    (``None``: none), ``thread`` maps them to ``(p, t)``, ``p`` the first ``depth`` coordinates."""

    writes: isl.UnionMap | None
    reads: isl.UnionMap | None
    thread: isl.UnionMap


def barrier_slots(phases: Sequence[Phase | None], depth: int, n: int, grid_depth: int) -> frozenset[int]:
    """The slots (1, 2, 3 as in the module docstring) that need a ``__syncthreads()``; ``phases`` are the
    copy-ins, the compute and the copy-outs (``None`` when absent), ``n`` the number of thread coordinates
    and the first ``grid_depth`` coordinates of ``p`` name the block. Slot 3 is not used when there are no
    copy-outs (slot 2 is then the same place)."""
    same_p = _same_prefix(depth, n, equal=True, grid_depth=grid_depth)
    later_p = _same_prefix(depth, n, equal=False, grid_depth=grid_depth)
    other_thread = _other_thread(depth, n, grid_depth)
    needs: list[set[int]] = []
    present = [k for k, ph in enumerate(phases) if ph is not None]
    for a, b in itertools.product(present, present):
        if a < b and _conflict(phases[a], phases[b], same_p, other_thread):
            needs.append(set(range(a + 1, b + 1)))
        if _conflict(phases[a], phases[b], later_p, other_thread):
            needs.append(set(range(a + 1, 4)) | set(range(1, b + 1)))
    if phases[2] is None:
        needs = [{2 if s == 3 else s for s in need} for need in needs]
    slots = SLOTS if phases[2] is not None else SLOTS[:2]
    for size in range(len(slots) + 1):
        for chosen in itertools.combinations(slots, size):
            if all(need & set(chosen) for need in needs):
                return frozenset(chosen)
    return frozenset(slots)


def sync_statement(name: str, prefixes: isl.UnionSet) -> tuple[Statement, isl.ScheduleNode]:
    """The barrier statement ``name[p]`` (one instance per prefix) and the extension node placing it."""
    dom = isl.Set.from_union_set(prefixes).set_tuple_name(name)
    ext = diag(isl.Map.from_domain_and_range(isl.Set.from_union_set(prefixes), dom))
    st = Statement(name, dom, (), 0, "=", Const(0, i32), 0, "__syncthreads()")
    return st, isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)


def _conflict(a: Phase, b: Phase, prefixes: isl.UnionMap, other_thread: isl.UnionMap) -> bool:
    """Whether an instance of ``a`` and one of ``b`` touch one element, one writing, with their
    ``(p, t)`` related by ``prefixes`` and ``other_thread`` (different threads of the block)."""
    rel = None
    for x, y in ((a.writes, b.writes), (a.writes, b.reads), (a.reads, b.writes)):
        if x is not None and y is not None:
            m = x.apply_range(y.reverse())
            rel = m if rel is None else rel.union(m)
    if rel is None or rel.is_empty():
        return False
    pairs = rel.apply_domain(a.thread).apply_range(b.thread)
    return not pairs.intersect(prefixes).intersect(other_thread).is_empty()


def _same_prefix(depth: int, n: int, equal: bool, grid_depth: int) -> isl.UnionMap:
    """``(p, t) -> (p', t')`` with ``p' = p`` (``equal``) or ``p'`` lexicographically after ``p`` in the
    same block (same first ``grid_depth`` coordinates)."""
    space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, depth)
    rel = isl.Map.identity(isl.Space.map_from_set(space)) if equal else isl.Map.lex_lt(space)
    for k in range(grid_depth):
        rel = rel.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    threads = isl.Map.universe(isl.Space.map_from_set(isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, n)))
    return isl.UnionMap.from_map(rel.flat_product(threads))


def _other_thread(depth: int, n: int, grid_depth: int) -> isl.UnionMap:
    """``(p, t) -> (p', t')`` on two different threads: different block or different ``t``."""
    space = isl.Space.map_from_set(isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, depth + n))
    same = isl.Map.universe(space)
    for k in [*range(grid_depth), *range(depth, depth + n)]:
        same = same.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return isl.UnionMap.from_map(isl.Map.universe(space).subtract(same))
