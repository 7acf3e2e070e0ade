"""What the CUDA printer reads off a schedule tree before printing: each kernel's grid, block and cyclic
bands, the value of each thread-mapped member on its statements' domains, and the mapped bands made
atomic for isl's AST build."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.errors import CodegenError
from polyfuse.schedule.model import BLOCK_MARK, CYCLIC_MARK, GRID_MARK, KERNEL_MARK, Kernel


def atomic_mapped_bands(tree: isl.Schedule) -> isl.Schedule:
    """``tree`` with every member of the bands under grid/block marks generated as one (atomic) loop."""

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == isl.schedule_node_type.band and node.has_parent():
            parent = node.parent()
            if parent.get_type() == isl.schedule_node_type.mark and parent.mark_get_id().get_name() in (GRID_MARK, BLOCK_MARK):
                for m in range(node.band_n_member()):
                    node = node.band_member_set_ast_loop_type(m, isl.ast_loop_type.atomic)
        return node

    return tree.map_schedule_node_bottom_up(visit)


def thread_member_values(mapping: Mapping[str, Mapping[str, tuple[isl.ScheduleNode, int, int]]],
                          names: Sequence[str]) -> dict[str, dict[str, isl.PwAff]]:
    """For each statement under a ``"block"`` mark: the value of each thread-mapped member on its domain,
    by loop iterator name (what :meth:`KernelPrinter._pinned` guards on where isl printed no loop)."""
    out: dict[str, dict[str, isl.PwAff]] = {}
    for info in mapping.values():
        if BLOCK_MARK not in info:
            continue
        band, n, _ = info[BLOCK_MARK]
        depth = band.get_schedule_depth()
        partial = band.band_get_partial_schedule()
        for k in range(n):
            pieces = partial.get_union_pw_aff(k).get_pw_aff_list()
            for j in range(pieces.n_pw_aff()):
                pa = pieces.get_at(j)
                out.setdefault(pa.get_domain_space().get_tuple_name(isl.dim_type.set), {})[names[depth + k]] = pa
    return out


def register_copy_values(statements: Mapping[str, object], buffers: Mapping[str, object],
                         mapping: Mapping[str, Mapping[str, tuple[isl.ScheduleNode, int, int]]],
                         names: Sequence[str]) -> dict[str, dict[str, isl.PwAff]]:
    """:func:`thread_member_values` for the register copies (loads, stores, window updates): their instances
    are named by the schedule prefix below the thread band (``schedule/movement/copies.py``), so a thread
    member's value is the copy's own coordinate at that depth. Without it a copy isl printed no thread
    loop for ran on thread 0 while the statement reading its register ran on the thread of its value."""
    out: dict[str, dict[str, isl.PwAff]] = {}
    for buffer in buffers.values():
        info = mapping.get(buffer.kernel, {})
        if buffer.space != "register" or BLOCK_MARK not in info:
            continue
        band, n, _ = info[BLOCK_MARK]
        depth = band.get_schedule_depth()
        for name, stmt in statements.items():
            if not any(a.array == buffer.name for a in stmt.accesses):
                continue
            space = stmt.domain.get_space()
            for k in range(n):
                if depth + k < stmt.domain.dim(isl.dim_type.set):
                    var = isl.PwAff.var_on_domain(isl.LocalSpace.from_space(space), isl.dim_type.set, depth + k)
                    out.setdefault(name, {})[names[depth + k]] = var
    return out


def mapping_info(tree: isl.Schedule) -> dict[str, dict[str, tuple[isl.ScheduleNode, int, int]]]:
    """For each kernel name: its grid and block bands, how many members each maps, and the host depth."""
    out: dict[str, dict[str, tuple[isl.ScheduleNode, int, int]]] = {}

    def walk(node: isl.ScheduleNode, kernel: Kernel | None, host_depth: int) -> None:
        if node.get_type() == isl.schedule_node_type.mark:
            name = node.mark_get_id().get_name()
            if name == KERNEL_MARK:
                kernel = node.mark_get_id().user
                host_depth = node.get_schedule_depth()
                out.setdefault(kernel.name, {})
            elif name in (GRID_MARK, BLOCK_MARK) and kernel is not None:
                band = node.child(0)
                if band.get_type() != isl.schedule_node_type.band:
                    raise CodegenError(f"the {name!r} mark of {kernel.name} is not above a band")
                extents = kernel.grid if name == GRID_MARK else kernel.block
                n = len(extents) if extents else min(3, band.band_n_member())
                out[kernel.name][name] = (band, min(n, band.band_n_member()), host_depth)
            elif name == CYCLIC_MARK and kernel is not None:
                band = node.child(0)
                out[kernel.name][name] = (band, 1, band.get_schedule_depth())
        for k in range(node.n_children()):
            walk(node.child(k), kernel, host_depth)

    walk(tree.get_root(), None, 0)
    return out
