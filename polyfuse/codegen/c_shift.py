"""Shifted reads on C: a vectorised loop that reads one array at several neighbouring elements
(``A[i - 1] + A[i] + A[i + 1]``, a stencil along the contiguous dimension) loads each element once, into
a vector register, and builds the shifted neighbours from the registers it already holds.

Why: the plain vectorised loop loads one vector per read, each at its own offset, so a three-point
stencil issues three loads per vector where one would do, two of them across a cache-line boundary
whatever the array's alignment (an AVX-512 vector is a whole line). With one load per vector and
the neighbours taken by lane shuffles, and the stores aligned, PolyBench's jacobi-1d runs 1.27-1.33x as
fast as gcc -O3's build of the source (whose vectorised loop is the plain one) at the MEDIUM and LARGE
sizes, on 1 and 2 threads, on the 2-core Zen 4 this was measured on; before, polyfuse was at parity
there, above or below gcc from one run to the next as the arrays' placement moved the plain loop's time
by up to 40 %. gcc does not do this itself.

Which loops (:func:`shift_lines`): an innermost ``omp simd`` loop (proven free of dependences it
carries) of unit step, whose one statement assigns (``=``) a float element that moves contiguously
along the loop, and whose value is made of ``+ - * /``, negation, constants, scalars and reads of the
statement's own type, each read either invariant along the loop (broadcast) or contiguous; some array
is read at two or more offsets along its last dimension (at most :func:`max_offset` elements from the
reference read), and none of those arrays is written in the loop. The loop must also be long
(:data:`MIN_TRIP_BYTES`): the head below runs up to two vectors' worth of iterations the old way, which a
tile's short rows would feel (64-double rows of jacobi-2d's tiles ran at 0.72 of the plain loop's speed).

How: the loop is printed in three parts. A head, vectorised by the compiler as before, runs until the
stored element is aligned to the vector width and the vector before the first one is data the loop
reads anyway. The middle part steps one vector at a time: for each array read at several offsets it
keeps three registers (the previous, current and next vector at the reference read's position; only
those it needs), loads just the next one, and takes each read's vector as ``__builtin_shufflevector``
lanes of two neighbours; the statement's arithmetic is the same operations in the same order, so the
result is the same bits as the plain loop's. A tail, vectorised by the compiler, finishes. Where the
compiler has no ``__builtin_shufflevector`` (gcc before 12) or a vector is too narrow for the offsets,
the preprocessor leaves only the head and tail, which together are the plain loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from polyfuse.codegen.ast import block_children, loop_schedule, statement_call
from polyfuse.codegen.c_expressions import literal, strip_parens
from polyfuse.codegen.c_openmp import statement_moves
from polyfuse.codegen.c_stream import upper_bound
from polyfuse.ir.expr import Binary, Const, Expr, Read, ScalarArg, Unary
from polyfuse.schedule.tiling.accesses import access_coefficients

MIN_TRIP_BYTES = 1024
"""A loop is printed with shifted reads only where its longest run, at the given sizes, stores at
least this many bytes (64 doubles, 128 floats: eight AVX-512 vectors); unknown sizes count as long."""

def max_offset(itemsize: int) -> int:
    """The farthest neighbour, in elements either side of the reference read, that shifted reads cover: one
    less than the lanes of the widest vector (7 doubles, 15 floats). A narrower vector whose lanes do not
    reach it keeps the plain loop (the ``#if`` around the shifted part)."""
    return max(VECTOR_BYTES) // itemsize - 1

VECTOR_BYTES = (64, 32, 16)
"""The vector widths ``PF_VBYTES`` the generated C may be compiled for (``c_vector.VECTOR_HELPERS``)."""

_TYPES = {"f32": ("float", 4), "f64": ("double", 8)}
_OPS = {"+", "-", "*", "/"}


@dataclass(frozen=True)
class _Group:
    """The reads of one array at several offsets along its last dimension: ``reads[k]`` is the access
    number of a read ``offsets[k]`` elements from the reference read ``reference``."""

    array: str
    reference: int
    reads: tuple[int, ...]
    offsets: tuple[int, ...]

    @property
    def low(self) -> int:
        return min(self.offsets)

    @property
    def high(self) -> int:
        return max(self.offsets)


def shift_lines(printer: object, node: isl.AstNode, depth: int, indent: str) -> list[str] | None:
    """The innermost ``omp simd`` loop ``node`` printed with shifted reads (module docstring), or ``None``
    where it does not qualify. ``printer`` is the C printer (its ``_index``, ``_statement``, ``program``,
    ``sched`` and ``shifts``: the (type, offset) pairs whose lane macros :func:`shift_helpers` defines)."""
    body = node.for_get_body()
    nodes = list(block_children(body)) if body.get_type() == isl.ast_node_type.block else [body]
    if len(nodes) != 1 or nodes[0].get_type() != isl.ast_node_type.user:
        return None
    call = statement_call(nodes[0])
    stmt = call.statement
    program = printer.program  # type: ignore[attr-defined]
    dtype = program.arrays[stmt.write.array].dtype.name if stmt.write.array in program.arrays else None
    if stmt.op != "=" or dtype not in _TYPES or stmt.write.array in printer.local_scalars:  # type: ignore[attr-defined]
        return None
    inc = node.for_get_inc()
    schedule = loop_schedule(node)
    bound = upper_bound(printer, node)
    if schedule is None or bound is None or inc.get_type() != isl.ast_expr_type.int or inc.get_val().to_python() != 1:
        return None
    if _vector(stmt.value, dtype, lambda k: "") is None:
        return None  # (before any isl work: most loops fail here)
    moves = statement_moves(schedule, stmt)
    if any(m is None for m in moves) or not _contiguous(moves[stmt.target]):
        return None
    reads = [r.access for r in stmt.value.walk() if isinstance(r, Read)]
    if any(not _contiguous(moves[k]) and any(moves[k]) for k in reads):  # type: ignore[arg-type]
        return None  # a strided read: the plain loop's business
    groups = _groups(stmt, [k for k in dict.fromkeys(reads) if any(moves[k])], max_offset(_TYPES[dtype][1]))  # type: ignore[arg-type]
    if groups is None or not groups or any(g.array == stmt.write.array for g in groups):
        return None
    if not _long_enough(schedule, printer.sched.params, _TYPES[dtype][1]):  # type: ignore[attr-defined]
        return None
    grouped = {k: (g, o) for g in groups for k, o in zip(g.reads, g.offsets)}
    names = {g.array: f"pf_{g.array}" for g in groups}
    vl = f"PF_VL_{dtype}"

    def read_text(k: int) -> str:
        if k in grouped:
            g, o = grouped[k]
            v = names[g.array]
            return f"{v}_c" if o == 0 else f"PF_LANES_{dtype}_{_suffix(o)}({v}_p, {v}_c, {v}_n)"
        text = printer._index(call.accesses[k])  # type: ignore[attr-defined]
        return f"pf_vload_{dtype}(&{text})" if any(moves[k]) else f"pf_vset_{dtype}({text})"  # type: ignore[arg-type]

    value = _vector(stmt.value, dtype, read_text)
    if value is None:
        return None
    printer.shifts.update((dtype, o) for g in groups for o in g.offsets if o)  # type: ignore[attr-defined]
    it = printer._index(node.for_get_iterator())  # type: ignore[attr-defined]
    init = printer._index(node.for_get_init())  # type: ignore[attr-defined]
    op, ub = bound
    end = f"{it}_end"
    cursor = f"{it}_shift"
    statement = printer._statement(call)  # type: ignore[attr-defined]
    target = printer._index(call.write)  # type: ignore[attr-defined]
    ctype = _TYPES[dtype][0]
    # the vector before the first one must lie in what the loop reads; the vector after the last one too
    lead = _max_text([f"{vl} - {-g.low}" for g in groups if g.low < 0])
    tail = _max_text([f"{vl} - {g.high}" for g in groups if g.high > 0])
    widest = max(max(abs(g.low), g.high) for g in groups)
    pad, one, two, three, four = (indent * (depth + k) for k in range(5))
    refs = {g.array: printer._index(call.accesses[g.reference]) for g in groups}  # type: ignore[attr-defined]
    first = [f"{three}{{", f"{four}const int64_t {it} = {cursor};"]
    steady: list[str] = []
    rotate: list[str] = []
    for g in groups:  # (every load reads data the loop reads: never past the last step's elements)
        v, ref = names[g.array], refs[g.array]
        if g.low < 0:
            first.append(f"{four}{v}_p = pf_vload_{dtype}(&{ref} - {vl});")
        if g.high > 0:  # the current vector comes from the previous step's next one
            first.append(f"{four}{v}_c = pf_vload_{dtype}(&{ref});")
            steady.append(f"{four}{v}_n = pf_vload_{dtype}(&{ref} + {vl});")
        else:  # no next vector: the current one is loaded at its own step
            steady.append(f"{four}{v}_c = pf_vload_{dtype}(&{ref});")
        if g.low < 0:
            rotate.append(f"{four}{v}_p = {v}_c;")
        if g.high > 0:
            rotate.append(f"{four}{v}_c = {v}_n;")
    first.append(f"{three}}}")
    declared = ", ".join(f"{names[g.array]}_{part}" for g in groups for part in ("p", "c", "n")
                         if part == "c" or (part == "p" and g.low < 0) or (part == "n" and g.high > 0))
    arrays = ", ".join(sorted({g.array for g in groups}))
    return [
        f"{pad}{{  /* {arrays}: shifted reads kept in vector registers (codegen/c_shift.py) */",
        f"{one}const int64_t {end} = {ub}{' + 1' if op == '<=' else ''};",
        f"{one}int64_t {cursor} = {init};",
        f"{pad}#if defined(PF_SHIFTS) && {vl} > {widest}",
        f"{one}if ({cursor} < {end}) {{",
        f"{two}int64_t {it}_aligned;  /* past {lead} steps (the vector before the first is data the loop reads), */",
        f"{two}{{  /* then on to the first stored vector that is aligned (the address taken at the first step) */",
        f"{three}const int64_t {it} = {cursor};",
        f"{three}const uintptr_t {it}_at = ((uintptr_t)&{target} + (uintptr_t)({lead}) * sizeof({ctype})) % PF_VBYTES;",
        f"{three}{it}_aligned = {cursor} + {lead} + (int64_t)((PF_VBYTES - {it}_at) % PF_VBYTES) / (int64_t)sizeof({ctype});",
        f"{two}}}",
        f"{two}const int64_t {it}_head = polyfuse_min({it}_aligned, {end});",
        f"{two}#pragma omp simd",
        f"{two}for (int64_t {it} = {cursor}; {it} < {it}_head; {it} += 1) {{",
        f"{three}{statement}",
        f"{two}}}",
        f"{two}{cursor} = {it}_head;",
        f"{two}if ({cursor} + {vl} - 1 + {tail} < {end}) {{",
        f"{three}pf_v{dtype} {declared};",
        *first,
        f"{three}for (; {cursor} + {vl} - 1 + {tail} < {end}; {cursor} += {vl}) {{",
        f"{four}const int64_t {it} = {cursor};",
        *steady,
        f"{four}pf_vstore_{dtype}(&{target}, {strip_parens(value)});  /* {stmt.name} */",
        *rotate,
        f"{three}}}",
        f"{two}}}",
        f"{one}}}",
        f"{pad}#endif",
        f"{one}#pragma omp simd",
        f"{one}for (int64_t {it} = {cursor}; {it} < {end}; {it} += 1) {{",
        f"{two}{statement}",
        f"{one}}}",
        f"{pad}}}",
    ]


def shift_helpers(shifts: set[tuple[str, int]]) -> str:
    """The C macros the shifted loops use: ``PF_SHIFTS`` where the compiler has
    ``__builtin_shufflevector``, and ``PF_LANES_<type>_<offset>(p, c, n)``, the vector of the elements
    ``offset`` lanes from the current vector ``c`` (its previous neighbour ``p``, next ``n``), for every
    vector width that holds more lanes than the offset."""
    if not shifts:
        return ""
    lines = ["/* shifted reads (codegen/c_shift.py): neighbours taken from the vectors already loaded */",
             "#if defined(__has_builtin)", "#if __has_builtin(__builtin_shufflevector)", "#define PF_SHIFTS 1", "#endif",
             "#endif", "#if defined(PF_SHIFTS)"]
    for k, width in enumerate(VECTOR_BYTES):
        lines.append(("#if" if k == 0 else "#elif") + f" PF_VBYTES == {width}")
        for dtype, offset in sorted(shifts):
            lanes = width // _TYPES[dtype][1]
            if abs(offset) >= lanes:
                continue
            a, b, start = ("p", "c", lanes + offset) if offset < 0 else ("c", "n", offset)
            picks = ", ".join(str(start + j) for j in range(lanes))
            lines.append(f"#define PF_LANES_{dtype}_{_suffix(offset)}(p, c, n) __builtin_shufflevector({a}, {b}, {picks})")
    lines += ["#endif", "#endif", ""]
    return "\n".join(lines)


def _suffix(offset: int) -> str:
    return f"m{-offset}" if offset < 0 else f"p{offset}"


def _max_text(terms: Sequence[str]) -> str:
    """The largest of ``terms`` (C expressions) as C; ``0`` for none."""
    if not terms:
        return "0"
    text = f"({terms[0]})"
    for t in terms[1:]:
        text = f"polyfuse_max({text}, ({t}))"
    return text


def _contiguous(moves: Sequence[int] | None) -> bool:
    return moves is not None and len(moves) > 0 and moves[-1] == 1 and not any(moves[:-1])


def _groups(stmt, reads: Sequence[int], farthest: int) -> list[_Group] | None:
    """The contiguous reads ``reads`` of ``stmt`` grouped by array and position up to a constant offset
    along the last dimension; only groups of two or more offsets, and ``None`` where an access is not one
    affine piece or an offset lies more than ``farthest`` elements from its group's reference."""
    by_shape: dict[tuple, list[tuple[int, int]]] = {}
    for k in reads:
        coeffs = access_coefficients(stmt.accesses[k].relation)
        if coeffs is None:
            return None
        shape = (stmt.accesses[k].array, tuple((its, tuple(sorted(ps.items()))) for its, ps, _ in coeffs),
                 tuple(c for _, _, c in coeffs[:-1]))
        by_shape.setdefault(shape, []).append((k, coeffs[-1][2]))
    write = access_coefficients(stmt.accesses[stmt.target].relation)
    anchor = write[-1][2] if write else 0
    out = []
    for (array, _, _), members in by_shape.items():
        if len({c for _, c in members}) < 2:
            continue
        consts = [c for _, c in members]  # the reference: the read nearest the middle, then the store
        reference = min(consts, key=lambda r: (max(abs(c - r) for c in consts), abs(r - anchor), r))
        offsets = tuple(c - reference for _, c in members)
        if max(abs(o) for o in offsets) > farthest:
            return None
        ref_access = next(k for k, c in members if c == reference)
        out.append(_Group(array, ref_access, tuple(k for k, _ in members), offsets))
    return out


def _vector(e: Expr, dtype: str, read: object) -> str | None:
    """``e`` as GCC vector-extension C in which each read is ``read(access number)``; ``None`` where it
    holds anything but ``+ - * /``, negation, constants, scalars and reads, all of type ``dtype``."""
    if getattr(e.dtype, "name", None) != dtype:
        return None
    if isinstance(e, Read):
        return read(e.access)  # type: ignore[operator]
    if isinstance(e, Const):
        return f"pf_vset_{dtype}({literal(e.value, e.dtype)})"
    if isinstance(e, ScalarArg):
        return f"pf_vset_{dtype}({e.name})"
    if isinstance(e, Unary) and e.op == "neg":
        operand = _vector(e.operand, dtype, read)
        return None if operand is None else f"(-{operand})"
    if isinstance(e, Binary) and e.op in _OPS:
        lhs, rhs = _vector(e.lhs, dtype, read), _vector(e.rhs, dtype, read)
        return None if lhs is None or rhs is None else f"({lhs} {e.op} {rhs})"
    return None


def _long_enough(schedule: isl.UnionMap, params: Mapping[str, int], itemsize: int) -> bool:
    """Whether the loop (the last dimension of ``schedule``) runs at least :data:`MIN_TRIP_BYTES` of
    stores in its longest run, with the loops around it fixed, at the sizes ``params`` (an unbounded
    run, e.g. at unknown sizes, counts as long)."""
    maps: list[isl.Map] = []
    schedule.foreach_map(lambda m: maps.append(m.flatten_range()))
    if not maps:
        return False
    points = maps[0].range()
    for m in maps[1:]:
        if not m.range().get_space().is_equal(points.get_space()):
            return True  # (cannot tell: the printer's own loop stays the fallback either way)
        points = points.union(m.range())
    for name, value in params.items():
        pos = points.find_dim_by_name(isl.dim_type.param, name)
        if pos >= 0:
            points = points.fix_val(isl.dim_type.param, pos, isl.Val.int_from_si(points.get_ctx(), int(value)))
    n = points.dim(isl.dim_type.set)
    pairs = isl.Map.from_domain_and_range(points, points)
    for k in range(n - 1):
        pairs = pairs.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    deltas = pairs.deltas()
    last = isl.Aff.var_on_domain(isl.LocalSpace.from_space(deltas.get_space()), isl.dim_type.set, n - 1)
    longest = deltas.max_val(last)
    if longest.is_infty():
        return True
    if longest.is_nan() or not longest.is_int():
        return False
    return (int(longest.to_python()) + 1) * itemsize >= MIN_TRIP_BYTES
