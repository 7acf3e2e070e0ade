"""Next-row prefetches on C: while a row-wise kernel computes on one row, it fetches the next one.

Why: a row-wise kernel (softmax, a row reduction feeding elementwise work) runs each parallel iteration
as a few loops over one row: the first reads the row from memory, the others find it in L1. The
hardware prefetcher follows the demand misses of the first loop only (and stops at each 4 KiB page), so
memory sits idle while the compute-heavy loop runs (softmax's ``exp``), and the next row's first loop
waits for memory again. Measured on softmax 8192x4096 f32, 2 threads (Xeon, Emerald Rapids): 0.77-0.80
of the time with the next row's input and output lines prefetched from the ``exp`` loop; the same loop
strip-mined without prefetches ran at 0.99.

Which loop (:func:`plan_prefetch`): the body of a row loop (the OpenMP loop, or a serial one) is a
sequence of at least two innermost loops (and statements), the sizes are known, and the loop with the
most weighted work per byte of memory traffic (``c_stream.work_per_byte``) does at least
:data:`PREFETCH_WORK_PER_BYTE`: a memory-bound loop gains nothing, its own misses keep memory busy. Its
contiguous accesses to arrays larger than one core's L2 that follow the row loop's iterator are
prefetched at the next iteration of that loop.

How (:func:`prefetch_lines`): the loop is strip-mined into groups of one cache line (64 bytes of the
smallest element among the prefetched arrays); each group issues one ``__builtin_prefetch`` per array
and runs its elements as a ``#pragma omp simd`` loop. Reductions into local scalars keep one partial
result per element of the group (a register vector after vectorisation) and are combined after the loop,
the same reassociation that ``omp simd reduction`` makes. Only a loop the printer vectorises (``omp simd``,
with or without reductions) is strip-mined: GCC vectorised rmsnorm's unmarked output loop as it stood,
but not its 16-element groups (1.5x slower). The elements left after the last whole group run as the loop would have. A prefetch never faults, so
the one past the last row is harmless.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from polyfuse.codegen import c_stream
from polyfuse.codegen.ast import block_children, loop_schedule, statement_call
from polyfuse.codegen.c_expressions import replace_identifier
from polyfuse.codegen.c_lanes import GUARD, IDENTITY, LANES, LaneBody
from polyfuse.codegen.c_openmp import holds_loop, statement_moves, user_nodes
from polyfuse.codegen.c_stream import STREAM_BYTES, upper_bound, work_per_byte
from polyfuse.cost.traffic import array_bytes, itemsize

PREFETCH_WORK_PER_BYTE = 0.5
"""A loop prefetches the next row only while it does at least this much weighted work per byte it moves
(``c_stream.OPERATION_WEIGHT``): softmax's ``exp`` loop does 1.75 (its max and scaling loops 0.25 and
0.125), layernorm's variance loop 0.75 (its mean loop 0.25, its output loop 0.5 per byte of ``x`` and
``y``, where ``x`` comes from L1)."""


@dataclass(frozen=True)
class PrefetchPlan:
    """The loop of one row loop's body that prefetches (its iterator and the statements below it, which
    identify it among its siblings) and the row loop's iterator."""

    row: str
    loop: str
    statements: tuple[str, ...]


def plan_prefetch(printer: object, node: isl.AstNode) -> PrefetchPlan | None:
    """The prefetching loop of the row loop ``node`` (an OpenMP loop or a serial one; module docstring), or
    ``None``. ``printer`` is the C printer (its ``_index``, ``program``, ``sched``, ``local_scalars``)."""
    program, sched = printer.program, printer.sched  # type: ignore[attr-defined]
    if any(p not in sched.params for p in program.params):
        return None
    inc = node.for_get_inc()
    if inc.get_type() != isl.ast_expr_type.int or inc.get_val().to_python() != 1:
        return None
    body = node.for_get_body()
    if body.get_type() != isl.ast_node_type.block:
        return None
    loops = [c for c in block_children(body) if c.get_type() == isl.ast_node_type.for_]
    if len(loops) < 2 or any(holds_loop(c.for_get_body()) for c in loops):
        return None
    best, best_work = None, PREFETCH_WORK_PER_BYTE
    for loop in loops:
        schedule = loop_schedule(loop)
        if schedule is None:
            continue
        stmts = [statement_call(n).statement for n in user_nodes(loop.for_get_body())]
        work = work_per_byte(stmts, schedule, program, printer.local_scalars, sched.params)  # type: ignore[attr-defined]
        if work is not None and work != float("inf") and work >= best_work:
            best, best_work = loop, work
    if best is None:
        return None
    return PrefetchPlan(printer._index(node.for_get_iterator()), printer._index(best.for_get_iterator()),  # type: ignore[attr-defined]
                        _statement_names(best))


def is_planned(plan: PrefetchPlan, printer: object, node: isl.AstNode) -> bool:
    """Whether ``node`` is the loop that ``plan`` prefetches from."""
    return (printer._index(node.for_get_iterator()) == plan.loop  # type: ignore[attr-defined]
            and _statement_names(node) == plan.statements)


def prefetch_lines(printer: object, plan: PrefetchPlan, node: isl.AstNode, depth: int, indent: str,
                   pragma: Sequence[str], reductions: Sequence[tuple[str, str]], body: list[str],
                   vector_body: LaneBody | None = None) -> list[str] | None:
    """The loop ``node`` strip-mined with next-row prefetches (module docstring), or ``None`` when it has
    nothing to prefetch or a bound it cannot strip. ``pragma`` and ``reductions`` are what the printer
    would print above the loop (``omp simd`` and its clauses), ``body`` its printed body (already at
    ``depth + 1``), ``vector_body`` its explicit vector body (``c_lanes.py``), if it has one: then each group
    of 16 floats is one vector where AVX-512 is there (``#if PF_EXPLICIT_SIMD``), its partial sums one vector."""
    program = printer.program  # type: ignore[attr-defined]
    bound = upper_bound(printer, node)
    schedule = loop_schedule(node)
    inc = node.for_get_inc()
    if not pragma or bound is None or schedule is None or inc.get_type() != isl.ast_expr_type.int or inc.get_val().to_python() != 1:
        return None  # (a loop the printer does not vectorise: strip-mined, the compiler did not either)
    it = printer._index(node.for_get_iterator())  # type: ignore[attr-defined]
    l2 = c_stream.cache_limits()[0]  # (through the module: tests make it small)
    targets: dict[str, tuple[str, int]] = {}  # printed address -> (array, 0 read / 1 write)
    for user in user_nodes(node.for_get_body()):
        call = statement_call(user)
        stmt = call.statement
        for k, (acc, moves) in enumerate(zip(stmt.accesses, statement_moves(schedule, stmt))):
            if acc.array in printer.local_scalars or moves is None or moves[-1:] != [1] or any(moves[:-1]):  # type: ignore[attr-defined]
                continue
            if (array_bytes(program, acc.array, printer.sched.params) or 0) < l2:  # type: ignore[attr-defined]
                continue
            text = printer._index(call.accesses[k])  # type: ignore[attr-defined]
            if not _mentions(text, plan.row):
                continue
            write = 1 if k == stmt.target else 0
            previous = targets.get(text)
            targets[text] = (acc.array, max(write, previous[1] if previous else 0))
    if not targets:
        return None
    lanes = STREAM_BYTES // min(itemsize(program, a) for a, _ in targets.values())
    op, ub = bound
    init = printer._index(node.for_get_init())  # type: ignore[attr-defined]
    strip = f"{it}_strip"
    pad, one, two, three = (indent * (depth + k) for k in range(4))
    partial = [(o, name) for o, name in reductions if o in IDENTITY]
    private = [name for o, name in reductions if o == "private"]
    group_body = list(body)
    for _, name in partial:
        group_body = [re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_\[])", f"{name}_part[pf_lane]", line)
                      for line in group_body]
    prefetches = [f"{two}__builtin_prefetch(&{_shifted(text, plan.row, it, strip)}, {rw}, 3);"
                  for text, (_, rw) in targets.items()]
    names = ", ".join(sorted({a for a, _ in targets.values()}))
    lines = [f"{pad}{{  /* {names}: the next row prefetched while this one computes (codegen/c_prefetch.py) */"]
    for o, name in partial:
        ctype = program.arrays[name].dtype.c_name
        lines += [f"{one}{ctype} {name}_part[{lanes}];",
                  f"{one}for (int pf_lane = 0; pf_lane < {lanes}; pf_lane += 1) {name}_part[pf_lane] = {IDENTITY[o]};"]
    groups = [
        f"{one}for (; {strip} + {lanes - 1} {op} {ub}; {strip} += {lanes}) {{",
        *prefetches,
        f"{two}#pragma omp simd" + "".join(f" private({n})" for n in private),
        f"{two}for (int64_t pf_lane = 0; pf_lane < {lanes}; pf_lane += 1) {{",
        f"{three}const int64_t {it} = {strip} + pf_lane;",
        *(indent * 2 + line for line in group_body),
        f"{two}}}",
        f"{one}}}",
    ]
    if vector_body is not None and lanes == LANES and set(vector_body.sums) == {n for o, n in partial if o == "+"} \
            and all(o == "+" for o, _ in partial):
        groups = [
            f"#if {GUARD}",
            f"{one}{{",
            *(f"{two}pf_vf32 {name}_vsum = pf_vset_f32(0.0f);" for name in vector_body.sums),
            f"{two}for (; {strip} + {lanes - 1} {op} {ub}; {strip} += {lanes}) {{",
            *(indent + line for line in prefetches),
            f"{three}const int64_t {it} = {strip};",
            *vector_body.lines(three),
            f"{two}}}",
            *(f"{two}for (int pf_lane = 0; pf_lane < {lanes}; pf_lane += 1) {name}_part[pf_lane] += {name}_vsum[pf_lane];"
              for name in vector_body.sums),
            f"{one}}}",
            "#else",
            *groups,
            "#endif",
        ]
        printer.uses_vectors = printer.uses_lanes = True  # type: ignore[attr-defined]
    lines += [
        f"{one}int64_t {strip} = {init};",
        *groups,
        *(indent + line for line in pragma),
        f"{one}for (int64_t {it} = {strip}; {it} {op} {ub}; {it} += 1) {{",
        *(indent + line for line in body),
        f"{one}}}",
    ]
    for o, name in partial:
        fold = f"{name} += {name}_part[pf_lane];" if o == "+" else \
            f"{name} = pf_f{o}_lane_{program.arrays[name].dtype.name}({name}, {name}_part[pf_lane]);"
        lines.append(f"{one}for (int pf_lane = 0; pf_lane < {lanes}; pf_lane += 1) {fold}")
    return [*lines, f"{pad}}}"]


def _statement_names(loop: isl.AstNode) -> tuple[str, ...]:
    return tuple(statement_call(n).statement.name for n in user_nodes(loop.for_get_body()))


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


def _shifted(text: str, row: str, it: str, strip: str) -> str:
    """The address ``text`` at the next iteration of the row loop ``row`` and the strip's first element."""
    return replace_identifier(replace_identifier(text, row, f"({row} + 1)"), it, strip)
