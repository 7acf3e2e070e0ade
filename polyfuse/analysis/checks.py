"""Static checks run when a Program is built: the IR is well formed, accesses stay inside their arrays,
temporaries are written before they are read, and argument roles follow what the program reads and writes.

These run for every frontend, so a bad program is rejected before any transformation sees it. Each
failure names the statement and its source line and gives a concrete witness: size values allowed by the
program's context and the instance (iterator values) that goes wrong. Witnesses are the lexicographically
smallest such points (sizes first, in the order of ``Program.params``), so they are small and stable.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import warnings

import islpy as isl

from polyfuse.errors import BoundsError, PolyfuseWarning, SourceError, user_stacklevel
from polyfuse.ir.expr import Read, Where
from polyfuse.ir.printer import format_size
from polyfuse.ir.program import Access, Array, Assumption, Program, Statement
from polyfuse.ir.verify import verify_program


def check_program(prog: Program) -> Program:
    """``prog`` with argument roles refined, after verifying it and checking bounds and initialisation."""
    verify_program(prog)
    for n in range(len(prog.statements)):
        for k in range(len(prog.statements[n].accesses)):
            prog = _check_bounds(prog, prog.statements[n], k, prog.statements[n].accesses[k])
    no_source = _reads_without_source(prog)
    if no_source is None:
        return _refine_roles(prog, None)
    for stmt in prog.statements:
        for acc in stmt.accesses:
            _check_initialised(prog, stmt, acc, no_source)
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


# ----- bounds ---------------------------------------------------------------------------------------
def _check_bounds(prog: Program, stmt: Statement, index: int, acc: Access) -> Program:
    """``prog`` when the access stays inside its array; else ``prog`` with a derived assumption (see
    :func:`_derive`); else a :class:`BoundsError` with a witness."""
    arr = prog.arrays[acc.array]
    rel = acc.relation.intersect_domain(stmt.domain).intersect_params(prog.context)
    outside = rel.subtract_range(array_extent(arr, prog.params))
    if outside.is_empty():
        return prog
    derived = _derive(prog, stmt, acc, outside)
    if derived is not None:
        return derived
    sizes, coords = _smallest_point(outside.wrap(), prog.params)
    its = ", ".join(f"{n}={c}" for n, c in zip(stmt.iterators, coords[: stmt.depth]))
    elem = ", ".join(str(c) for c in coords[stmt.depth:])
    shape = ", ".join(format_size(s) for s in arr.shape)
    verb = "writes" if acc.kind == "write" else "updates" if acc.kind == "update" else "reads"
    hint = ("pf.where evaluates both of its branches; guard the access with an affine `if` instead"
            if _inside_where(stmt, index) else
            "guard the access with an affine `if`, tighten the loop bounds, or exclude such sizes with assume=")
    raise BoundsError(
        f"{prog.filename}:{stmt.line}: {stmt.name} {verb} `{acc.text or acc.array}` outside array '{arr.name}' of shape "
        f"({shape}): with sizes {_assignments(sizes) or '(none)'}, instance {_instance(stmt, its)} touches {arr.name}[{elem}] "
        f"({hint})\n    {stmt.text}"
    )


def _derive(prog: Program, stmt: Statement, acc: Access, outside: isl.Map) -> Program | None:
    """``prog`` assuming the sizes for which ``acc`` stays inside its array (``y[0]`` outside any loop: ``n >= 1``),
    like Polly's assumed context, when those sizes are a simple constraint (one convex piece without
    existential variables, each of its constraints a bound on one size) that leaves the statement some
    instances; None otherwise: the access is out of bounds for every size, or only for a pattern of sizes
    no simple constraint describes, or unless one size bounds another (``C[i]`` of ``C[M]`` for ``i < N``),
    which is left to an explicit ``assume=``."""
    good = prog.context.params().subtract(outside.params()).coalesce()
    if good.is_empty() or good.n_basic_set() != 1 or good.get_basic_sets()[0].dim(isl.dim_type.div) != 0:
        return None
    bounds_one_size = all(
        sum(not c.get_coefficient_val(isl.dim_type.param, k).is_zero() for k in range(good.dim(isl.dim_type.param))) <= 1
        for c in good.get_basic_sets()[0].get_constraints()
    )
    if not bounds_one_size:  # `C[i]` of C[M] for i < N: a relation between sizes is more likely a wrong size
        return None
    if stmt.domain.intersect_params(good).is_empty():
        return None
    good = good.remove_redundancies()
    condition = good.gist_params(prog.context.params())
    statements = tuple(dataclasses.replace(s, domain=s.domain.intersect_params(good)) for s in prog.statements)
    assumption = Assumption(condition, acc.text or acc.array, stmt.name, stmt.line)
    return dataclasses.replace(prog, context=good, statements=statements, assumptions=(*prog.assumptions, assumption))


def _inside_where(stmt: Statement, index: int) -> bool:
    """Whether access ``index`` of ``stmt`` is read inside a branch of a pf.where."""
    for node in stmt.value.walk():
        if isinstance(node, Where):
            for branch in (node.if_true, node.if_false):
                if any(isinstance(n, Read) and n.access == index for n in branch.walk()):
                    return True
    return False


# ----- initialisation -------------------------------------------------------------------------------
CHECK_BUDGET = 20_000_000
"""isl operations the initialisation check may take before it gives up (with a warning) on proving
temporaries initialised; past it every argument that is written is taken to be read as well (``inout``)."""


def _reads_without_source(prog: Program) -> dict[tuple[str, str], isl.Set] | None:
    """For each (statement, array), the read instances that no earlier write supplies (live-in reads);
    ``None`` when isl could not tell within :data:`CHECK_BUDGET` operations.

    Memory-based: a read has no source exactly when no write of the same element comes before it, so the
    last writer (isl's dataflow, far costlier on ``%`` and ``//`` subscripts) is not needed here.
    """
    reads = prog.access_relations(("read", "update"))  # S[i] -> A[e]
    writes = prog.access_relations(("write", "update"))
    when = prog.schedule.get_map()
    ctx = isl.DEFAULT_CONTEXT
    saved = ctx.get_max_operations()
    ctx.set_max_operations(CHECK_BUDGET)
    ctx.reset_operations()
    try:
        out: dict[tuple[str, str], isl.Set] = {}
        written = {s.write.array for s in prog.statements}
        for name in sorted({a.array for s in prog.statements for a in s.accesses if a.kind != "write"}):
            # one array at a time: the instances that come before a read are then sought among the
            # statements that write this array only (over the whole program: quadratic in its statements)
            r = _on_array(reads, name)
            if name in written:
                w = _on_array(writes, name)
                w_when = when.intersect_domain(w.domain())
                pairs = r.range_map().apply_range(w.reverse())  # [S[i] -> A[e]] -> writes of A[e]
                earlier = r.domain_map().apply_range(when.intersect_domain(r.domain())).lex_gt_union_map(w_when)
                r = r.wrap().subtract(pairs.intersect(earlier).domain()).unwrap()
            for m in _maps(r):
                key = (m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out))
                dom = m.domain()
                out[key] = out[key].union(dom) if key in out else dom
        return out
    except isl.Error:
        warnings.warn(f"{prog.filename}: {prog.name}: could not prove within {CHECK_BUDGET} isl operations that "
                      "every temporary is written before it is read; not checked", PolyfuseWarning, stacklevel=user_stacklevel())
        return None
    finally:
        ctx.set_max_operations(saved)
        ctx.reset_operations()


def _check_initialised(prog: Program, stmt: Statement, acc: Access, no_source: dict[tuple[str, str], isl.Set]) -> None:
    """A temporary (or local scalar) read where no earlier statement instance wrote it is an error."""
    arr = prog.arrays[acc.array]
    if arr.role != "temp" or acc.kind == "write":
        return
    missing = no_source.get((stmt.name, acc.array))
    if missing is None:
        return
    missing = missing.intersect(stmt.domain).intersect_params(prog.context)
    if missing.is_empty():
        return
    sizes, coords = _smallest_point(missing, prog.params)
    its = ", ".join(f"{n}={c}" for n, c in zip(stmt.iterators, coords))
    what = "local scalar" if arr.ndim == 0 else "temporary"
    verb = "updated" if acc.kind == "update" else "read"
    line_text = linecache.getline(prog.filename, stmt.line) or None
    raise SourceError(
        f"{what} '{acc.array}' is {verb} by {stmt.name} before any statement writes it: with sizes "
        f"{_assignments(sizes) or '(none)'}, instance {_instance(stmt, its)} has no earlier write of `{acc.text or acc.array}`",
        filename=prog.filename, line=stmt.line, col=_column_of(line_text, acc.text or acc.array, after_assignment=acc.kind == "read"),
        source_line=line_text,
        hint=f"assign {acc.array} before reading it" if arr.ndim == 0 else f"write every element of {acc.array} before reading it",
    )


def _column_of(line: str | None, text: str, after_assignment: bool = False) -> int | None:
    """Where ``text`` starts in ``line`` (spacing-insensitive; for a read, right of the assignment
    operator), else the line's first non-blank column."""
    if not line:
        return None
    start = 0
    if after_assignment:
        op = re.search(r"(?<![=<>!])[-+*/]?=(?!=)", line)
        start = op.end() if op else 0
    pattern = r"\s*".join(re.escape(ch) for ch in text if not ch.isspace())
    m = re.compile(r"(?<![\w.])" + pattern + (r"(?!\w)" if text[-1:].isidentifier() else "")).search(line, start) if pattern else None
    if m:
        return m.start()
    return len(line) - len(line.lstrip())


# ----- roles ----------------------------------------------------------------------------------------
def _refine_roles(prog: Program, no_source: dict[tuple[str, str], isl.Set] | None) -> Program:
    """Roles of arguments from what the program does: ``input`` if never written, else ``inout`` if some
    read (or update) sees the value it had before the call (every read array when ``no_source`` is
    unknown), else ``output``."""
    written = {s.write.array for s in prog.statements}
    if no_source is None:
        live_in = {a.array for s in prog.statements for a in s.accesses if a.kind != "write"}
    else:
        live_in = {arr for (_, arr), s in no_source.items() if not s.intersect_params(prog.context).is_empty()}
    arrays = dict(prog.arrays)
    for name, arr in prog.arrays.items():
        if arr.role == "temp":
            continue
        role = "input" if name not in written else ("inout" if name in live_in else "output")
        if role != arr.role:
            arrays[name] = dataclasses.replace(arr, role=role)
    return dataclasses.replace(prog, arrays=arrays)


# ----- witnesses ------------------------------------------------------------------------------------
def _smallest_point(s: isl.Set, params: tuple[str, ...]) -> tuple[dict[str, int], list[int]]:
    """The lexicographically smallest point of ``s`` with its params as leading coordinates:
    ``({param: value}, [set coordinates])``."""
    flat = s.flatten() if s.is_wrapping() else s
    names = list(flat.get_var_names(isl.dim_type.param))
    order = [names.index(p) for p in params if p in names]
    n_par, n_set = len(names), flat.dim(isl.dim_type.set)
    lifted = flat.move_dims(isl.dim_type.set, 0, isl.dim_type.param, 0, n_par)
    try:
        point = lifted.lexmin().sample_point()
        if point.is_void():
            raise ValueError
    except (isl.Error, ValueError):  # unbounded below: any point will do
        point = lifted.sample_point()
    vals = [int(point.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(n_par + n_set)]
    sizes = {names[k]: vals[k] for k in order}
    return sizes, vals[n_par:]


def _assignments(values: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _instance(stmt: Statement, iterators: str) -> str:
    return f"{stmt.name}({iterators})" if iterators else f"{stmt.name}() (its single instance)"


def _on_array(umap: isl.UnionMap, array: str) -> isl.UnionMap:
    """The maps of an access relation ``umap`` that reach ``array``."""
    out = isl.UnionMap.empty(umap.get_space())
    for m in _maps(umap):
        if m.get_tuple_name(isl.dim_type.out) == array:
            out = out.union(isl.UnionMap.from_map(m))
    return out


def _maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out
