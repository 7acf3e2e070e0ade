"""Static checks run when a Program is built: accesses stay inside their arrays, temporaries are written
before they are read, and argument roles follow what the program actually reads and writes.

These run for every frontend, so a bad program is rejected before any transformation sees it.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from polyfuse.errors import BoundsError, SourceError
from polyfuse.ir.program import Access, Array, Program, Statement


def check_program(prog: Program) -> Program:
    """``prog`` with argument roles refined, after checking bounds and temporary initialisation."""
    for stmt in prog.statements:
        for acc in stmt.accesses:
            _check_bounds(prog, stmt, acc)
    no_source = _reads_without_source(prog)
    for stmt in prog.statements:
        for acc in stmt.accesses:
            arr = prog.arrays[acc.array]
            if arr.role != "temp" or acc.kind == "write":
                continue
            missing = no_source.get((stmt.name, acc.array))
            if missing is not None and not missing.is_empty():
                witness = _describe_point(missing.sample_point(), stmt)
                what = "local scalar" if arr.ndim == 0 else "temporary"
                raise SourceError(
                    f"{what} {acc.array!r} is read by {stmt.name} ({stmt.text!r}) before any statement writes it, e.g. at {witness}",
                    filename=prog.filename, line=stmt.line,
                )
    return _refine_roles(prog, no_source)


def array_extent(arr: Array, params: tuple[str, ...]) -> isl.Set:
    """``{ A[a0, a1, ...] : 0 <= ak < shape_k }`` over the program's params."""
    space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=[f"a{k}" for k in range(arr.ndim)], params=list(params))
    v = isl.affs_from_space(space)
    ext = isl.Set.universe(space)
    for k, size in enumerate(arr.shape):
        bound = v[0] + size.constant
        for name, c in size.terms:
            bound = bound + v[name] * c
        ext = ext & v[f"a{k}"].ge_set(v[0]) & v[f"a{k}"].lt_set(bound)
    return ext.set_tuple_name(arr.name)


def _check_bounds(prog: Program, stmt: Statement, acc: Access) -> None:
    arr = prog.arrays[acc.array]
    ext = array_extent(arr, prog.params)
    rel = acc.relation.intersect_params(prog.context)
    outside = rel.subtract_range(ext)
    if outside.is_empty():
        return
    pair = outside.wrap()
    point = pair.sample_point()
    n_in = stmt.depth
    coords = [int(point.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(pair.dim(isl.dim_type.set))]
    params = {p: int(point.get_coordinate_val(isl.dim_type.param, k).to_python()) for k, p in enumerate(pair.get_var_names(isl.dim_type.param))}
    its = ", ".join(f"{n}={c}" for n, c in zip(stmt.iterators, coords[:n_in]))
    elem = ", ".join(str(c) for c in coords[n_in:])
    shape = ", ".join(_format_size(s) for s in arr.shape)
    sizes = ", ".join(f"{p}={v}" for p, v in params.items() if p in prog.params)
    raise BoundsError(
        f"{prog.filename}:{stmt.line}: access {acc.text or acc.array} in {stmt.name} ({stmt.text!r}) can fall outside "
        f"array {arr.name!r} of shape ({shape}): with {sizes or 'these sizes'}, at {its or 'the single instance'} it touches "
        f"{arr.name}[{elem}]"
    )


def _reads_without_source(prog: Program) -> dict[tuple[str, str], isl.Set]:
    """For each (statement, array), the read instances that no earlier write supplies (live-in reads)."""
    sink = prog.access_relations(("read", "update"))
    must = prog.access_relations(("write", "update"))
    info = isl.UnionAccessInfo.from_sink(sink).set_must_source(must).set_schedule(prog.schedule)
    flow = info.compute_flow()
    no_source = flow.get_must_no_source()
    out: dict[tuple[str, str], isl.Set] = {}
    for m in _maps(no_source):
        key = (m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out))
        dom = m.domain()
        out[key] = out[key].union(dom) if key in out else dom
    return out


def _refine_roles(prog: Program, no_source: dict[tuple[str, str], isl.Set]) -> Program:
    """An argument that is written and whose old contents are never read is an output, not an inout."""
    written = {s.write.array for s in prog.statements}
    live_in = {arr for (_, arr), s in no_source.items() if not s.is_empty()}
    arrays = dict(prog.arrays)
    for name, arr in prog.arrays.items():
        if arr.role == "temp":
            continue
        role = "input" if name not in written else ("inout" if name in live_in else "output")
        if role != arr.role:
            arrays[name] = dataclasses.replace(arr, role=role)
    return dataclasses.replace(prog, arrays=arrays, _cache={})


def _maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out


def _describe_point(point: isl.Point, stmt: Statement) -> str:
    vals = [int(point.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(stmt.depth)]
    return ", ".join(f"{n}={v}" for n, v in zip(stmt.iterators, vals)) or "its single instance"


def _format_size(s) -> str:
    parts = [(f"{c}*{n}" if c != 1 else n) for n, c in s.terms]
    if s.constant or not parts:
        parts.append(str(s.constant))
    return " + ".join(parts).replace("+ -", "- ")
