"""C for a loop under a ``jam`` mark: independent recurrences run in step (see
:mod:`polyfuse.schedule.tiling.jam` for when and why).

The marked loop ``for (c3 ...) { before...; for (c4 ...) { body } after... }`` is printed as::

    {
        int64_t c3 = <init>;
        for (; c3 + 3 <= <upper>; c3 += 4) {
            <copies of the carried scalars: x_j1, x_j2, x_j3>
            before (c3), before (c3 + 1), ..., before (c3 + 3)
            for (c4 ...) { body (c3); body (c3 + 1); ...; body (c3 + 3) }
            after (c3), ..., after (c3 + 3)
        }
        for (; c3 <= <upper>; c3 += 1) { the loop's body as it was }
    }

Copy ``u`` is the printed body with the iterator replaced by ``(c3 + u)`` and every local scalar the loop
writes renamed (iterator names never collide with the program's names; see ``iterator_names``). The
loop is left as it is (``None``) unless its shape is exactly that: a unit-step loop bounded above by an
expression free of its iterator, around one innermost loop whose bounds do not mention it and whose
body is no reduction the printer would vectorise, the other statements of the body outside any loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl

from polyfuse.codegen.ast import block_children, expr_ids, statement_call
from polyfuse.codegen.c_expressions import replace_identifier, strip_parens
from polyfuse.codegen.c_openmp import holds_loop

if TYPE_CHECKING:
    from polyfuse.codegen.c import _CPrinter

INDENT = "    "
INDEX_TYPE = "int64_t"
Op = isl.ast_expr_op_type


def jam_lines(printer: _CPrinter, node: isl.AstNode, depth: int, factor: int, parallel: str | None) -> list[str] | None:
    """The lines of the jammed loop ``node`` (the mark's child), or ``None`` to print it as it is."""
    if factor < 2 or node.get_type() != isl.ast_node_type.for_ or node.for_is_degenerate():
        return None
    if printer._is_parallel_loop(node, parallel):
        return None  # (isl elided the tile loop: this is the OpenMP loop itself)
    it = printer._index(node.for_get_iterator())
    upper = _upper_bound(printer, node, it)
    if upper is None:
        return None
    body = node.for_get_body()
    children = list(block_children(body)) if body.get_type() == isl.ast_node_type.block else [body]
    loops = [k for k, c in enumerate(children) if holds_loop(c)]
    if len(loops) != 1 or children[loops[0]].get_type() != isl.ast_node_type.for_:
        return None
    inner = children[loops[0]]
    if inner.for_is_degenerate() or holds_loop(inner.for_get_body()):
        return None
    if it in expr_ids(inner.for_get_init()) | expr_ids(inner.for_get_cond()) | expr_ids(inner.for_get_inc()):
        return None
    if printer.sched.reassociate and (printer._simd_reductions(inner.for_get_body())
                                      or printer._element_reduction(inner, depth, None) is not None):
        return None  # (a reduction the printer vectorises: with reassociation, one chain is no latency chain)
    scalars = sorted(_written_scalars(body, printer.local_scalars))
    taken = set(printer.program.arrays) | set(printer.iterators)
    if any(f"{s}_j{u}" in taken for s in scalars for u in range(1, factor)):
        return None

    def copies(lines: list[str]) -> list[str]:
        out = list(lines)
        for u in range(1, factor):
            for line in lines:
                line = replace_identifier(line, it, f"({it} + {u})")
                for s in scalars:
                    line = replace_identifier(line, s, f"{s}_j{u}")
                out.append(line)
        return out

    pad, inner_pad = INDENT * depth, INDENT * (depth + 2)
    before = [line for c in children[:loops[0]] for line in printer._node(c, depth + 2, None)]
    after = [line for c in children[loops[0] + 1:] for line in printer._node(c, depth + 2, None)]
    inner_it = printer._index(inner.for_get_iterator())
    header = (f"{inner_pad}for ({INDEX_TYPE} {inner_it} = {printer._index(inner.for_get_init())}; "
              f"{strip_parens(printer._index(inner.for_get_cond()))}; {inner_it} += {printer._index(inner.for_get_inc())}) {{")
    recurrence = printer._node(inner.for_get_body(), depth + 3, None)
    declared = [f"{inner_pad}{printer.program.arrays[s].dtype.c_name} {s}_j{u};" for s in scalars for u in range(1, factor)]
    comparison = "<=" if upper[1] else "<"
    return [f"{pad}{{  /* {factor} iterations of {it} in step: independent recurrences (jam) */",
            f"{pad}{INDENT}{INDEX_TYPE} {it} = {printer._index(node.for_get_init())};",
            f"{pad}{INDENT}for (; {it} + {factor - 1} {comparison} {upper[0]}; {it} += {factor}) {{",
            *declared, *copies(before), header, *copies(recurrence), f"{inner_pad}}}", *copies(after),
            f"{pad}{INDENT}}}",
            f"{pad}{INDENT}for (; {it} {comparison} {upper[0]}; {it} += 1) {{",
            *printer._node(body, depth + 2, None),
            f"{pad}{INDENT}}}",
            f"{pad}}}"]


def _upper_bound(printer: _CPrinter, node: isl.AstNode, it: str) -> tuple[str, bool] | None:
    """``(bound, inclusive)`` of a loop whose step is 1 and whose condition is ``it <= bound`` or
    ``it < bound`` with ``bound`` free of ``it``; ``None`` otherwise."""
    inc = node.for_get_inc()
    if inc.get_type() != isl.ast_expr_type.int or inc.int_get_val().to_python() != 1:
        return None
    cond = node.for_get_cond()
    if cond.get_type() != isl.ast_expr_type.op or cond.get_op_type() not in (Op.le, Op.lt):
        return None
    lhs, rhs = cond.get_op_arg(0), cond.get_op_arg(1)
    if lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != it or it in expr_ids(rhs):
        return None
    return printer._index(rhs), cond.get_op_type() == Op.le


def _written_scalars(node: isl.AstNode, local_scalars: frozenset[str]) -> set[str]:
    """The local scalars that statements below ``node`` write."""
    kind = node.get_type()
    if kind == isl.ast_node_type.user:
        write = statement_call(node).statement.write.array
        return {write} if write in local_scalars else set()
    if kind == isl.ast_node_type.block:
        return set().union(*(_written_scalars(c, local_scalars) for c in block_children(node)))
    if kind == isl.ast_node_type.for_:
        return _written_scalars(node.for_get_body(), local_scalars)
    if kind == isl.ast_node_type.if_:
        out = _written_scalars(node.if_get_then_node(), local_scalars)
        return out | (_written_scalars(node.if_get_else_node(), local_scalars) if node.if_has_else_node() else set())
    if kind == isl.ast_node_type.mark:
        return _written_scalars(node.mark_get_node(), local_scalars)
    return set()
