"""Sums into a vector on CUDA: ``y[j] += f(A[i, j], ...)`` summed over ``i`` (a *column* sum) or
``y[i] += f(A[i, j], ...)`` summed over ``j`` (a *row* sum, gemv) by many threads per element, not one.

A sum into a vector along one loop maps the vector's loop to threads and leaves the whole other loop to
each thread: atax's ``y[j] += A[i][j] * tmp[i]`` over 2000 columns is 63 blocks of 32 threads on an H100's
132 SMs, each thread walking 1900 rows; its ``tmp[i] += A[i][j] * x[j]`` also reads ``A`` a row apart
between neighbouring threads. Since a sum may be reassociated (``reassociate=True``; integers always), the
loop summed over can be shared. :func:`vector_sums` (a pass after mapping, like
``block_reductions.py``) re-lays such kernels:

* **When.** A CUDA kernel of one statement of depth 2 at the root's depth (no host loop around it) whose
  value adds to one element of a global array per iteration of one loop (``X[v] += e`` or
  ``X[v] = X[v] + e``; ``rows.reduction_op`` is a sum), the other loop not moving ``X``; both bounds
  functions of the sizes alone; ``e`` not reading ``X``; f32, f64 or i32 (``atomicAdd`` exists for them).
  *Columns*: ``X``'s loop moves ``X`` and every read that moves with it by one element (coalesced along
  the vector). *Rows*: every read that moves with the summed loop moves by one element along it.
* **Columns** (printed by ``codegen/cuda_vector_sums.py``). Blocks of 32 x 8 threads: ``threadIdx.x`` along 32
  consecutive elements, ``threadIdx.y`` and ``blockIdx.y`` sharing the summed loop cyclically; each thread
  sums in a register, the block's 8 partial sums of an element are added through shared memory, and one
  ``atomicAdd`` per element and block adds them to it. ``blockIdx.y`` takes enough slices for two blocks per
  SM where the element blocks are fewer (264 blocks with unknown sizes, at least 8 iterations a thread).
* **Rows**. A warp per element, 8 per block: the 32 lanes share the summed loop (consecutive addresses),
  a warp shuffle adds their sums, and lane 0 adds the total to the element.

The schedule tree keeps the ordinary mapping (legality and traffic see it); the plan rides on
``Kernel.vector_sum``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.ir.expr import Binary, Expr, Read
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.mapping.block_reductions import domain_at
from polyfuse.schedule.mapping.rows import reduction_op
from polyfuse.schedule.model import BASE_KEY, Kernel, Schedule
from polyfuse.schedule.movement.kernel_tree import kernel_marks, with_kernels
from polyfuse.schedule.tiling.accesses import access_coefficients
from polyfuse.schedule.tiling.cuda_microtile import rectangular

LANES = 32  # threadIdx.x: consecutive columns
SLICES = 8  # threadIdx.y: rows shared in a block
BLOCKS = 264  # two per H100 SM
PER_THREAD = 8  # at known sizes, at least this many rows per thread before another row slice is added
DTYPES = ("f32", "f64", "i32")


@dataclass(frozen=True)
class VectorSum:
    """The plan of a sum into a vector: the statement, the loop of the vector's element (``column``:
    its iterator's name) and the loop summed over (``row``), the layout (``"columns"`` or ``"rows"``), the
    slices of the summed loop along ``blockIdx.y`` (columns), and the value added (``increment``)."""

    statement: str
    column: str
    row: str
    slices: int
    increment: Expr
    layout: str = "columns"

    def __str__(self) -> str:
        if self.layout == "rows":
            return (f"row sum: a warp per element of {self.column}, 8 per block, its 32 lanes sharing {self.row}, "
                    "a warp shuffle adding their sums, lane 0 adding the total to the element")
        return (f"column reduction: {LANES} columns x {SLICES} row slices per block, {self.slices} block(s) along "
                f"{self.row}, a register sum per thread, the block's partial sums added in shared memory, one "
                "atomicAdd per column and block")


def vector_sums(sched: Schedule, reassociate: bool = True) -> Schedule:
    """``sched`` (target ``"cuda"``) with every qualifying kernel planned as in the module docstring."""
    if sched.target != "cuda":
        return sched
    changed: dict[str, Kernel] = {}
    at_root = {m.mark_get_id().user.name for m in kernel_marks(sched.tree) if m.get_schedule_depth() == 0}
    for k in sched.kernels:
        if len(k.statements) != 1 or k.microtile is not None or k.reduction or k.name not in at_root:
            continue  # (below a host loop a launch runs one row, or a few: the kernel would sum all of them)
        s = sched.program.statement(k.statements[0])
        if k.parallel_depth != 1 or s.write.array in sched.contracted:
            continue
        plan = plan_vector_sum(sched.program, s, reassociate, sched.params)
        if plan is not None:
            itemsize = sched.program.arrays[s.write.array].dtype.bits // 8
            elements = _extent(s, s.iterators.index(plan.column), sched.params)
            if plan.layout == "rows":
                grid, shared = (math.ceil(elements / SLICES) if elements else 0, 1), 0
            else:
                grid, shared = (math.ceil(elements / LANES) if elements else 0, plan.slices), SLICES * (LANES + 1) * itemsize
            changed[k.name] = dataclasses.replace(k, vector_sum=plan, block=(LANES, SLICES), shared_bytes=shared, grid=grid)
    if not changed:
        return sched
    kernels = tuple(changed.get(k.name, k) for k in sched.kernels)
    tree = with_kernels(sched.tree, changed)
    promotion = sched.promotion
    if promotion is not None:
        # (the kernel's own printer moves its data: the generic promotion's buffers in it are dropped; its
        # copy statements stay in the promotion tree, under a mark the printer does not walk)
        promotion = dataclasses.replace(promotion, tree=with_kernels(promotion.tree, changed),
                                        buffers=tuple(b for b in promotion.buffers if b.kernel not in changed),
                                        kernels={n: changed.get(n, k) for n, k in promotion.kernels.items()})
    new = dataclasses.replace(sched, tree=tree, kernels=kernels, promotion=promotion)
    if BASE_KEY in sched._lazy:  # (what to_text prints: the order before mapping, unchanged here)
        new._lazy[BASE_KEY] = sched._lazy[BASE_KEY]
    return new


def plan_vector_sum(prog: Program, s: Statement, reassociate: bool, params: Mapping[str, int] | None) -> VectorSum | None:
    """The plan for ``s`` when it qualifies (module docstring), else None."""
    dtype = prog.arrays[s.write.array].dtype
    if s.depth != 2 or reduction_op(s) != "sum" or dtype.name not in DTYPES or (dtype.is_float and not reassociate):
        return None
    increment = _increment(s)
    if increment is None or any(isinstance(n, Read) and s.accesses[n.access].array == s.write.array for n in increment.walk()):
        return None
    write = access_coefficients(s.write.relation)
    if write is None or any(access_coefficients(a.relation) is None for a in s.accesses):
        return None
    moves = [any(c[0][d] for c in write) for d in range(2)]
    if moves.count(True) != 1 or not rectangular(s.domain):
        return None
    column = moves.index(True)
    reads = [access_coefficients(a.relation) for k, a in enumerate(s.accesses) if k != s.target]

    def contiguous(coeffs, d: int) -> bool:  # moves by one element along d, or not at all
        return not any(x[0][d] for x in coeffs) or (coeffs[-1][0][d] == 1 and not any(x[0][d] for x in coeffs[:-1]))

    names = s.iterators
    if contiguous(write, column) and all(contiguous(c, column) for c in reads):
        return VectorSum(s.name, names[column], names[1 - column], _slices(s, column, params), increment)
    if all(contiguous(c, 1 - column) for c in reads):
        return VectorSum(s.name, names[column], names[1 - column], 1, increment, "rows")
    return None


def vector_sum_candidate(prog: Program, s: Statement) -> bool:
    """Whether ``s`` alone has the shape of a sum into a vector, reassociation allowed (used to distribute a
    kernel around it, ``microtile.distribute_contractions``). A row sum into a temporary is left in its
    kernel: cooperative rows keep such a row (softmax's sum) in a register of a fused kernel instead."""
    plan = plan_vector_sum(prog, s, True, None)
    return plan is not None and (plan.layout == "columns" or prog.arrays[s.write.array].role != "temp")


def _increment(s: Statement) -> Expr | None:
    """What ``s`` adds to its element: the value of ``X += e``, or ``e`` of ``X = X + e``."""
    if s.op == "+=":
        return s.value
    v = s.value
    if s.op == "=" and isinstance(v, Binary) and v.op == "+":
        for acc, other in ((v.lhs, v.rhs), (v.rhs, v.lhs)):
            if isinstance(acc, Read) and s.accesses[acc.access].relation.is_equal(s.write.relation):
                return other
    return None


def _extent(s: Statement, d: int, params: Mapping[str, int] | None) -> int | None:
    if params is None or any(p not in params for p in s.domain.get_space().get_var_names(isl.dim_type.param)):
        return None
    dom = domain_at(s, params)
    if dom.is_empty():
        return 0
    return int(dom.dim_max_val(d).to_python()) - int(dom.dim_min_val(d).to_python()) + 1


def _slices(s: Statement, column: int, params: Mapping[str, int] | None) -> int:
    columns, rows = _extent(s, column, params), _extent(s, 1 - column, params)
    if columns is None or rows is None:
        return max(1, BLOCKS // 8)
    column_blocks = max(1, math.ceil(columns / LANES))
    by_work = max(1, rows // (SLICES * PER_THREAD))
    return max(1, min(by_work, math.ceil(BLOCKS / column_blocks)))
