"""The C printer's OpenMP decisions, apart from its printing: which loop a ``parallel`` mark designates and
whether the next one may take over or be collapsed (:func:`annotate_parallel_marks`), whether a host loop
holds parallel kernels (:func:`holds_parallel_mark`), and the ``omp simd`` clauses of a reduction loop
(:func:`simd_clauses`). Used by ``codegen/c.py``; see ``docs/architecture.md``, "Parallel loops on C"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.codegen.ast import block_children
from polyfuse.errors import CodegenError
from polyfuse.ir.expr import Binary, Read
from polyfuse.ir.program import Array, Statement
from polyfuse.schedule.model import PARALLEL_MARK


class Marked(str):
    """The iterator name of the loop a ``parallel`` mark designates, with ``two``: whether the marked
    band's first two members are both parallel (then the next loop may take over or be collapsed)."""

    two: bool

    def __new__(cls, name: str, two: bool) -> Marked:
        out = super().__new__(cls, name)
        out.two = two
        return out


def two(parallel: str | None) -> bool:
    """Whether the mark that designated ``parallel`` has two leading parallel members."""
    return bool(getattr(parallel, "two", False))


def annotate_parallel_marks(tree: isl.Schedule) -> isl.Schedule:
    """``tree`` with every ``parallel`` mark re-created with ``(schedule depth, two parallel members)`` as
    its user object. The depth names the marked loop, so the printer can tell it from a deeper loop when
    isl elided it (a single iteration at these sizes); the flag is per mark, since marks of different
    kernels share iterator names."""
    failures: list[BaseException] = []

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        try:
            if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == PARALLEL_MARK:
                band = node.child(0)
                two = (band.get_type() == isl.schedule_node_type.band and band.band_n_member() >= 2
                       and bool(band.band_member_get_coincident(0)) and bool(band.band_member_get_coincident(1)))
                return node.delete().insert_mark(isl.Id(PARALLEL_MARK, user=(node.get_schedule_depth(), two)))
        except Exception as e:  # noqa: BLE001 - re-raised after isl returns
            failures.append(e)
        return node

    out = tree.map_schedule_node_bottom_up(visit)
    if failures:
        raise CodegenError(f"cannot annotate the parallel marks: {failures[0]}") from failures[0]
    return out


def holds_parallel_mark(node: isl.AstNode) -> bool:
    """Whether some ``parallel`` mark lies below ``node`` in the AST."""
    t = node.get_type()
    if t == isl.ast_node_type.mark:
        return node.mark_get_id().get_name() == PARALLEL_MARK or holds_parallel_mark(node.mark_get_node())
    if t == isl.ast_node_type.for_:
        return holds_parallel_mark(node.for_get_body())
    if t == isl.ast_node_type.block:
        return any(holds_parallel_mark(c) for c in block_children(node))
    if t == isl.ast_node_type.if_:
        return holds_parallel_mark(node.if_get_then_node()) or (
            node.if_has_else_node() and holds_parallel_mark(node.if_get_else_node()))
    return False


def _own_update(stmt, k: int) -> bool:
    """Whether access ``k`` of ``stmt`` is the read of its own target in ``s = max(s, x)``."""
    v = stmt.value
    return (stmt.op == "=" and isinstance(v, Binary) and v.op in ("max", "min")
            and any(isinstance(side, Read) and side.access == k for side in (v.lhs, v.rhs))
            and stmt.accesses[k].array == stmt.write.array)


def simd_clauses(stmts: Sequence[Statement], local_scalars: frozenset[str], arrays: Mapping[str, Array]) -> list[tuple[str, str]]:
    """``(operator, scalar)`` for each local scalar that an innermost loop running ``stmts`` reduces into
    (``s += ...`` or ``s = max(s, ...)``) when nothing else there reads it, and ``("private", scalar)`` for
    the per-iteration scalars beside them: such a loop is printed with ``#pragma omp simd reduction(...)``,
    so the compiler may keep one partial result per SIMD lane and combine them at the end (a
    reassociation: only with ``reassociate=True``). Empty when the loop has no reduction, or a scalar
    carries a value from one iteration to the next."""
    found: dict[str, str] = {}
    for st in stmts:
        name = st.write.array
        if name not in local_scalars or not arrays[name].dtype.is_float:
            continue
        if st.op in ("+=", "-="):  # (``s -= e`` under ``reduction(+:s)``: each lane's copy starts at 0)
            found[name] = "+"
        elif st.op == "=" and isinstance(st.value, Binary) and st.value.op in ("max", "min") and any(
                isinstance(side, Read) and st.accesses[side.access].array == name for side in (st.value.lhs, st.value.rhs)):
            found[name] = st.value.op
    for st in stmts:
        for k, acc in enumerate(st.accesses):
            if acc.array in found and not (k == st.target or _own_update(st, k)):
                found.pop(acc.array)
        if st.write.array in found and sum(1 for other in stmts if other.write.array == st.write.array) > 1:
            found.pop(st.write.array)
    if not found:
        return []
    # other local scalars written in the body must be per-iteration temporaries (written before any
    # read in every iteration): they are private to each SIMD lane; anything else forbids the pragma
    for name in {st.write.array for st in stmts if st.write.array in local_scalars} - set(found):
        first = next(st for st in stmts if any(a.array == name for a in st.accesses))
        if first.write.array != name or any(a.array == name for k, a in enumerate(first.accesses) if k != first.target):
            return []
        found[name] = "private"
    return sorted((op, name) for name, op in found.items())

def holds_loop(node: isl.AstNode) -> bool:
    """Whether the AST below ``node`` contains a ``for`` loop (isl elides degenerate ones)."""
    kind = node.get_type()
    if kind == isl.ast_node_type.for_:
        return True
    if kind == isl.ast_node_type.block:
        return any(holds_loop(c) for c in block_children(node))
    if kind == isl.ast_node_type.if_:
        return holds_loop(node.if_get_then_node()) or (node.if_has_else_node() and holds_loop(node.if_get_else_node()))
    if kind == isl.ast_node_type.mark:
        return holds_loop(node.mark_get_node())
    return False


def element_reduction(stmt: Statement, arrays: Mapping[str, Array]) -> bool:
    """Whether ``stmt`` adds into one float array element (``w[i] += e``, ``w[i] -= e`` or ``w[i] = w[i] + e``,
    ``e`` reading no element of ``w`` that the statement writes: trisolv's ``x[i] -= L[i][j] * x[j]`` with
    ``j < i``): run alone by an innermost loop along which that element does not move, the printer keeps it
    in a scalar accumulator under ``#pragma omp simd reduction(+:...)`` (a reassociation: only with
    ``reassociate=True``) instead of reading and writing memory every iteration (atax, gemver, mvt)."""
    target = stmt.write.array
    if not arrays[target].shape or not arrays[target].dtype.is_float:
        return False
    if stmt.op in ("+=", "-="):
        rest = [stmt.value]
    elif stmt.op == "=" and isinstance(stmt.value, Binary) and stmt.value.op == "+":
        sides = [stmt.value.lhs, stmt.value.rhs]
        own = [k for k, side in enumerate(sides) if isinstance(side, Read)
               and stmt.accesses[side.access].array == target
               and stmt.accesses[side.access].relation.is_equal(stmt.write.relation)]
        if len(own) != 1:
            return False
        rest = [sides[1 - own[0]]]
    else:
        return False
    return not any(isinstance(node, Read) and stmt.accesses[node.access].array == target
                   and not stmt.accesses[node.access].relation.intersect(stmt.write.relation).is_empty()
                   for e in rest for node in e.walk())

