"""CUDA printing of cooperative rows (``schedule/mapping/rows.py``; the marks are specified in ``schedule/model.py``).

``BLOCK_REDUCE_PRELUDE`` (part of the CUDA prelude) defines one block-wide reduction per operator and
element type, ``pf_block_<op>_<dtype>``: warp shuffles (``__shfl_xor_sync``), then one partial per warp in
a ``__shared__`` scratch array of 32 elements; every thread of the block returns the combined value, so
the row's result is in every thread's register afterwards. It needs ``blockDim.x`` a multiple of 32 (at
most 1024), which ``rows.block_size`` guarantees, and every thread of the block to call it.

A ``cyclic`` loop ``for (v = lo; v <= hi; v++)`` is printed ``for (v = lo + (threadIdx.x - lo) mod
blockDim.x; v <= hi; v += blockDim.x)`` (``blockDim.x`` a constant where the launch fixes it, and the
loop unrolled by ``Kernel.unroll`` or ``CYCLIC_UNROLL``): iteration ``v`` runs on thread ``v mod blockDim.x`` whatever ``lo``, so one ``v`` is one thread in every loop of the row (``rows.check_threads`` and
``row_staging.py`` count on it). A per-row statement (outside the cyclic loops) that writes memory, not a
register, runs in thread 0 only (``cuda.KernelPrinter._user``): ``rows.check_threads`` guarantees that
every later use of what it wrote by another thread lies behind a barrier or a block reduction.
"""

from __future__ import annotations

import islpy as isl

from polyfuse.codegen.ast import as_operand, constant_range
from polyfuse.codegen.cuda_values import float_function
from polyfuse.schedule.model import CYCLIC_MARK, SYNC_MARK

BLOCK_REDUCE_PRELUDE = """
/* block-wide reductions of cooperative rows (blockDim.x a multiple of 32, at most 1024): warp shuffles,
   then one partial per warp in shared memory; every thread returns the block's result */
#define PF_ADD(a, b) ((a) + (b))
#define PF_MUL(a, b) ((a) * (b))
#define PF_IMAX(a, b) ((a) > (b) ? (a) : (b))
#define PF_IMIN(a, b) ((a) < (b) ? (a) : (b))
#define PF_BLOCK_REDUCE(NAME, T, OP) \\
__device__ T NAME(T v) \\
{ \\
  __shared__ T pf_scratch[32]; \\
  for (int o = 16; o > 0; o >>= 1) v = OP(v, __shfl_xor_sync(0xffffffffu, v, o)); \\
  __syncthreads(); \\
  if (threadIdx.x % 32 == 0) pf_scratch[threadIdx.x / 32] = v; \\
  __syncthreads(); \\
  T r = pf_scratch[0]; \\
  for (unsigned w = 1; w < blockDim.x / 32; w++) r = OP(r, pf_scratch[w]); \\
  return r; \\
}
PF_BLOCK_REDUCE(pf_block_sum_f32, float, PF_ADD)
PF_BLOCK_REDUCE(pf_block_prod_f32, float, PF_MUL)
PF_BLOCK_REDUCE(pf_block_max_f32, float, fmaxf)
PF_BLOCK_REDUCE(pf_block_min_f32, float, fminf)
PF_BLOCK_REDUCE(pf_block_sum_f64, double, PF_ADD)
PF_BLOCK_REDUCE(pf_block_prod_f64, double, PF_MUL)
PF_BLOCK_REDUCE(pf_block_max_f64, double, fmax)
PF_BLOCK_REDUCE(pf_block_min_f64, double, fmin)
PF_BLOCK_REDUCE(pf_block_sum_i32, int, PF_ADD)
PF_BLOCK_REDUCE(pf_block_prod_i32, int, PF_MUL)
PF_BLOCK_REDUCE(pf_block_max_i32, int, PF_IMAX)
PF_BLOCK_REDUCE(pf_block_min_i32, int, PF_IMIN)
"""

IDENTITY = {"sum": "0", "prod": "1", "max": {"f": "(-INFINITY)", "i": "(-2147483647 - 1)"},
            "min": {"f": "INFINITY", "i": "2147483647"}}
"""The identity of each reduction operator (by dtype kind: float or int) that threads other than 0 start from."""


CYCLIC_UNROLL = 4
"""How far nvcc unrolls a cyclic loop where the kernel does not say (``Kernel.unroll``, set by
``mapping/rows.py`` from a row of known length): its iterations' loads are independent, and four of them
in flight per thread are what a row kernel needs to come near the copy bandwidth (one in flight measured
42-50 % of it on an H100 for softmax and layernorm, 8192 x 1024 f32)."""
FULL_UNROLL = 8
"""A cyclic loop with constant bounds whose threads run different numbers of iterations, at most this many,
is printed as a guarded loop over a thread's iterations, unrolled whole: ``for (u = 0; u < trips; u++) {
v = lane + u * width; if (v <= hi) ... }``, so that every load of a thread's share is in flight at once.
Measured on an H100 (session 13, 8192 rows, 128 threads, % of the copy bandwidth): with rows of 1000, the
plain loop under ``#pragma unroll 8`` left the shorter threads in nvcc's one-at-a-time remainder loop
(softmax 51 %, layernorm 56 %), the guarded form ran at 84 and 78 %; with rows of 1024, where every thread
runs 8, the plain loop was as fast or faster (softmax 85 against 84 %, layernorm 85 against 79 %), so it
stays there."""
GRID_UNROLL = 8
"""The same for a loop shared by every thread of the grid (a reduction to one element): two blocks of 256
threads an SM need twice the loads in flight per thread."""


def print_cyclic_for(printer, node: isl.AstNode, it: str, init: str, cond: str, inc: int, depth: int,
                     bound: frozenset[str]) -> None:
    """Print the AST ``for`` node of a ``cyclic`` loop (iterator ``it``) shared by the block's threads."""
    pad = "  " * depth
    if printer.grid_cyclic and printer.cyclic_blocks:  # every thread of the grid shares the loop (block_reductions.py)
        lane = f"((long long) blockIdx.x * {printer.cyclic_width} + threadIdx.x)"
        width = f"{printer.cyclic_blocks * printer.cyclic_width}LL"
    elif printer.grid_cyclic:
        lane, width = "((long long) blockIdx.x * blockDim.x + threadIdx.x)", "((long long) gridDim.x * blockDim.x)"
    else:
        lane, width = "(long long) threadIdx.x", f"{printer.cyclic_width}LL" if printer.cyclic_width else "(long long) blockDim.x"
    if init != "0" and inc == 1:
        lane = f"pf_floormod({lane} - ({init}), {width})"
    start = lane if inc == 1 else f"{inc} * {lane}"
    start = start if init == "0" else f"{as_operand(init)} + {start}"
    step = width if inc == 1 else f"{inc} * {width}"
    trips = _trips(node, it, printer.cyclic_width) if not printer.grid_cyclic and inc == 1 else None
    if trips is not None:  # every thread's share in one unrolled body, its loads all in flight
        hi = trips[1]
        u = f"pf_{it}_step"
        printer.lines.append(f"{pad}#pragma unroll")
        printer.lines.append(f"{pad}for (int {u} = 0; {u} < {trips[0]}; {u}++) {{  /* a thread's share of {it}: at most {trips[0]} */")
        printer.lines.append(f"{pad}  const long long {it} = {start} + {step} * {u};")
        printer.lines.append(f"{pad}  if ({it} <= {hi}) {{")
        printer._scoped(node.for_get_body(), depth + 2, bound | {it})
        printer.lines.append(f"{pad}  }}")
        printer.lines.append(f"{pad}}}")
        return
    unroll = GRID_UNROLL if printer.grid_cyclic else printer.cyclic_unroll or CYCLIC_UNROLL
    printer.lines.append(f"{pad}#pragma unroll {unroll}")
    printer.lines.append(f"{pad}for (long long {it} = {start}; {cond}; {it} += {step}) {{")
    printer._scoped(node.for_get_body(), depth + 1, bound | {it})
    printer.lines.append(f"{pad}}}")


def _trips(node: isl.AstNode, it: str, width: int) -> tuple[int, int] | None:
    """(most iterations a thread runs, last ``it``) of a cyclic loop ``for (it = lo; it <= hi; it++)`` with
    constant bounds over a constant ``width`` of threads whose shares differ by one, when that is at most
    :data:`FULL_UNROLL`; else None."""
    bounds = constant_range(node, it)
    if not width or bounds is None:
        return None
    lo, hi, _ = bounds  # (the caller prints only unit steps here)
    if (hi - lo + 1) % width == 0:
        return None  # every thread runs as many: the plain loop, unrolled by Kernel.unroll, measured faster
    trips = -(-(hi - lo + 1) // width)
    return (trips, hi) if 0 < trips <= FULL_UNROLL else None


def print_row_mark(printer, node: isl.AstNode, name: str, depth: int, bound: frozenset[str]) -> None:
    """Print a ``cyclic``, ``reduce`` or ``sync`` mark of a cooperative-rows kernel and the AST below it
    (``printer`` is the ``cuda.KernelPrinter``): a loop shared cyclically by the block's threads, the
    block reduction around it, a barrier before a phase."""
    pad = "  " * depth
    if name == SYNC_MARK:
        printer.lines.append(f"{pad}__syncthreads();  /* another thread of the row touched this data */")
        printer.emit(node.mark_get_node(), depth, bound)
    elif name == CYCLIC_MARK:
        who = "every thread of the grid shares the loop" if printer.grid_cyclic else "the block's threads share the row loop"
        printer.lines.append(f"{pad}/* cyclic: {who} {printer.cyclic} */")
        printer._in_cyclic = True
        printer.emit(node.mark_get_node(), depth, bound)
        printer._in_cyclic = False
    else:
        reductions = node.mark_get_id().user
        if any(r.element is not None for r in reductions):
            print_element_reduction(printer, node, reductions, depth, bound)
            return
        for r in reductions:
            printer.lines.append(f"{pad}if (threadIdx.x != 0) {r.array} = {_identity(r)};  /* {r.statement}: one partial {r.op} per thread */")
        printer.emit(node.mark_get_node(), depth, bound)
        for r in reductions:
            printer.lines.append(f"{pad}{r.array} = pf_block_{r.op}_{r.dtype.name}({r.array});  /* {r.statement}: combine the row */")


def _identity(r) -> str:
    return IDENTITY[r.op] if r.op in ("sum", "prod") else IDENTITY[r.op][r.dtype.name[0]]


def print_element_reduction(printer, node: isl.AstNode, reductions, depth: int, bound: frozenset[str]) -> None:
    """A reduction into one element of a global array (``block_reductions.py``): a register per thread
    from the identity, the shared loop with the element's accesses printed as that register, a block
    reduction, then thread 0 of each block adds the block's value with ``atomicAdd`` or combines it with
    the element's incoming value."""
    pad = "  " * depth
    (r,) = reductions
    acc = f"{r.array}_acc"
    element = printer.dialect.access(r.array, [str(i) for i in r.element])
    name, _, index = element.partition("[")
    address = f"{name} + {as_operand(index[:-1])}" if index else element
    printer.lines.append(f"{pad}{r.dtype.c_name} {acc} = {_identity(r)};  /* {r.statement}: one partial {r.op} per thread */")
    printer.dialect.renamed[r.array] = acc
    printer.emit(node.mark_get_node(), depth, bound)
    del printer.dialect.renamed[r.array]
    printer.lines.append(f"{pad}{acc} = pf_block_{r.op}_{r.dtype.name}({acc});  /* {r.statement}: combine the block */")
    if r.across_blocks:
        printer.lines.append(f"{pad}if (threadIdx.x == 0) atomicAdd({address}, {acc});  /* {r.statement}: add the block's {r.op} */")
    else:
        combine = f"{element} + {acc}" if r.op == "sum" else f"{_combine(r)}({element}, {acc})"
        printer.lines.append(f"{pad}if (threadIdx.x == 0) {element} = {combine};  /* {r.statement}: the element's {r.op} */")


def _combine(r) -> str:
    """The function combining two values of ``r`` (max or min), in its type."""
    return float_function(r.op, r.dtype.name) if r.dtype.name[0] == "f" else r.op
