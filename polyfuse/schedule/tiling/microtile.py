"""Register micro-tiles for contractions on the C target (gemm, batched matmul, matmul chains, syrk-like nests).

A *contraction* is a band whose statement ``U`` is an update ``X[..] += value`` such that every band
member is one of ``U``'s loop iterators (no skew), some member ``k`` leaves the written element invariant
(the reduction), another member ``j`` walks it contiguously (the *lane*, vectorised), and a third member
``i`` moves it along another dimension (the *rows* of the register tile), with every read of ``value``
either invariant or contiguous along ``j``. For such a band this pass:

1. distributes the kernel so that ``U`` has a band of its own (:func:`distribute_contractions`): the
   initialisation of ``X`` (``X = 0`` or a bias) runs before it and elementwise epilogues after it,
   instead of sitting guarded inside the reduction loop. ``pf.schedule`` re-checks the whole tree for
   legality and keeps the undistributed tree when the check fails;
2. orders the band ``(others..., i, j, k)`` and tiles it for the caches (``tile_shapes.cache_tile_sizes``, from the
   machine's L1/L2 sizes in ``cost/machine.py``), with point loops that run over the original iterators
   (no shift), and puts a ``microtile`` mark on the point band.

The C printer (``codegen/c_micro.py``) turns the ``(i, j, k)`` point loops under the mark into an
``MR x NR`` register tile: ``MR`` rows times ``NR`` vectors of lanes (two, or three where that leaves
fewer lanes to the narrower remainder strips: ``tile_shapes.lane_vectors``) of accumulators held in registers
across the whole ``k`` loop, loaded once and stored once, with scalar code for the remainders. Each
element still sums its ``k`` terms in source order, so the result equals the reference interpreter's
up to the fused multiply-add, which the printer uses only when ``reassociate`` is on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import islpy as isl

from polyfuse.ir.expr import Binary, Cast, Const, Expr, Read, ScalarArg, Unary
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.bands import DepView, T, annotate, isl_options, statement_filters
from polyfuse.schedule.model import KERNEL_MARK
from polyfuse.schedule.tiling import tile_shapes as shapes
from polyfuse.schedule.tiling.accesses import Coefficients, access_coefficients, stride_along

MICROTILE_MARK = "microtile"

VECTOR_OPS = ("+", "-", "*")


@dataclass(frozen=True)
class Contraction:
    """Which member of a contraction band plays which part (positions in the band, isl's order)."""

    statement: str
    rows: int | None  # None: one row per launch, the rows being host loops around the kernel (doitgen)
    lane: int
    reduction: int
    others: tuple[int, ...]
    outer_reductions: tuple[int, ...] = ()  # the reduction members of ``others``, outermost first
    inner: tuple[int, ...] = ()  # outer reductions run inside the register tile (short: a conv window)

    @property
    def order(self) -> tuple[int, ...]:
        """The band's members reordered for the micro-tile: others, rows, lane, the reductions moved
        inside the register tile, the reduction. Each element still sums its terms in source order: the
        reductions keep their relative order."""
        rows = () if self.rows is None else (self.rows,)
        return (*[m for m in self.others if m not in self.inner], *rows, self.lane, *self.inner, self.reduction)


@dataclass(frozen=True)
class MicroTile:
    """The payload of a ``microtile`` mark: the update statement, and its loop iterators playing rows, lane
    and reduction (names of the statement's own iterators)."""

    statement: str
    rows: str | None  # None: a row-less tile (one row per launch: the rows are host loops)
    lane: str
    reduction: str
    k_tile: int = 0  # the reduction's cache tile: at most this many k per panel (0: unknown, no packing)
    mr: int = shapes.MR  # rows of the register tile (``register_rows()`` when the mark was made)
    nr: int = shapes.NR_VECTORS  # vectors of lanes per row of the register tile (:func:`lane_vectors`)
    inner: tuple[str, ...] = ()  # further reductions inside the register tile, outermost first
    # the constant initialisation folded into the tile (``init_fold.py``): a call whose reduction loop starts at
    # ``first`` (every element's first term) starts its accumulators from ``start`` instead of loading them
    start: float | None = None
    first: int | None = None

    def __str__(self) -> str:
        start = f", from {self.start} at {self.reduction} = {self.first}" if self.start is not None else ""
        return (f"microtile({self.statement}: rows {self.rows}, lane {self.lane}, reduction {self.reduction}, "
                f"{self.mr} x {self.nr} vectors{start})")


def microtile_marks(tree: isl.Schedule) -> list[tuple[str, MicroTile]]:
    """(kernel name, payload) of every ``microtile`` mark of ``tree``, in depth-first order."""
    out: list[tuple[str, MicroTile]] = []

    def walk(node: isl.ScheduleNode, kernel: str | None) -> None:
        if node.get_type() == T.mark:
            name = node.mark_get_id().get_name()
            if name == KERNEL_MARK:
                kernel = getattr(node.mark_get_id().user, "name", None)
            elif name == MICROTILE_MARK and kernel is not None:
                out.append((kernel, node.mark_get_id().user))
        for k in range(node.n_children()):
            walk(node.child(k), kernel)

    walk(tree.get_root(), None)
    return out


def find_contraction(prog: Program, node: isl.ScheduleNode, statement: str | None = None,
                     row_less: bool = False) -> Contraction | None:
    """The contraction of the band at ``node`` (see the module docstring), or ``None``.

    ``statement``: the update to look for; by default the band's single update statement. Members are
    numbered over the band and the chain of single-child bands below it (:func:`merge_chain`): isl puts
    a convolution's window loops in bands of their own. ``row_less``: also a band with no rows member
    whose rows are host loops around it, one row per launch (:func:`_row_less`: doitgen's
    ``sum[p] += A[r][q][s] * C4[s][p]`` below its ``r`` and ``q`` loops)."""
    if node.get_type() != T.band:
        return None
    names = _statements(node)
    updates = [s for s in names if contraction_statement(prog.statement(s))]
    if statement is not None:
        updates = [s for s in updates if s == statement]
    if len(updates) != 1:
        return None
    stmt = prog.statement(updates[0])
    first = node.band_n_member()
    chain = merge_chain(node) if len(names) == 1 else node
    if chain.band_n_member() < (2 if row_less else 3):
        return None
    dims = member_iterators(chain, stmt)
    if dims is None or len(set(dims)) != len(dims):
        return None
    host = [d for d in range(stmt.depth) if d not in dims and not _single_valued(stmt, d)]
    if host and not (row_less and all(d < min(dims) for d in host)):
        return None  # (an iterator with one value, a batch of 1 at concrete sizes, needs no member)
    write = access_coefficients(stmt.write.relation)
    if write is None or not _vectorisable(stmt, stmt.value):
        return None
    lanes = [m for m, d in enumerate(dims) if stride_along(write, d) == "one"]
    reductions = [m for m, d in enumerate(dims) if stride_along(write, d) == "zero"]
    if len(lanes) != 1 or not reductions:
        return None
    lane = lanes[0]
    reads = _read_coefficients(stmt)
    reduction = reductions[-1]
    for c in reads:  # a read strided along the lane (syrk's A[j][k]) is gathered into a packed panel, so it
        if stride_along(c, dims[lane]) == "other" and not gatherable(c, dims, lane, reduction, reductions):
            return None  # must not move with any other member than the lane and the reduction
    # rows and lane must be parallel members of the first band (zero distance for every dependence there)
    rows = [m for m, d in enumerate(dims) if m != lane and m not in reductions and m < first and chain.band_member_get_coincident(m)]
    if lane >= first or not chain.band_member_get_coincident(lane):
        return None
    if host or not rows:  # the rows are the host loops: one row per launch
        if not host or rows or not _row_less(reads, dims, lane, reduction) or len(reductions) != 1:
            return None
        return Contraction(stmt.name, None, lane, reduction, ())
    # rows: the member along which the fewest vector (lane-contiguous) operands move, so that the operands
    # loaded as vectors are shared by the rows of the tile and only broadcasts differ per row
    vector_reads = [c for c in reads if stride_along(c, dims[lane]) == "one"]
    row = min(rows, key=lambda m: (sum(1 for c in vector_reads if stride_along(c, dims[m]) != "zero"), -m))
    # (reduction: the innermost, so every element keeps its source order of terms)
    coincident = [m for m in range(len(dims)) if m not in (row, lane) and m not in reductions]
    outer = tuple(m for m in reductions if m != reduction)
    return Contraction(stmt.name, row, lane, reduction, tuple(coincident) + outer, outer)


def _row_less(reads: list[Coefficients], dims: Sequence[int], lane: int, reduction: int) -> bool:
    """Whether a contraction with no rows member has the shape of a vector-matrix product: each read
    contiguous along the lane (a row of the matrix, loaded as vectors) or invariant along it (the row's
    element of ``k``, broadcast), both kinds present."""
    along = [stride_along(c, dims[lane]) for c in reads]
    broadcast = any(a == "zero" and stride_along(c, dims[reduction]) != "zero" for a, c in zip(along, reads))
    return all(a in ("zero", "one") for a in along) and "one" in along and broadcast


def gatherable(c: Coefficients, dims: Sequence[int], lane: int, reduction: int, reductions: Sequence[int]) -> bool:
    """Whether a read strided along the lane can be gathered into a ``k x NR`` panel per lane strip: it
    moves with the lane and the innermost reduction only (not with the rows: the panel is shared by them;
    not with further reductions: they may run inside the tile, outside the panel's ``k``)."""
    return all(stride_along(c, dims[m]) == "zero" for m in range(len(dims)) if m not in (lane, reduction))


def merge_chain(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """The band at ``node`` merged with the chain of single-child bands below it (flags of the first band
    kept, the others' members marked not parallel). Only the member order matters to the micro-tile,
    which keeps the reduction members in their relative order; ``pf.schedule`` re-checks legality."""
    n_first = node.band_n_member()
    coincident = [node.band_member_get_coincident(k) for k in range(n_first)]
    while node.n_children() == 1 and node.child(0).get_type() == T.band:
        inner = node.child(0)
        merged = node.band_get_partial_schedule().flat_range_product(inner.band_get_partial_schedule())
        node = inner.delete().parent().delete().insert_partial_schedule(merged)
    for k in range(node.band_n_member()):
        node = node.band_member_set_coincident(k, coincident[k] if k < n_first else 0)
    return node


def contraction_statement(stmt: Statement) -> bool:
    """Whether ``stmt`` alone has a contraction's shape (see the module docstring), whatever its band:
    an update of depth 3 or more with a lane iterator, a reduction iterator and a row iterator, and a
    value the micro-kernel vectorises; or, with no row iterator, a vector-matrix product inside further
    loops that leave its element in place (doitgen's ``sum[p] += A[r][q][s] * C4[s][p]``: a row-less
    tile, :func:`_row_less`)."""
    if stmt.op != "+=" or not stmt.is_reduction or stmt.depth < 3 or not _vectorisable(stmt, stmt.value):
        return False
    write = access_coefficients(stmt.write.relation)
    if write is None:
        return False
    kinds = [stride_along(write, d) for d in range(stmt.depth)]
    if kinds.count("one") != 1 or "zero" not in kinds:
        return False
    lane = kinds.index("one")
    zeros = [d for d, kind in enumerate(kinds) if kind == "zero"]
    identity = list(range(stmt.depth))
    if "other" not in kinds:  # no row iterator: a vector-matrix product whose rows are loops around it
        return len(zeros) >= 2 and _row_less(_read_coefficients(stmt), identity, lane, zeros[-1])
    return all(stride_along(c, lane) != "other" or gatherable(c, identity, lane, zeros[-1], zeros)
               for c in _read_coefficients(stmt))


def distribute_contractions(prog: Program, base: isl.Schedule, view: DepView,
                            only: Callable[[Program, Statement], bool] | None = None,
                            several: Callable[[Program, Statement], bool] | None = None) -> isl.Schedule:
    """``base`` with each kernel band holding a contraction and other statements distributed into a
    sequence: statements before the update in source order, the update, statements after it. Unchanged
    where there is nothing to distribute. ``only``: the test a statement must pass instead (the CUDA
    kernel shapes: a micro-tile or a sum into a vector). A band holding several candidates is left alone
    unless each passes ``several``: then it is distributed around each (CUDA: gesummv's two row sums over
    one ``j`` loop get a warp per row each). The caller re-checks legality."""
    from polyfuse.schedule.mapping.kernels import split, statements_of  # (mapping imports this module)

    order = {s.name: k for k, s in enumerate(prog.statements)}
    changed = [False]

    def at_kernel(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() != T.band:
            return node
        stmts = statements_of(node)
        candidates = [s for s in stmts if (only(prog, prog.statement(s)) if only is not None else contraction_statement(prog.statement(s)))]
        if len(stmts) == 1 or not candidates:
            return node
        if len(candidates) > 1 and (several is None or not all(several(prog, prog.statement(s)) for s in candidates)):
            return node
        groups: list[list[str]] = [[]]
        for s in sorted(stmts, key=order.get):  # the statements between two candidates in a group of their own
            if s in candidates:
                groups += [[s], []]
            else:
                groups[-1].append(s)
        groups = [g for g in groups if g]
        changed[0] = True
        node = node.insert_sequence(statement_filters(prog, groups))
        for k, group in enumerate(groups):
            if not (len(group) == 1 and group[0] in candidates):  # the others start afresh: isl's fused band may be skewed around the update
                node = fresh_nest(prog, node.child(k).child(0).cut(), group).parent().parent()
        return node

    tree = split(base.get_root(), at_kernel).get_schedule()
    if not changed[0]:
        return base
    return annotate(tree.get_root(), view).get_schedule()


def fresh_nest(prog: Program, leaf: isl.ScheduleNode, group: Sequence[str]) -> isl.ScheduleNode:
    """At ``leaf``: a band over the iterators all statements of ``group`` share by position (rows, then
    the elementwise dimensions), then the statements in source order, each with a band over the rest of
    its own iterators. Returns the node at the leaf's position."""
    depth = min(prog.statement(s).depth for s in group)
    names = prog.context.get_space().get_var_names(isl.dim_type.param)
    prefix = f"[{', '.join(names)}] -> " if names else ""

    def member(names: Sequence[str], k: int) -> str:
        parts = []
        for s in names:
            its = prog.statement(s).iterators
            parts.append(f"{s}[{', '.join(its)}] -> [({its[k]})]")
        return f"{{ {'; '.join(parts)} }}"

    if depth == 0:
        return leaf
    text = ", ".join(member(group, k) for k in range(depth))
    band = leaf.insert_partial_schedule(isl.MultiUnionPwAff(f"{prefix}[{text}]"))
    if len(group) > 1 or prog.statement(group[0]).depth > depth:
        below = band.child(0)
        if len(group) > 1:
            below = below.insert_sequence(statement_filters(prog, [[s] for s in group]))
        for k, s in enumerate(group):
            rest = prog.statement(s).depth - depth
            if rest <= 0:
                continue
            spot = below.child(k).child(0) if len(group) > 1 else below
            text = ", ".join(member([s], depth + j) for j in range(rest))
            below = spot.insert_partial_schedule(isl.MultiUnionPwAff(f"{prefix}[{text}]"))
            below = below.parent().parent() if len(group) > 1 else below.parent()
        band = below.parent() if len(group) > 1 else below
    return band


def count_microtiles(sched) -> int:
    """How many ``microtile`` marks the schedule tree of ``sched`` (a ``Schedule``) holds."""
    found = [0]

    def visit(node: isl.ScheduleNode) -> bool:
        if node.get_type() == T.mark and node.mark_get_id().get_name() == MICROTILE_MARK:
            found[0] += 1
        return True

    sched.tree.get_root().foreach_descendant_top_down(visit)
    return found[0]


INNER_REDUCTION_EXTENT = 8
"""Further reductions of at most this many iterations move inside the register tile (a 3x3 window):
the accumulators then stay in registers across them instead of a round trip through memory each."""


def micro_tile(prog: Program, node: isl.ScheduleNode, found: Contraction, cache_bytes: int | None = None,
               rows_extent: int | None = None, extent: Callable[[isl.ScheduleNode, int], int] | None = None,
               row_tiles: int = 8, all_rows: int | None = None) -> tuple[isl.ScheduleNode, tuple[int, ...]]:
    """The band at ``node`` reordered for ``found``, tiled for the caches, with a ``microtile`` mark on its
    point band, and the tile sizes. Returns the tile band (its child is the mark). ``extent(band, k)``
    gives member ``k``'s iterations at the given sizes (0: unknown); with it, short further reductions
    run inside the register tile, and the register tile's vectors of lanes fit the lane loop
    (:func:`lane_vectors`)."""
    stmt = prog.statement(found.statement)
    node = merge_chain(node)
    dims = member_iterators(node, stmt)
    assert dims is not None
    itemsize = _itemsize(prog.arrays[stmt.write.array].dtype)
    lanes_move = found.rows is not None and _moves_with(stmt, dims[found.lane], dims[found.rows])
    lanes = extent(node, found.lane) if extent is not None and found.rows is not None and not lanes_move else 0
    gathered = any(stride_along(c, dims[found.lane]) == "other" for c in _read_coefficients(stmt))
    even = found.rows is not None and not lanes_move and not _moves_with(stmt, dims[found.reduction], dims[found.rows])
    wide = shapes.full_width_tile(lanes_move, gathered, even)
    kc = shapes.reduction_tile(itemsize, wide, cache_bytes)  # as cache_tile_sizes
    if extent is not None and found.outer_reductions and 0 < extent(node, found.reduction) <= kc and not gathered:
        inner = tuple(m for m in found.outer_reductions if 0 < extent(node, m) <= INNER_REDUCTION_EXTENT)
        found = dataclasses.replace(found, inner=inner if len(inner) == len(found.outer_reductions) else ())
    node = reorder(node, found.order)
    sizes = shapes.cache_tile_sizes(found, node.band_n_member(), itemsize, cache_bytes, rows_extent, row_tiles, even, all_rows, wide=wide)
    nr = _lane_vectors(found, sizes, lanes, itemsize, wide)
    mr = shapes.register_rows(nr) if found.rows is not None else 1
    if found.rows is not None and mr != shapes.register_rows():  # (Mc a whole number of this tile's row groups)
        sizes = shapes.cache_tile_sizes(found, node.band_n_member(), itemsize, cache_bytes, rows_extent, row_tiles, even, all_rows,
                                 mr, wide)
    if len(sizes) < node.band_n_member():  # the reductions stay a band of their own below, untiled
        node = node.band_split(len(sizes))
    ctx = node.get_ctx()
    vals = isl.ValList.alloc(ctx, len(sizes))
    for s in sizes:
        vals = vals.add(isl.Val.int_from_si(ctx, s))
    with isl_options(tile_scale_tile_loops=0, tile_shift_point_loops=0):
        node = node.band_tile(isl.MultiVal.from_val_list(node.band_get_space(), vals))
    names = stmt.iterators
    rows = names[dims[found.rows]] if found.rows is not None else None
    mark = MicroTile(stmt.name, rows, names[dims[found.lane]], names[dims[found.reduction]],
                     0 if found.inner else sizes[-1], mr, nr, tuple(names[dims[m]] for m in found.inner))
    return node.child(0).insert_mark(isl.Id(MICROTILE_MARK, user=mark)).parent(), sizes


def _lane_vectors(found: Contraction, sizes: Sequence[int], lanes: int, itemsize: int, wide: bool) -> int:
    """``NR`` for the lane tile of ``sizes`` (they follow ``found.order``) and ``lanes`` (0: unknown)."""
    if found.rows is None:
        return shapes.ROW_LESS_VECTORS
    lane_tile_size = sizes[len(found.order) - len(found.inner) - 2]
    return shapes.lane_vectors(min(lanes, lane_tile_size) if lanes else 0, itemsize, wide)


def _moves_with(stmt: Statement, lane: int, rows: int) -> bool:
    """Whether the bounds of iterator ``lane`` of ``stmt`` depend on iterator ``rows`` (syrk's ``j <= i``):
    then each row has its own lanes, and no one lane count describes them."""
    both = stmt.domain
    for d in reversed(range(stmt.depth)):
        if d not in (lane, rows):
            both = both.project_out(isl.dim_type.set, d, 1)
    first, second = both.project_out(isl.dim_type.set, 1, 1), both.project_out(isl.dim_type.set, 0, 1)
    return not first.flat_product(second).is_subset(both)


def reorder(node: isl.ScheduleNode, order: Sequence[int]) -> isl.ScheduleNode:
    """The band at ``node`` with its members in ``order`` (flags kept); legal for a permutable band."""
    if list(order) == list(range(node.band_n_member())):
        return node
    mupa = node.band_get_partial_schedule()
    coincident = [node.band_member_get_coincident(k) for k in order]
    members = isl.UnionPwAffList.alloc(node.get_ctx(), len(order))
    for k in order:
        members = members.add(mupa.get_union_pw_aff(k))
    out = node.delete().insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff_list(mupa.get_space(), members))
    out = out.band_set_permutable(1)
    for k, c in enumerate(coincident):
        out = out.band_member_set_coincident(k, c)
    return out


# ----- affine helpers shared with the printer ---------------------------------------------------------
def _read_coefficients(stmt: Statement) -> list[Coefficients]:
    out = []
    for k, acc in enumerate(stmt.accesses):
        if k == stmt.target:
            continue
        c = access_coefficients(acc.relation)
        if c is None:
            return [((tuple([1] * stmt.depth), {}, 0), (tuple([1] * stmt.depth), {}, 0))]  # marks "other"
        out.append(c)
    return out


def _vectorisable(stmt: Statement, e: Expr) -> bool:
    """Whether the value is built only of what the printer vectorises: reads, constants, scalar
    arguments, negation and ``+ - *`` of one float type."""
    if isinstance(e, (Const, ScalarArg)):
        return True
    if isinstance(e, Read):
        return stmt.accesses[e.access].array != stmt.write.array  # (the accumulator lives in registers)
    if isinstance(e, Unary):
        return e.op == "neg" and _vectorisable(stmt, e.operand)
    if isinstance(e, Binary):
        return e.op in VECTOR_OPS and _vectorisable(stmt, e.lhs) and _vectorisable(stmt, e.rhs)
    if isinstance(e, Cast):
        return e.dtype == e.operand.dtype and _vectorisable(stmt, e.operand)
    return False


def _statements(node: isl.ScheduleNode) -> list[str]:
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    return sorted(names)


def member_iterators(node: isl.ScheduleNode, stmt: Statement) -> list[int] | None:
    """For each band member, the iterator of ``stmt`` it equals (``None`` unless every member is exactly
    one distinct iterator of the statement: no skew, no offset, no constant member)."""
    walk = member_walk(node, stmt)
    return None if walk is None or None in walk else walk


def member_walk(node: isl.ScheduleNode, stmt: Statement) -> list[int | None] | None:
    """For each band member, the iterator of ``stmt`` it equals, or ``None`` where the member holds the
    statement at a constant (a boundary row fused into a band); ``None`` overall for anything else (a skew,
    an offset, a parametric value, two members on one iterator)."""
    mupa = node.band_get_partial_schedule()
    out: list[int | None] = []
    for m in range(node.band_n_member()):
        pieces: list[isl.PwAff] = []
        mupa.get_union_pw_aff(m).foreach_pw_aff(pieces.append)
        mine = [pa for pa in pieces if pa.get_domain_space().get_tuple_name(isl.dim_type.set) == stmt.name]
        affs: list[isl.Aff] = []
        if len(mine) == 1:
            mine[0].foreach_piece(lambda _s, a: affs.append(a))
        if len(affs) != 1 or affs[0].dim(isl.dim_type.div):
            return None
        aff = affs[0]
        if any(not aff.get_coefficient_val(isl.dim_type.param, p).is_zero() for p in range(aff.dim(isl.dim_type.param))):
            return None
        coeffs = [aff.get_coefficient_val(isl.dim_type.in_, k) for k in range(aff.dim(isl.dim_type.in_))]
        nonzero = [k for k, c in enumerate(coeffs) if not c.is_zero()]
        if not nonzero:
            out.append(None)
            continue
        if len(nonzero) != 1 or not coeffs[nonzero[0]].is_one() or not aff.get_constant_val().is_zero():
            return None
        out.append(nonzero[0])
    its = [k for k in out if k is not None]
    return out if len(set(its)) == len(its) else None


def _single_valued(stmt: Statement, k: int) -> bool:
    """Whether iterator ``k`` of ``stmt`` takes one value for every size (isl then gives it no loop)."""
    dom = stmt.domain
    lo, hi = dom.dim_min(k), dom.dim_max(k)
    return lo.is_cst() and hi.is_cst() and lo.plain_is_equal(hi)


def _itemsize(dtype) -> int:
    import numpy as np

    return int(np.dtype(dtype.numpy).itemsize)
