"""Row buffers on C: a row-wise kernel's output that the row writes, reads back and finally rewrites in
place keeps its intermediate values in a per-thread buffer of one row, so that the output is written once.

softmax writes ``y = exp(x - m)``, sums ``y`` and rescales it in place, ``y = y * (1 / s)``. The first
store to each line of ``y`` reads the line from memory first (read-for-ownership), so a row too large for
the caches moves 1.5 times its compulsory bytes, and its stores cannot go around the caches (the row reads
``y`` back). :func:`row_buffers` renames, in the chosen C schedule, every access of such an output ``Y``
except the final rewrite's store to a new temporary ``Y_row``, which the C printer declares as one row per
thread (``ctype Y_row[n]`` in the parallel loop's body, indexed by the last subscript): the row's values
stay in L1, ``Y`` has one writer that reads nothing of it, and ``codegen/c_stream.py`` streams its stores.

It pays only where the output cannot stay in the last-level cache either: the ordinary stores' extra read
then comes from memory. Measured on the 2-core Emerald Rapids guest (300 MiB of shared L3; numpy inputs,
paired rounds, 2 threads), softmax with row buffers against the same schedule without them: 8192 x 1024
1.33 of the time, 2048 x 4096 1.16, 16384 x 1024 1.19 (64-128 MiB of data), 4096 x 4096 1.00 (128 MiB),
8192 x 4096 0.87-0.97 over six runs, median 0.93 (256 MiB). Hence :func:`min_bytes`.

The renaming changes storage, not the order of anything (the tree is untouched), and it is exact when,
with ``P`` the schedule prefix through the kernel's parallel row band (one thread runs each ``P``
iteration, and a thread's iterations run one after the other):

1. every statement accessing ``Y`` is in this kernel, ``Y`` is an ``output`` (nothing it held before the
   call is read), and one of its writers, ``F``, stores ``Y[e] = f(Y[e], ...)`` (``=``, reading ``Y`` only
   at the element it writes, each element once) after every other access of ``Y`` in the same ``P``
   iteration;
2. ``F`` writes every element the other statements write (so ``Y`` ends as it did);
3. each ``P`` iteration touches one row of ``Y`` (every subscript but the last is a function of ``P``),
   and different iterations touch different rows (so no value of the buffer is needed after its row:
   one buffer per thread serves all its rows);
4. it pays: the machine has non-temporal stores, every size is known, the kernel's data reach
   :func:`min_bytes`, and a row is between :data:`MIN_ROW_BYTES` and :data:`MAX_ROW_BYTES`.

Otherwise the schedule is returned unchanged.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from polyfuse.cost import machine
from polyfuse.cost.traffic import array_bytes, itemsize
from polyfuse.ir.program import Array, Program, Statement
from polyfuse.schedule.bands import T, prefix_through
from polyfuse.schedule.model import PARALLEL_MARK, Kernel, RowBuffer, Schedule
from polyfuse.schedule.movement.kernel_tree import kernel_marks

MAX_ROW_BYTES = 64 << 10
"""The largest row buffer (per thread, on its stack): a row beyond it would not stay in L1 and L2 anyway."""

MIN_ROW_BYTES = 4 << 10
"""The shortest row buffered: ``codegen/c_stream.py`` streams no loop shorter (its ``STREAM_MIN_LOOP_BYTES``),
and without streaming the buffer only adds a pass."""

MIN_STREAMING_MULTIPLE = 8
"""Row buffers need the kernel's data at this many times the streaming threshold (module docstring)."""


def min_bytes() -> int:
    """Bytes of data from which a kernel's outputs get row buffers: :data:`MIN_STREAMING_MULTIPLE` times the
    streaming threshold (``cost/machine.py``; 256 MiB on the Emerald Rapids guest). One seam, for tests."""
    return MIN_STREAMING_MULTIPLE * machine.streaming_threshold()


def row_buffers(sched: Schedule) -> tuple[Schedule, list[str]]:
    """``sched`` (C) with the outputs described in the module docstring renamed into row buffers, and a
    note for each; unchanged where none qualifies."""
    if sched.target != "c" or not machine.streaming_stores() or any(p not in sched.params for p in sched.program.params):
        return sched, []
    prog = sched.program
    found: list[tuple[RowBuffer, Statement]] = []
    for mark in kernel_marks(sched.tree):
        kernel = mark.mark_get_id().user
        band = _parallel_band(mark)
        if not isinstance(kernel, Kernel) or band is None:
            continue
        candidates = _candidates(prog, kernel)
        rows = prefix_through(band, band.band_n_member()) if candidates else None
        for name, users in candidates.items():
            final = _final_writer(prog, kernel, name, users, rows, sched)
            buffer = f"{name}_row"
            if final is not None and buffer not in prog.arrays and buffer not in prog.scalars:
                length = prog.arrays[name].concrete_shape(sched.params)[-1]
                found.append((RowBuffer(buffer, name, length, kernel.name), final))
    if not found:
        return sched, []
    program = _renamed(prog, found)
    notes = [f"{rb.array}: its row's values stay in a buffer of one row per thread ({rb.buffer}, {rb.length} elements) "
             f"and {rb.array} is written once, by {final.name}, with streaming stores (schedule/row_buffers.py)"
             for rb, final in found]
    out = dataclasses.replace(sched, program=program, row_buffers=tuple(rb for rb, _ in found))
    out._lazy.update(sched._lazy)
    return out, notes


def _parallel_band(mark: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """The band below ``mark`` (a kernel) that the C printer runs in parallel, if it is the kernel's first."""
    node = mark.child(0)
    parallel = False
    while node.get_type() == T.mark:
        parallel = parallel or node.mark_get_id().get_name() == PARALLEL_MARK
        node = node.child(0)
    return node if parallel and node.get_type() == T.band else None


def _candidates(prog: Program, kernel: Kernel) -> dict[str, list[Statement]]:
    """Outputs with two or more writers, all of whose accesses are in ``kernel``: each with the statements
    accessing it."""
    out = {}
    for name, array in prog.arrays.items():
        if array.role != "output" or array.ndim < 1 or itemsize(prog, name) not in (4, 8):
            continue
        users = [st for st in prog.statements if any(a.array == name for a in st.accesses)]
        writers = [st for st in users if st.write.array == name]
        if len(writers) >= 2 and all(st.name in kernel.statements for st in users):
            out[name] = users
    return out


def _final_writer(prog: Program, kernel: Kernel, name: str, users: list[Statement], rows: isl.UnionMap,
                  sched: Schedule) -> Statement | None:
    """``F`` of the module docstring for output ``name``, where conditions 1-4 hold; else ``None``."""
    length_bytes = prog.arrays[name].concrete_shape(sched.params)[-1] * itemsize(prog, name)
    touched = {a.array for st in prog.statements if st.name in kernel.statements for a in st.accesses}
    data = sum(array_bytes(prog, a, sched.params) or 0 for a in touched - set(sched.contracted))
    if not MIN_ROW_BYTES <= length_bytes <= MAX_ROW_BYTES or data < min_bytes():
        return None  # (condition 4 first: it costs no isl)
    domain = _domains(users, prog)
    rows = rows.intersect_domain(domain)
    flat = sched.tree.get_map().intersect_domain(domain)
    final = None
    for st in (s for s in users if s.write.array == name and s.op == "="):
        own = st.write.relation
        if not own.is_injective():
            continue  # (an element it writes twice would be read back from the buffer the second time)
        if any(a.array == name and not a.relation.is_equal(own) for k, a in enumerate(st.accesses) if k != st.target):
            continue  # (it reads another element of Y)
        others = _domains([s for s in users if s is not st], prog)
        if _after_in_row(flat, rows, others, _domains([st], prog)):
            final = st
            break
    if final is None:
        return None
    written = isl.UnionSet.empty(prog.context.get_space())
    for st in users:
        if st is not final and st.write.array == name:
            written = written.union(isl.UnionSet.from_set(st.write.relation.range()))
    if not written.is_subset(isl.UnionSet.from_set(final.write.relation.range())):
        return None  # (condition 2)
    return final if _one_row_each(prog, users, name, rows) else None  # (condition 3)


def _domains(stmts: list[Statement], prog: Program) -> isl.UnionSet:
    out = isl.UnionSet.empty(prog.context.get_space())
    for st in stmts:
        out = out.union(isl.UnionSet.from_set(st.domain))
    return out


def _after_in_row(flat: isl.UnionMap, rows: isl.UnionMap, before: isl.UnionSet, final: isl.UnionSet) -> bool:
    """Whether every instance of ``final`` follows every instance of ``before`` of the same row."""
    if before.is_empty():
        return True
    same_row = rows.intersect_domain(before).apply_range(rows.intersect_domain(final).reverse())
    ordered = flat.intersect_domain(before).lex_lt_union_map(flat.intersect_domain(final))
    return same_row.is_subset(ordered)


def _one_row_each(prog: Program, users: list[Statement], name: str, rows: isl.UnionMap) -> bool:
    """Condition 3: the row of ``name`` each access touches is a function of the row prefix, one-to-one."""
    ndim = prog.arrays[name].ndim
    row_of = isl.UnionMap.empty(prog.context.get_space())
    for st in users:
        for acc in st.accesses:
            if acc.array == name:
                lead = acc.relation.project_out(isl.dim_type.out, ndim - 1, 1)
                row_of = row_of.union(isl.UnionMap.from_map(lead))
    per_row = rows.reverse().apply_range(row_of)  # row prefix value -> rows of the array it touches
    return per_row.is_single_valued() and per_row.is_injective()


def _renamed(prog: Program, found: list[tuple[RowBuffer, Statement]]) -> Program:
    """``prog`` with each buffered output's accesses, but its final writer's store, on the buffer."""
    arrays = dict(prog.arrays)
    rename: dict[str, tuple[str, str]] = {}  # output -> (buffer, final writer)
    for rb, final in found:
        a = prog.arrays[rb.array]
        arrays[rb.buffer] = Array(rb.buffer, a.shape, a.dtype, "temp")
        rename[rb.array] = (rb.buffer, final.name)
    statements = []
    for st in prog.statements:
        accesses = []
        for k, acc in enumerate(st.accesses):
            to = rename.get(acc.array)
            if to is not None and not (st.name == to[1] and k == st.target):
                acc = dataclasses.replace(acc, array=to[0], relation=acc.relation.set_tuple_name(isl.dim_type.out, to[0]))
            accesses.append(acc)
        statements.append(dataclasses.replace(st, accesses=tuple(accesses)) if accesses != list(st.accesses) else st)
    return dataclasses.replace(prog, arrays=arrays, statements=tuple(statements))

