"""The C printer's OpenMP decisions, apart from its printing: which loop a ``parallel`` mark designates and
whether the next one may take over or be collapsed (:func:`annotate_parallel_marks`), whether a host loop
holds parallel kernels (:func:`holds_parallel_mark`), the ``omp simd`` clauses of a reduction loop
(:func:`simd_clauses`), whether a plain innermost loop may be vectorised as proven (:func:`simd_safe`), and
the check of every OpenMP loop it prints against the dependences (:func:`check_openmp_loop`). Used by ``codegen/c.py``; see ``docs/architecture.md``, "Parallel loops on C"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.codegen.ast import block_children
from polyfuse.errors import CodegenError, IllegalTransformError
from polyfuse.ir.expr import Binary, Compare, Expr, IndexValue, Read, Where
from polyfuse.ir.program import Array, Program, Statement
from polyfuse.schedule.bands import maps_union
from polyfuse.schedule.model import PARALLEL_MARK
from polyfuse.schedule.tiling.accesses import access_coefficients


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
    return holds_mark(node, frozenset({PARALLEL_MARK}))


def holds_mark(node: isl.AstNode, names: frozenset[str]) -> bool:
    """Whether a mark named in ``names`` lies at or below ``node`` in the AST."""
    t = node.get_type()
    if t == isl.ast_node_type.mark:
        return node.mark_get_id().get_name() in names or holds_mark(node.mark_get_node(), names)
    if t == isl.ast_node_type.for_:
        return holds_mark(node.for_get_body(), names)
    if t == isl.ast_node_type.block:
        return any(holds_mark(c, names) for c in block_children(node))
    if t == isl.ast_node_type.if_:
        return holds_mark(node.if_get_then_node(), names) or (
            node.if_has_else_node() and holds_mark(node.if_get_else_node(), names))
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


def user_nodes(node: isl.AstNode) -> list[isl.AstNode]:
    """The user (statement) nodes below ``node``, in order."""
    kind = node.get_type()
    if kind == isl.ast_node_type.user:
        return [node]
    if kind == isl.ast_node_type.block:
        return [u for c in block_children(node) for u in user_nodes(c)]
    if kind == isl.ast_node_type.if_:
        out = user_nodes(node.if_get_then_node())
        return out + (user_nodes(node.if_get_else_node()) if node.if_has_else_node() else [])
    if kind == isl.ast_node_type.mark:
        return user_nodes(node.mark_get_node())
    if kind == isl.ast_node_type.for_:
        return user_nodes(node.for_get_body())
    return []


def element_reduction(stmt: Statement, arrays: Mapping[str, Array]) -> str | None:
    """How ``stmt`` folds values into one array element, when it does: ``"+"`` where it adds into a float
    element (``w[i] += e``, ``w[i] -= e`` or ``w[i] = w[i] + e``), ``"max"`` or ``"min"`` where it keeps the
    larger or smaller of the element and a value (``w = w >= e ? w : e``, nussinov's ``max_score``, or
    ``max(w, e)``); ``e`` reading no element of ``w`` that the statement writes (trisolv's
    ``x[i] -= L[i][j] * x[j]`` with ``j < i``; nussinov's ``table[i][k] + table[k+1][j]`` with
    ``i < k < j``). Run alone by an innermost loop along which that element does not move, the printer keeps
    it in a scalar accumulator instead of reading and writing memory every iteration: a sum under
    ``#pragma omp simd reduction(+:...)`` (a reassociation: only with ``reassociate=True``; atax, gemver,
    mvt), a maximum or minimum in the source order (the same result; the chain through memory cost nussinov
    a store-to-load forwarding per iteration, and a speed that depended on where the loop landed in the
    library: 8.9 or 12.1 ms at MEDIUM on one thread). ``None`` otherwise."""
    target = stmt.write.array
    if not arrays[target].shape:
        return None
    op = "+"
    if stmt.op in ("+=", "-="):
        rest = [stmt.value]
    elif stmt.op == "=" and isinstance(stmt.value, Binary) and stmt.value.op in ("+", "max", "min"):
        sides = [stmt.value.lhs, stmt.value.rhs]
        own = [k for k, side in enumerate(sides) if _reads_written(stmt, side)]
        if len(own) != 1:
            return None
        op, rest = stmt.value.op, [sides[1 - own[0]]]
    elif stmt.op == "=" and isinstance(stmt.value, Where):
        picked = _select_extreme(stmt, stmt.value)
        if picked is None:
            return None
        op, rest = picked
    else:
        return None
    if op == "+" and not arrays[target].dtype.is_float:
        return None
    if any(isinstance(node, Read) and stmt.accesses[node.access].array == target
           and not stmt.accesses[node.access].relation.intersect(stmt.write.relation).is_empty()
           for e in rest for node in e.walk()):
        return None
    return op


def _reads_written(stmt: Statement, e: Expr) -> bool:
    """Whether ``e`` is a read of exactly the element ``stmt`` writes."""
    return (isinstance(e, Read) and stmt.accesses[e.access].array == stmt.write.array
            and stmt.accesses[e.access].relation.is_equal(stmt.write.relation))


def _select_extreme(stmt: Statement, value: Where) -> tuple[str, list[Expr]] | None:
    """``("max" | "min", [e])`` where ``value`` is ``a OP b ? x : y`` choosing between the written element
    and one other value ``e`` (``a``/``b`` the two, ``x``/``y`` the same two in either order), else None."""
    cond = value.cond
    if not isinstance(cond, Compare) or cond.op not in (">=", ">", "<=", "<"):
        return None
    a, b, x, y = cond.lhs, cond.rhs, value.if_true, value.if_false
    if _same_value(stmt, a, x) and _same_value(stmt, b, y):
        larger = cond.op in (">=", ">")
    elif _same_value(stmt, a, y) and _same_value(stmt, b, x):
        larger = cond.op in ("<=", "<")
    else:
        return None
    if _reads_written(stmt, a) and not _reads_written(stmt, b):
        other = b
    elif _reads_written(stmt, b) and not _reads_written(stmt, a):
        other = a
    else:
        return None
    return ("max" if larger else "min"), [other]


def _same_value(stmt: Statement, e: Expr, f: Expr) -> bool:
    """Whether ``e`` and ``f`` compute the same value: the same tree, reads of the same element (each read
    has an access of its own, so they are compared by array and relation)."""
    if isinstance(e, Read) or isinstance(f, Read):
        if not (isinstance(e, Read) and isinstance(f, Read)):
            return False
        ea, fa = stmt.accesses[e.access], stmt.accesses[f.access]
        return ea.array == fa.array and ea.relation.is_equal(fa.relation)
    if type(e) is not type(f):
        return False
    ce, cf = e.children(), f.children()
    if len(ce) != len(cf):
        return False
    if not ce:
        if isinstance(e, IndexValue):
            return e.dtype == f.dtype and e.value.is_equal(f.value)
        return e == f
    same_fields = all(getattr(e, n) == getattr(f, n) for n in e.__dataclass_fields__
                      if not isinstance(getattr(e, n), Expr))
    return same_fields and all(_same_value(stmt, x, y) for x, y in zip(ce, cf))


def simd_safe(schedule: isl.UnionMap, deps: isl.UnionMap, stmts: Sequence[Statement]) -> bool:
    """Whether an innermost loop may be printed ``#pragma omp simd`` (no clause): the loop (the last
    dimension of ``schedule``, which maps the instances it runs to the loops around it and itself) carries
    none of ``deps`` (no two instances of different iterations, every loop around equal, depend on each
    other), and every access of ``stmts`` walks memory contiguously along it or not at all.

    The pragma tells the compiler what polyfuse proved: gcc gives up on loops it cannot analyse itself
    (gemver's fused ``A[i][j]`` update and ``x[j]`` sum over 16-column tiles: "complicated access pattern",
    scalar code 2.7x slower). A strided walk is left to the compiler's cost model, which the pragma would
    override with gathers and scatters."""
    flat, n = _flat_range(schedule)
    if flat is None or n == 0:
        return False
    domain = flat.domain()
    full = isl.MultiUnionPwAff.from_union_map(flat)
    active = deps.intersect_domain(domain).intersect_range(domain).eq_at_multi_union_pw_aff(full.drop_dims(isl.dim_type.set, n - 1, 1))
    if not active.is_subset(active.eq_at_multi_union_pw_aff(full)):  # (as ``bands.carries`` asks of a band member)
        return False
    per_statement: dict[str, isl.Map] = {}
    flat.foreach_map(lambda m: per_statement.__setitem__(m.get_tuple_name(isl.dim_type.in_), m))
    for st in stmts:
        m = per_statement.get(st.name)
        if m is None:
            return False
        move = _one_step(m, n)
        if move is None:
            return False
        for acc in st.accesses:
            coeffs = access_coefficients(acc.relation)
            if coeffs is None:
                return False
            moves = [sum(c * d for c, d in zip(dim[0], move)) for dim in coeffs]
            if any(moves[:-1]) or (moves and moves[-1] not in (0, 1)):
                return False
    return True


def access_moves(schedule: isl.UnionMap, stmt: Statement, access: int) -> list[int] | None:
    """How far the element that access number ``access`` of ``stmt`` touches moves, per array dimension,
    when the innermost loop of ``schedule`` (see :func:`simd_safe`) advances by one: ``[0, ..., 0, 1]``
    is a contiguous walk. ``None`` where the move is not a constant."""
    return statement_moves(schedule, stmt)[access]


def statement_moves(schedule: isl.UnionMap, stmt: Statement) -> list[list[int] | None]:
    """:func:`access_moves` of every access of ``stmt``, in order, the loop's step computed once."""
    flat, n = _flat_range(schedule)
    move = None
    if flat is not None and n > 0:
        maps: list[isl.Map] = []
        flat.foreach_map(lambda m: maps.append(m) if m.get_tuple_name(isl.dim_type.in_) == stmt.name else None)
        move = _one_step(maps[0], n) if len(maps) == 1 else None
    out: list[list[int] | None] = []
    for acc in stmt.accesses:
        coeffs = access_coefficients(acc.relation) if move is not None else None
        out.append(None if move is None or coeffs is None else [sum(c * d for c, d in zip(dim[0], move)) for dim in coeffs])
    return out


def _flat_range(schedule: isl.UnionMap) -> tuple[isl.UnionMap | None, int]:
    """``schedule`` with its nested range tuples flattened (isl's AST build nests one per band), and the
    number of its dimensions (``None, 0`` where the statements disagree on it)."""
    maps: list[isl.Map] = []
    schedule.foreach_map(lambda m: maps.append(m.flatten_range()))
    dims = {m.dim(isl.dim_type.out) for m in maps}
    if len(dims) != 1:
        return None, 0
    return maps_union(maps), dims.pop()


def _one_step(m: isl.Map, n: int) -> list[int] | None:
    """How one statement's iterators move when the loop (the last of ``m``'s ``n`` schedule dimensions)
    advances by one with the loops around fixed: a constant vector, or ``None`` where it is not one."""
    space = m.get_space().range()
    step = isl.Map.universe(space.map_from_set())
    for k in range(n - 1):
        step = step.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    c = isl.Constraint.equality_alloc(isl.LocalSpace.from_space(step.get_space()))
    c = c.set_coefficient_val(isl.dim_type.in_, n - 1, 1).set_coefficient_val(isl.dim_type.out, n - 1, -1).set_constant_val(1)
    step = step.add_constraint(c)
    deltas = m.apply_range(step).apply_range(m.reverse()).deltas()
    if deltas.is_empty():
        return [0] * m.dim(isl.dim_type.in_)
    if not deltas.is_singleton():
        return None
    point = deltas.sample_point()
    values = [point.get_coordinate_val(isl.dim_type.set, k) for k in range(m.dim(isl.dim_type.in_))]
    if not all(v.is_int() for v in values):
        return None
    return [int(v.to_python()) for v in values]


def check_openmp_loop(program: Program, schedule: isl.UnionMap | None, threads: int, private: Sequence[str]) -> None:
    """Raise :class:`CodegenError` if an OpenMP loop the printer is about to emit would race: two instances
    it runs in one iteration of the loops around it but in different iterations of its own ``threads``
    last loops (1, or 2 under ``collapse(2)``) depend on each other (:func:`check_parallel`; the scalars
    ``private`` to each iteration keep only their flow dependences).

    ``schedule`` is the loop's :func:`polyfuse.codegen.ast.loop_schedule` (the innermost of the collapsed
    loops'). The scheduler proved its parallel bands legal, but the printer decides which printed loop
    carries the pragma (isl elides one-iteration loops, ``collapse`` joins two): this checks that decision
    on what is printed, so a printer bug is a compile error, never a data race (session 10's ``collapse``
    over a reduction loop)."""
    from polyfuse.analysis.legality import check_parallel  # noqa: PLC0415 (it imports the scheduler, which imports codegen)

    if schedule is None:
        return
    flat, n = _flat_range(schedule)
    if flat is None or n < threads:
        raise CodegenError(f"internal error: cannot check the OpenMP loop of {program.name}: its statements disagree on the loops around it")
    maps: list[isl.Map] = []
    flat.foreach_map(maps.append)
    outer = maps_union([m.project_out(isl.dim_type.out, n - threads, threads) for m in maps])
    thread = maps_union([m.project_out(isl.dim_type.out, 0, n - threads) for m in maps])
    privatized = {name: flat for name in private if name in program.arrays}
    try:
        check_parallel(program, flat.domain(), outer, thread, privatized)
    except IllegalTransformError as e:
        raise CodegenError(f"internal error: the C printer would emit an OpenMP loop that races ({e}); please report it") from None
