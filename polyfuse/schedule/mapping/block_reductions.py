"""Reductions into one element on CUDA: the threads of the launch share the loop instead of one thread
walking it.

A sum over a whole array (``y += x[i]``, ``pf.ops.sum`` to a scalar) forms a kernel with no parallel
loop: every instance updates the same element, so ``mapping.py`` leaves it to a single thread, which
then reads the array at the speed of one thread and keeps the accumulator in global memory. Since the
operator is associative and commutative (up to float rounding, which ``reassociate=True`` accepts; max
and min are exact), the instances may run in any order. :func:`block_reductions` re-lays such kernels:

* **When.** A CUDA kernel with no parallel loop and one statement (at the top of the program, or below host
  loops that fix the statement's outer iterators: durbin's and gramschmidt's inner products, one launch
  per outer iteration), a reduction (``X op= e`` or ``X = f(X, e)``, ``f`` in sum, max, min; ``rows.reduction_op``)
  into a single element of ``X`` that is the same for every instance and for all sizes, whose value reads
  ``X`` only as the accumulator, and whose only dependences on itself are on ``X``. A float sum needs
  ``reassociate=True``. At concrete sizes, at least :data:`MIN_INSTANCES` instances per launch (at most);
  no promoted buffer.
* **Layout.** ``kernel`` -> ``reduce`` mark (a :class:`~polyfuse.schedule.mapping.rows.RowReduction` with
  the element) -> ``cyclic`` mark -> the statement's outermost loop (shared cyclically by the threads),
  then its inner loops (sequential in each thread). Each thread accumulates a register from the operator's
  identity; a block reduction (warp shuffles, then shared memory) combines the block; thread 0 of each
  block adds the block's value to the element with ``atomicAdd`` (sums: the loop is shared by the threads
  of every block of the grid) or, for max and min, the single block's thread 0 combines it with the
  element's incoming value and stores it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import islpy as isl

from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.mapping.rows import REDUCE_SCRATCH, RowReduction, block_size, loop_band, reduction_op
from polyfuse.schedule.model import BASE_KEY, CYCLIC_MARK, KERNEL_MARK, REDUCE_MARK, Kernel, Schedule
from polyfuse.schedule.movement.kernel_tree import kernel_marks

MIN_INSTANCES = 1024
"""At concrete sizes, fewer instances than this stay on one thread (a launch's worth of work at most)."""
BLOCKS = 264
"""Blocks sharing a sum's loop (two per H100 SM) when the sizes are unknown or large enough."""
PER_THREAD = 8
"""At concrete sizes, at least this many instances per thread before another block is added."""
DTYPES = ("f32", "f64", "i32")
"""Element types with block-reduction helpers (``codegen/cuda_rows.py``) and an ``atomicAdd``."""


def block_reductions(sched: Schedule, reassociate: bool = True) -> Schedule:
    """``sched`` (target ``"cuda"``) with every qualifying kernel re-laid as in the module docstring."""
    if sched.target != "cuda":
        return sched
    prog = sched.program
    promoted = {b.kernel for b in sched.promotion.buffers} if sched.promotion is not None else set()
    marks = {m.mark_get_id().user.name: m for m in kernel_marks(sched.tree)}
    changed: dict[str, tuple[Kernel, RowReduction, int]] = {}
    for k in sched.kernels:
        if k.name in promoted or k.parallel_depth or k.serial or len(k.statements) != 1 or k.name not in marks:
            continue
        s = prog.statement(k.statements[0])
        host = _host_loops(marks[k.name], s)
        plan = _plan(prog, s, reassociate, sched.params, host) if host is not None else None
        if plan is not None:
            changed[k.name] = (_kernel(k, *plan), plan[0], host)
    if not changed:
        return sched
    tree = _rewrite(prog, sched.tree, changed)
    if tree is None:
        return sched
    promotion = sched.promotion
    if promotion is not None:
        ptree = _rewrite(prog, promotion.tree, changed)
        if ptree is None:
            return sched
        kernels = {name: changed[name][0] if name in changed else k for name, k in promotion.kernels.items()}
        promotion = dataclasses.replace(promotion, tree=ptree, kernels=kernels)
    kernels = tuple(changed[k.name][0] if k.name in changed else k for k in sched.kernels)
    new = dataclasses.replace(sched, tree=tree, kernels=kernels, promotion=promotion)
    if BASE_KEY in sched._lazy:  # (what to_text prints: the order before mapping, unchanged here)
        new._lazy[BASE_KEY] = sched._lazy[BASE_KEY]
    return new


def _host_loops(mark: isl.ScheduleNode, s: Statement) -> int | None:
    """How many of ``s``'s outer loops the host loops around its kernel are: the schedule prefix at the
    kernel mark fixes exactly ``s``'s first ``n`` iterators (one launch runs the rest); None when the
    prefix is not that (a skewed host loop)."""
    n = mark.get_schedule_depth()
    if n == 0:
        return 0
    if s.depth <= n:
        return None
    prefix = isl.Map.from_union_map(mark.get_prefix_schedule_union_map().intersect_domain(isl.UnionSet.from_set(s.domain)))
    same_launch = prefix.apply_range(prefix.reverse())  # pairs of instances in one launch
    same_outer = isl.Map.from_domain_and_range(s.domain, s.domain)
    for d in range(n):
        same_outer = same_outer.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
    return n if same_launch.is_equal(same_outer) else None


def _plan(prog: Program, s: Statement, reassociate: bool, params: Mapping[str, int], host: int = 0) -> tuple[RowReduction, int, int] | None:
    """(the reduction, blocks, threads per block) when ``s`` qualifies below ``host`` host loops, else None."""
    op = reduction_op(s)
    x = s.write.array
    dtype = prog.arrays[x].dtype
    if s.depth <= host or op not in ("sum", "max", "min") or dtype.name not in DTYPES:
        return None
    if op == "sum" and dtype.is_float and not reassociate:
        return None
    element = _constant_element(s)
    if element is None:
        return None
    reads_of_x = [k for k, a in enumerate(s.accesses) if k != s.target and a.array == x]
    if len(reads_of_x) != (0 if s.op in ("+=", "-=") else 1):
        return None
    if any(d.source == s.name and d.sink == s.name and d.array != x for d in dependences_of(prog)):
        return None
    instances = _instances(prog, s, params, host)
    if instances is not None and instances < MIN_INSTANCES:
        return None
    # (a quarter of the loop's share of a block: the sizing measured for the sum of 2^26 floats, 85 % of copy)
    threads = block_size(None if instances is None else max(instances // PER_THREAD, 1), share=4)
    blocks = 1
    if op == "sum":
        blocks = BLOCKS if instances is None else max(1, min(BLOCKS, math.ceil(instances / (PER_THREAD * threads))))
    return RowReduction(s.name, x, op, dtype, element, blocks > 1 or op == "sum"), blocks, threads


def _constant_element(s: Statement) -> tuple[int, ...] | None:
    """The one element ``s`` writes, the same for every instance and every size, else None."""
    rng = s.write.relation.intersect_domain(s.domain).range()
    if rng.is_empty():
        return None
    out = []
    for d in range(rng.dim(isl.dim_type.set)):
        lo, hi = rng.dim_min_val(d), rng.dim_max_val(d)
        if not (lo.is_int() and hi.is_int()) or lo.to_python() != hi.to_python():
            return None
        out.append(int(lo.to_python()))
    return tuple(out)


def domain_at(s: Statement, params: Mapping[str, int]) -> isl.Set:
    """``s``'s domain with every size param fixed to its value in ``params``."""
    dom = s.domain
    for k, p in enumerate(dom.get_space().get_var_names(isl.dim_type.param)):
        dom = dom.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(dom.get_ctx(), int(params[p])))
    return dom


def _instances(prog: Program, s: Statement, params: Mapping[str, int], host: int = 0) -> int | None:
    """How many instances of ``s`` one launch runs at ``params``, at most (None when some size is
    unknown): all of them, or below host loops the product of the inner loops' extents."""
    if any(p not in params for p in prog.params):
        return None
    dom = domain_at(s, params)
    if dom.is_empty():
        return 0
    if host == 0:
        count = dom.count_val()
        return int(count.to_python()) if count.is_int() else None
    total = 1
    for d in range(host, s.depth):
        lo, hi = dom.dim_min_val(d), dom.dim_max_val(d)
        if not (lo.is_int() and hi.is_int()):
            return None
        total *= int(hi.to_python()) - int(lo.to_python()) + 1
    return total


def _kernel(k: Kernel, reduction: RowReduction, blocks: int, threads: int) -> Kernel:
    scratch = REDUCE_SCRATCH * int(reduction.dtype.numpy().itemsize)
    spread = f"{blocks} block(s) of {threads} threads" if blocks > 1 else f"one block of {threads} threads"
    combine = "one atomicAdd per block" if reduction.across_blocks else "thread 0 combining the result with the element"
    why = (f"a {reduction.op} into one element of {reduction.array!r}: the loop shared by {spread}, each thread "
           f"accumulating in a register, a block reduction, then {combine}")
    return dataclasses.replace(k, grid=(blocks,), block=(threads,), shared_bytes=k.shared_bytes + scratch, reduction=why)


def _rewrite(prog: Program, tree: isl.Schedule, changed: Mapping[str, tuple[Kernel, RowReduction, int]]) -> isl.Schedule | None:
    """``tree`` with the subtree of every kernel in ``changed`` rebuilt as the module docstring lays it out
    (below its ``host`` host loops); None when a kernel's mark is not where it was planned."""
    for name, (kernel, reduction, host) in changed.items():
        mark = next((m for m in kernel_marks(tree) if m.mark_get_id().user.name == name), None)
        if mark is None or mark.get_schedule_depth() != host:
            return None
        s = prog.statement(kernel.statements[0])
        node = mark.child(0).cut()
        if s.depth > host + 1:
            node = node.insert_partial_schedule(loop_band([s], host + 1, s.depth))
        node = node.insert_partial_schedule(loop_band([s], host, host + 1)).band_member_set_ast_loop_type(0, isl.ast_loop_type.atomic)
        node = node.insert_mark(isl.Id(CYCLIC_MARK))
        node = node.insert_mark(isl.Id(REDUCE_MARK, user=(reduction,)))
        node = node.parent().delete().insert_mark(isl.Id(KERNEL_MARK, user=kernel))
        tree = node.get_schedule()
    return tree
