"""Streaming stores on C: an output that no statement reads back, written by a kernel whose data exceeds the
cache (:func:`~polyfuse.cost.machine.streaming_threshold`), is stored around the caches (x86's
non-temporal stores), and the loop's large reads are prefetched a page ahead.

Why: an ordinary store first reads the line it writes into the cache (a read for ownership), so a
memory-bound kernel that writes an output of N bytes moves 3N bytes for it, not 2N, and the written
lines then evict data that would have stayed cached. When the kernel's data cannot stay cached anyway,
and nothing in the program reads the output again, a non-temporal store moves each written line once.
layernorm at 4096x1024 f32 (32 MiB in and out, this machine's L3 is 32 MiB) runs at about 0.85 of its
time with them; see ``docs/architecture.md``, "Streaming stores".

Which arrays (:func:`streamed_arrays`): written by exactly one statement, with ``=``, read by no other
statement (the writer may read the element it overwrites: softmax's ``y = y * (1 / s)``), not a
temporary, and every kernel that writes it touches at least :func:`~polyfuse.cost.machine.streaming_threshold`
bytes at the given sizes (no sizes, no streaming: a small call would lose its cached output).

How (:func:`stream_lines`): an innermost ``omp simd`` loop whose only statement writes such an array
contiguously is split in three: the elements before the first 64-byte-aligned one, stored as usual; whole
aligned 64-byte groups, each computed into an aligned stack buffer by a vectorised loop and then streamed
(``pf_stream64``), its reads of arrays larger than L2 prefetched :data:`READ_AHEAD_BYTES` ahead; the
remainder, stored as usual. Non-temporal stores are weakly ordered, so every thread
that streamed executes ``pf_stream_fence`` (``sfence``) before the barrier that publishes its stores (the
printer turns ``omp parallel for`` into ``omp parallel`` + ``omp for nowait`` + fence for that), and a
kernel run by one thread fences at its end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import islpy as isl

from polyfuse.codegen.ast import block_children, loop_schedule, statement_call
from polyfuse.codegen.c_expressions import replace_identifier, strip_parens
from polyfuse.codegen.c_openmp import access_moves, statement_moves
from polyfuse.cost import machine
from polyfuse.cost.traffic import array_bytes, itemsize
from polyfuse.ir.expr import Cast, Expr, IndexValue, Read
from polyfuse.ir.program import Program, Statement

if TYPE_CHECKING:
    from polyfuse.schedule.model import Kernel

STREAM_BYTES = 64
"""Bytes of one streamed group: a cache line, and one AVX-512 register (two AVX, four SSE ones)."""

OPERATION_WEIGHT = {"/": 4, "sqrt": 4, "//": 4, "%": 6, "tdiv": 4, "trem": 4, "exp": 12, "log": 14, "tanh": 18, "pow": 30}
"""Rough cost of one vectorised operation, in additions (the rest count 1): divisions and square roots
are a few times slower, the c_math functions a dozen or more operations each."""
STREAM_WORK_PER_BYTE = 2.0
"""A loop streams only while it does at most this much weighted work per byte it moves (it is memory-bound).
Measured on the 2-core Zen 4 these were tuned on: exp(x + 1) (1.6 per byte) runs in 0.81-0.88 of its time
with streaming stores, layernorm's output loop (0.5) in 0.70-0.85; gelu(x + b) + r (2.25) is bound by its
arithmetic (a cache-resident row takes as long per element) and lost 5-10 % to the staging."""

STREAM_MIN_LOOP_BYTES = 4096
"""A loop streams only where it writes at least this many bytes (its trip count at the given sizes: its
bounds must print as integers, which a tile's ``min`` bound does not): each execution stores its
elements before the first aligned 64-byte group and after the last one with ordinary scalar stores. Measured on the 2-core Emerald Rapids, 2 threads, f32, streamed
against ordinary stores: exp(x + 1) with rows of 16, 64, 256 and 512 floats ran 5.1, 2.9, 1.14 and 1.07x
slower, with rows of 1024 and 4096 at 0.95 and 0.66 of the time; layernorm 2.1, 1.6, 1.15, 1.05, then
0.83 and 0.71 (64 and 128 MiB of data)."""

STREAM_HELPERS = """\
#if defined(__SSE2__)
#include <immintrin.h>
#endif
/* streaming stores (codegen/c_stream.py): 64 bytes from the 64-byte-aligned v to the 64-byte-aligned p,
   around the caches; pf_stream_fence orders them before what the thread stores next (sfence) */
static inline void pf_stream64(void *p, const void *v) {
#if defined(__AVX512F__)
    _mm512_stream_si512((__m512i *)p, _mm512_load_si512(v));
#elif defined(__AVX__)
    _mm256_stream_si256((__m256i *)p, _mm256_load_si256((const __m256i *)v));
    _mm256_stream_si256((__m256i *)p + 1, _mm256_load_si256((const __m256i *)v + 1));
#elif defined(__SSE2__)
    for (int k = 0; k < 4; k += 1) _mm_stream_si128((__m128i *)p + k, _mm_load_si128((const __m128i *)v + k));
#else
    for (int k = 0; k < 64; k += 1) ((unsigned char *)p)[k] = ((const unsigned char *)v)[k];
#endif
}
static inline void pf_stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}
"""


def streamed_arrays(program: Program, kernels: Sequence[Kernel], params: Mapping[str, int],
                    local: frozenset[str]) -> frozenset[str]:
    """The arrays whose stores the C printer streams (see the module docstring); ``local`` are the arrays
    the printer keeps in scalars."""
    if not machine.streaming_stores() or any(p not in params for p in program.params):
        return frozenset()
    writers: dict[str, list[Statement]] = {}
    read: set[str] = set()  # arrays some statement reads, other than a writer's own element
    for st in program.statements:
        writers.setdefault(st.write.array, []).append(st)
        for acc in st.reads:
            if not (acc.array == st.write.array and acc.relation.is_equal(st.write.relation)):
                read.add(acc.array)
    kernel_of = {name: k for k in kernels for name in k.statements}
    out = set()
    for name, sts in writers.items():
        array = program.arrays[name]
        if (len(sts) != 1 or sts[0].op != "=" or name in read or array.role == "temp" or name in local
                or itemsize(program, name) not in (1, 2, 4, 8) or sts[0].name not in kernel_of):
            continue
        if exceeds_cache(program, kernel_of[sts[0].name], params, local):
            out.add(name)
    return frozenset(out)


def cache_limits() -> tuple[int, int]:
    """(bytes of one core's L2: an array at least this large comes from memory; the streaming threshold: a
    kernel touching at least this much streams). One seam, so that tests can stream small arrays."""
    return machine.cache_sizes()[1], machine.streaming_threshold()


def exceeds_cache(program: Program, kernel: Kernel, params: Mapping[str, int], local: frozenset[str]) -> bool:
    """Whether ``kernel`` touches at least the streaming threshold's bytes at ``params`` (False where a size
    is not given): its data comes from memory, whichever core reads it."""
    if any(p not in params for p in program.params):
        return False
    return _footprint(program, kernel, params, local) >= cache_limits()[1]


def _footprint(program: Program, kernel: Kernel, params: Mapping[str, int], local: frozenset[str]) -> int:
    """Bytes of every array that the statements of ``kernel`` touch, whole (an upper bound that is exact
    for the row-wise and elementwise kernels that stream)."""
    names = {a.array for st in program.statements if st.name in kernel.statements for a in st.accesses} - local
    return sum(array_bytes(program, name, params) or 0 for name in names)


def stream_lines(printer: object, node: isl.AstNode, depth: int, indent: str, simd: bool) -> list[str] | None:
    """The innermost loop ``node`` split into aligned head, streamed body and tail (module docstring), or
    ``None`` when it does not write a streamed array contiguously from one ``=`` statement. The loop's other
    statements may only write the printer's local scalars (per-iteration temporaries, each written before
    it is read). ``simd``: the loop is proven vectorisable (``#pragma omp simd``); otherwise its parts are
    left to the compiler, as the loop would have been. ``printer`` is the C printer (its ``_index``,
    ``_value``, ``_statement``, ``streamed``, ``local_scalars``)."""
    body = node.for_get_body()
    nodes = list(block_children(body)) if body.get_type() == isl.ast_node_type.block else [body]
    if any(n.get_type() != isl.ast_node_type.user for n in nodes):
        return None
    calls = [statement_call(n) for n in nodes]
    streamed = [c for c in calls if c.statement.write.array in printer.streamed]  # type: ignore[attr-defined]
    if len(streamed) != 1 or streamed[0].statement.op != "=" or any(
            c.statement.write.array not in printer.local_scalars for c in calls if c is not streamed[0]):  # type: ignore[attr-defined]
        return None
    call = streamed[0]
    stmt = call.statement
    if any(a.array == stmt.write.array and not a.relation.is_equal(stmt.write.relation)
           for c in calls for a in c.statement.accesses):
        return None  # another element of the array is read in the loop: staging would delay its store
    bound = upper_bound(printer, node)
    schedule = loop_schedule(node)
    inc = node.for_get_inc()
    if bound is None or schedule is None or inc.get_type() != isl.ast_expr_type.int or inc.get_val().to_python() != 1:
        return None
    moves = access_moves(schedule, stmt, stmt.target)
    if moves is None or moves[-1:] != [1] or any(moves[:-1]):
        return None
    work = work_per_byte([c.statement for c in calls], schedule, printer.program,  # type: ignore[attr-defined]
                         printer.local_scalars, printer.sched.params)  # type: ignore[attr-defined]
    if work is None or work > STREAM_WORK_PER_BYTE:
        return None  # compute-bound: the stores are not what it waits for, and staging costs
    it = printer._index(node.for_get_iterator())  # type: ignore[attr-defined]
    init = printer._index(node.for_get_init())  # type: ignore[attr-defined]
    op, ub = bound
    if STREAM_MIN_LOOP_BYTES > 0:  # (tests set 0 to stream loops of any length and bound)
        trips = _trip_count(init, op, ub)
        if trips is None or trips * itemsize(printer.program, stmt.write.array) < STREAM_MIN_LOOP_BYTES:  # type: ignore[attr-defined]
            return None  # a short row: its unaligned head and tail, stored one element at a time, cost more
    target = printer._index(call.write)  # type: ignore[attr-defined]
    statements = [printer._statement(c) for c in calls]  # type: ignore[attr-defined]
    staged = [f"pf_stage[{it} - {{cursor}}] = {strip_parens(printer._value(stmt.value, call))};" if c is call  # type: ignore[attr-defined]
              else text for c, text in zip(calls, statements)]
    array = printer.program.arrays[stmt.write.array]  # type: ignore[attr-defined]
    lanes = STREAM_BYTES // itemsize(printer.program, stmt.write.array)  # type: ignore[attr-defined]
    cursor = f"{it}_stream"
    staged = [line.replace("{cursor}", cursor) for line in staged]
    ahead = _read_ahead(printer, calls, schedule, it, cursor, lanes)
    pad, one, two, three = (indent * (depth + k) for k in range(4))
    vector = [f"{two}#pragma omp simd"] if simd else []
    return [
        f"{pad}{{  /* {stmt.write.array}: streaming stores (written once, read by no statement; the kernel's data exceeds the cache) */",
        f"{one}int64_t {cursor} = {init};",
        f"{one}for (; {cursor} {op} {ub}; {cursor} += 1) {{  /* up to the first 64-byte-aligned element */",
        f"{two}const int64_t {it} = {cursor};",
        f"{two}if ((((uintptr_t)&{target}) & {STREAM_BYTES - 1}) == 0) break;",
        *(two + line for line in statements),
        f"{one}}}",
        f"{one}for (; {cursor} + {lanes - 1} {op} {ub}; {cursor} += {lanes}) {{",
        f"{two}{array.dtype.c_name} pf_stage[{lanes}] __attribute__((aligned({STREAM_BYTES})));",
        *(two + line for line in ahead),
        *vector,
        f"{two}for (int64_t {it} = {cursor}; {it} < {cursor} + {lanes}; {it} += 1) {{",
        *(three + line for line in staged),
        f"{two}}}",
        f"{two}{{",
        f"{three}const int64_t {it} = {cursor};",
        f"{three}pf_stream64(&{target}, pf_stage);",
        f"{two}}}",
        f"{one}}}",
        *([f"{one}#pragma omp simd"] if simd else []),
        f"{one}for (int64_t {it} = {cursor}; {it} {op} {ub}; {it} += 1) {{",
        *(two + line for line in statements),
        f"{one}}}",
        f"{pad}}}",
    ]


def _trip_count(init: str, op: str, bound: str) -> int | None:
    """The iterations of ``for (i = init; i op bound; ...)`` with unit step, where both are integers."""
    try:
        first, last = int(init), int(bound)
    except ValueError:
        return None
    return max(0, last - first + (1 if op == "<=" else 0))


def _read_ahead(printer: object, calls: Sequence, schedule: isl.UnionMap, it: str, cursor: str,
                lanes: int) -> list[str]:
    """The prefetches that one streamed group of ``lanes`` elements issues: for each read that walks an
    array larger than L2 contiguously, the lines :data:`READ_AHEAD_BYTES` ahead of the group's elements
    (one per 64 bytes of them). A core keeps only a few dozen misses in flight and its L2 prefetcher stops at each 4 KiB page, so without
    them the loop waits on its reads; the writes need none (streamed). A prefetch never faults, so the
    lines past an array's end are harmless."""
    program = printer.program  # type: ignore[attr-defined]
    l2 = cache_limits()[0]
    lines: list[str] = []
    for call in calls:
        stmt = call.statement
        for k, (acc, moves) in enumerate(zip(stmt.accesses, statement_moves(schedule, stmt))):
            if (k == stmt.target or acc.array in printer.local_scalars  # type: ignore[attr-defined]
                    or acc.array in printer.row_buffers  # type: ignore[attr-defined]  # (one row, in L1)
                    or moves is None or moves[-1:] != [1] or any(moves[:-1])
                    or (array_bytes(program, acc.array, printer.sched.params) or 0) < l2):  # type: ignore[attr-defined]
                continue
            size = itemsize(program, acc.array)
            text = printer._index(call.accesses[k])  # type: ignore[attr-defined]
            for offset in range(0, lanes * size, STREAM_BYTES):
                at = f"({cursor} + {(READ_AHEAD_BYTES + offset) // size})"
                line = f"__builtin_prefetch(&{replace_identifier(text, it, at)}, 0, 3);"
                if line not in lines:
                    lines.append(line)
    return lines


READ_AHEAD_BYTES = 4096
"""How far ahead of a streamed group its reads are prefetched: one 4 KiB page. Measured by hand on
exp(x + 1) at 4096x4096 f32, 2 threads (Xeon, Emerald Rapids), streaming stores in every variant: 2, 4, 8
and 16 KiB ahead ran within noise of each other, 1.3-1.6x faster than no prefetch; 1 KiB gained half as
much. In polyfuse's own code: 0.64 of the time without them (0.93 without prefetches)."""


def work_per_byte(stmts: Sequence[Statement], schedule: isl.UnionMap, program: Program,
                  local: frozenset[str], params: Mapping[str, int]) -> float | None:
    """Weighted operations per byte of memory traffic in one iteration of an innermost loop running
    ``stmts`` (its :func:`~polyfuse.codegen.ast.loop_schedule` is ``schedule``): operations that do not
    change along the loop (the compiler hoists them) count nothing, each other one :data:`OPERATION_WEIGHT`
    or 1; bytes are the elements of arrays larger than L2 that the loop walks. ``None`` where an access
    does not move by a constant."""
    written = {st.write.array for st in stmts}
    l2 = cache_limits()[0]
    moving: dict[tuple[str, int], bool] = {}
    traffic: set[tuple[str, str]] = set()
    for st in stmts:
        per_access = statement_moves(schedule, st)
        for k, acc in enumerate(st.accesses):
            if acc.array in local:
                moving[(st.name, k)] = acc.array in written
                continue
            moves = per_access[k]
            if moves is None:
                return None
            moving[(st.name, k)] = any(moves)
            if any(moves) and (array_bytes(program, acc.array, params) or 0) >= l2:
                traffic.add((acc.array, str(acc.relation)))
    work = 0
    for st in stmts:
        work += _variant_work(st.value, lambda access, st=st: moving[(st.name, access)])[1]
    nbytes = sum(itemsize(program, name) for name, _ in traffic)
    return work / nbytes if nbytes else float("inf")


def _variant_work(e: Expr, moves: Callable[[int], bool]) -> tuple[bool, int]:
    """(whether ``e`` changes along the loop, the weighted operations of its changing part)."""
    if isinstance(e, Read):
        return moves(e.access), 0
    if isinstance(e, IndexValue):  # a size is invariant; an iterator may move (conservatively: it does)
        return e.value.involves_dims(isl.dim_type.in_, 0, e.value.dim(isl.dim_type.in_)), 0
    parts = [_variant_work(c, moves) for c in e.children()]
    variant = any(v for v, _ in parts)
    own = OPERATION_WEIGHT.get(getattr(e, "op", ""), 1) if variant and not isinstance(e, Cast) else 0
    return variant, own + sum(w for _, w in parts)


def upper_bound(printer: object, node: isl.AstNode) -> tuple[str, str] | None:
    """``node``'s loop condition as (``<=`` or ``<``, bound text) when it is ``iterator op bound``."""
    cond = node.for_get_cond()
    if cond.get_type() != isl.ast_expr_type.op:
        return None
    ops = {isl.ast_expr_op_type.le: "<=", isl.ast_expr_op_type.lt: "<"}
    op = ops.get(cond.get_op_type())
    if op is None or cond.get_op_n_arg() != 2:
        return None
    lhs = cond.get_op_arg(0)
    if lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != node.for_get_iterator().get_id().get_name():
        return None
    return op, printer._index(cond.get_op_arg(1))  # type: ignore[attr-defined]


def fence_parallel_loop(lines: list[str], pad: str, indent: str, in_region: bool) -> list[str]:
    """The OpenMP loop ``lines`` (its pragma first) with each thread fencing its streamed stores before the
    barrier that ends the loop: ``nowait``, the fence, then the barrier (``omp barrier`` inside a host
    loop's region; the end of a new ``omp parallel`` region otherwise)."""
    pragma = lines[0].replace("#pragma omp parallel for", "#pragma omp for") + " nowait"
    if in_region:
        return [pragma, *lines[1:], f"{pad}pf_stream_fence();", f"{pad}#pragma omp barrier"]
    inner = [indent + line for line in [pragma, *lines[1:]]]
    return [f"{pad}#pragma omp parallel", f"{pad}{{", *inner, f"{pad}{indent}pf_stream_fence();", f"{pad}}}"]
