"""The C register micro-kernel printed for a ``microtile`` mark (``schedule/tiling/microtile.py``).

Below the mark isl prints the point loops of a contraction's band, the last three being the rows ``i``,
the lane ``j`` and the reduction ``k``. Where those loops are rectangular (the bounds of ``j`` and ``k``
do not depend on ``i`` or ``j``) and unit-stride, they are printed as::

    for (i = lo; i <= hi; i += MR)
        full MR rows:  for j in steps of NR vectors of lanes: MR x NR accumulators in vector registers
                       over all of k; the lanes left: one vector at a time, then the last few (a masked
                       vector with AVX-512; else half a vector, then one lane at a time)
        last rows:     the same, one row at a time

(in fact lanes outermost, so that each strip's packed panel serves every row group: ``c_micro_tile.py``
prints the tile).
Each accumulator is loaded from the updated array before the ``k`` loop and stored after it, so every
element still sums its terms in the source order of ``k``; the only difference from the reference is the
fused multiply-add that ``reassociate=True`` allows, and (with it) a convolution's window loops run
inside its channel loop instead of around it (:meth:`~polyfuse.codegen.c_micro_tile.RegisterTile._window_inside`). Reads invariant along the lane are broadcast once
per row, reads contiguous along it loaded once per vector. Anything else below the mark (guards,
other shapes) is printed by the generic printer: :func:`microtile_lines` returns ``None``.
"""

from __future__ import annotations

from collections.abc import Callable

import islpy as isl

from polyfuse.codegen.ast import expr_ids, statement_call
from polyfuse.codegen.c_micro_tile import INDENT, RegisterTile
from polyfuse.schedule.tiling.accesses import access_coefficients
from polyfuse.schedule.tiling.microtile import MicroTile

Op = isl.ast_expr_op_type

class Loop:
    """One ``for`` of the AST below the mark: iterator, first value, last value (inclusive), as C text."""

    def __init__(self, node: isl.AstNode, index: Callable[[isl.AstExpr], str]) -> None:
        self.node = node
        self.name = node.for_get_iterator().get_id().get_name()
        self.degenerate = node.for_is_degenerate()
        self.init = index(node.for_get_init())
        self.ids = expr_ids(node.for_get_init())
        self.last: str | None = None
        self.unit = True
        if not self.degenerate:
            cond, inc = node.for_get_cond(), node.for_get_inc()
            self.unit = inc.get_type() == isl.ast_expr_type.int and inc.get_val().to_python() == 1
            if cond.get_type() == isl.ast_expr_type.op and cond.get_op_type() in (Op.le, Op.lt):
                lhs, rhs = cond.get_op_arg(0), cond.get_op_arg(1)
                if lhs.get_type() == isl.ast_expr_type.id and lhs.get_id().get_name() == self.name:
                    bound = index(rhs)
                    self.last = bound if cond.get_op_type() == Op.le else f"({bound} - 1)"
                    self.ids |= expr_ids(rhs)


def microtile_lines(printer, mark: isl.AstNode, depth: int) -> list[str] | None:
    """The micro-kernel for the AST below ``mark`` (see the module docstring), or ``None`` when the loops
    there do not have the shape it needs. ``printer`` is the C printer (its ``_index``, ``dialect`` and
    ``sched``)."""
    info = mark.mark_get_id().user
    if not isinstance(info, MicroTile):
        return None
    loops: list[Loop] = []
    node = mark.mark_get_node()
    while node.get_type() == isl.ast_node_type.for_:
        loops.append(Loop(node, printer._index))
        node = node.for_get_body()
    if node.get_type() != isl.ast_node_type.user or len(loops) < 2:
        return None
    call = statement_call(node)
    stmt = call.statement
    if stmt.name != info.statement:
        return None
    loop_of: dict[str, str] = {}  # statement iterator -> its value as C text (an AST iterator for the tile's)
    row_less = info.rows is None  # (one row per launch: the rows are host loops)
    n_tile = (2 if row_less else 3) + len(info.inner)
    if len(loops) < n_tile:
        return None
    rows, lane, *inner_loops, red = [None, *loops[-n_tile:]] if row_less else loops[-n_tile:]
    tile_names = {lp.name for lp in loops[-n_tile:]}
    roles = (*(() if row_less else (info.rows,)), info.lane, *info.inner, info.reduction)
    for it, arg in zip(stmt.iterators, call.arguments):
        if arg.get_type() == isl.ast_expr_type.id:
            loop_of[it] = arg.get_id().get_name()
        elif expr_ids(arg) & tile_names:
            return None  # another iterator's value moves with the tile's loops: not this shape
        else:
            loop_of[it] = f"({printer._index(arg)})"
    if [lp.name for lp in loops[-n_tile:]] != [loop_of.get(it) for it in roles]:
        return None
    if any(name in tile_names for it, name in loop_of.items() if it not in roles):
        return None
    tile_loops = (lane, red) if row_less else (rows, lane, red)
    if any(lp.degenerate or lp.last is None or not lp.unit for lp in tile_loops):
        return None
    if any(not lp.degenerate and (lp.last is None or not lp.unit) for lp in inner_loops):
        return None
    moving = {lp.name for lp in tile_loops[:-1]}
    if moving & red.ids and (lane.name in red.ids or row_less or inner_loops or rows.name in lane.ids):
        return None  # (lane bounds that move with the row are handled: RegisterTile.triangle_lines; reduction bounds
        # that move with the row alone: RegisterTile._row_ranges)
    if row_less and lane.ids & {lp.name for lp in loops}:
        return None  # (a row-less tile's lanes must not depend on an enclosing loop of the tile band)
    if any((lp.ids | red.ids) & moving for lp in inner_loops):
        return None
    coeffs = [access_coefficients(a.relation) for a in stmt.accesses]
    if any(c is None for c in coeffs):
        return None
    kernel = RegisterTile(printer, stmt, coeffs, loop_of, info, rows, lane, red, printer.sched.reassociate, tuple(inner_loops))
    if kernel.triangular_reduction and kernel._strided():
        return None  # (a gathered panel spans one range of k for all rows)
    if info.start is not None and (kernel.triangular_reduction or red.ids & {lp.name for lp in loops[-n_tile:-1]}):
        return None  # (a folded initialisation needs every row's and lane's first term in the same call)
    lines: list[str] = []
    pad = depth
    for lp in loops[:-n_tile]:  # batch and outer reduction loops: as isl printed them
        if lp.degenerate:
            lines += [INDENT * pad + "{", INDENT * (pad + 1) + f"const int64_t {lp.name} = {lp.init};"]
        elif lp.last is None or not lp.unit:
            return None
        else:
            lines.append(INDENT * pad + f"for (int64_t {lp.name} = {lp.init}; {lp.name} <= {lp.last}; {lp.name} += 1) {{")
        pad += 1
    lines += kernel.lines(pad)
    for _ in loops[:-n_tile]:
        pad -= 1
        lines.append(INDENT * pad + "}")
    printer.uses_vectors = True
    return lines
