"""Initialisations moved into their contraction's tiles (C): ``X = 0`` runs where ``X += a * b`` reads it.

Loop distribution (:func:`microtile.distribute_contractions`) gives a contraction's update a band of its
own, and its initialisation ``I`` (``X[i, j] = c``, or any value that reads neither ``X`` nor what the
update writes) lands in a kernel before it: a pass over the whole output that writes ``X`` to memory, which
the register micro-kernel then reads back. Where ``X`` is larger than the caches that is a round trip to
memory for nothing (attention's 8 MB of scores: 0.5-0.7 ms of 4.3 ms on two threads).

:func:`fold_initialisations` moves ``I`` into the contraction's kernel, between the tile loops and the
micro-kernel::

    for each tile (rows, lanes, reduction tile):
        X[tile] = c          <- only in the tile where the element's first reduction step runs
        micro-kernel: load X[tile], add the tile's products, store X[tile]

so the elements are written just before the micro-kernel loads them, from L1 or L2. Each tile-loop member
takes, for ``I``'s instance writing element ``e``, the least value it takes over the update's instances
writing ``e`` (computed by isl: the lexicographic minimum of each member over the relation "writes the same
element"). Every member is then at most the update's value for every term of ``e``, and within a tile the
initialisation comes first, so ``I`` still precedes every update of its element.

The move is made only where it is exact: ``I`` writes each element once (its write relation is injective),
every element it writes is updated (otherwise an instance would have no tile), and it reads neither the
updated array nor any array the update writes. Everything else that orders statements is the legality
checker's: the caller checks the whole tree (``check_schedule``) and the kernel's parallel loop
(``check_parallel``) and keeps the tree without the move where either fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import islpy as isl

from polyfuse.cost.footprint import fixed_params
from polyfuse.ir.expr import Const
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.bands import T, member_map, prefix_through
from polyfuse.schedule.mapping.kernels import KernelInfo
from polyfuse.schedule.model import KERNEL_MARK
from polyfuse.schedule.tiling.accesses import access_coefficients
from polyfuse.schedule.tiling.microtile import MICROTILE_MARK, MicroTile, microtile_marks

FOLDED_INIT_MARK = "folded_init"
"""Marks an initialisation whose micro-kernel starts from its value: the C printer prints nothing for it
where every micro-kernel of that update prints (``codegen/c.py``)."""


@dataclasses.dataclass(frozen=True)
class Fold:
    """One move: initialisation ``init`` into the kernel ``into`` (the kernel of the update ``update``),
    out of the kernel ``source``."""

    init: str
    update: str
    source: str
    into: str


def fold_initialisations(prog: Program, tree: isl.Schedule, kernels: Sequence[KernelInfo],
                         params: Mapping[str, int] | None = None) -> tuple[isl.Schedule, tuple[KernelInfo, ...], list[Fold]]:
    """``tree`` with each micro-tiled contraction's initialisation moved into the contraction's tiles (see
    the module docstring), its kernels renumbered where a kernel is left empty, and the moves made; the
    tree and kernels unchanged when nothing moves. The caller checks legality."""
    known = fixed_params(prog, params or {})
    by_name = {k.kernel.name: k for k in kernels}
    folds: list[Fold] = []
    moved: set[str] = set()
    for kernel_name, tile in microtile_marks(tree):
        update = tile.statement
        stmt = prog.statement(update)
        for init in _initialisations(prog, stmt, known):
            source = next((k for k in kernels if init.name in k.kernel.statements), None)
            if source is None or source.kernel.name == kernel_name or init.name in moved:
                continue
            if any(source.kernel.name == f.into or kernel_name == f.source for f in folds):
                continue  # (a kernel both gives and receives: its tile band would hold the leaving statement)
            if not _siblings_in_order(tree, source.kernel.name, kernel_name):
                continue
            folds.append(Fold(init.name, update, source.kernel.name, kernel_name))
            moved.add(init.name)
            break
    if not folds:
        return tree, tuple(kernels), []
    try:
        new_tree, new_kernels = _apply(prog, tree, by_name, kernels, folds)
    except _CannotRebuild:
        return tree, tuple(kernels), []
    return new_tree, new_kernels, folds


# ----- which initialisation ---------------------------------------------------------------------------------
def _initialisations(prog: Program, update: Statement, known: isl.Set) -> list[Statement]:
    """The statements that initialise ``update``'s elements, as the module docstring requires."""
    array = update.write.array
    written_by_update = {a.array for a in update.accesses if a.kind != "read"}
    u_write = update.write.relation.intersect_domain(update.domain).intersect_params(known)
    out = []
    for s in prog.statements:
        if s.name == update.name or s.op != "=" or s.write.array != array or s.is_reduction:
            continue
        if any(r.array == array or r.array in written_by_update for r in s.reads):
            continue
        i_write = s.write.relation.intersect_domain(s.domain).intersect_params(known)
        if i_write.is_empty() or not i_write.is_injective():
            continue
        if not i_write.range().is_subset(u_write.range()):
            continue  # an element nobody updates would have no tile to run in
        out.append(s)
    return out


def _same_element(prog: Program, init: str, update: str, known: isl.Set) -> isl.UnionMap:
    """``{ I[x] -> U[y] : I[x] and U[y] write the same element }`` at the known sizes."""
    i, u = prog.statement(init), prog.statement(update)
    i_write = isl.UnionMap.from_map(i.write.relation.intersect_domain(i.domain).intersect_params(known))
    u_write = isl.UnionMap.from_map(u.write.relation.intersect_domain(u.domain).intersect_params(known))
    return i_write.apply_range(u_write.reverse())


# ----- where things are in the tree ---------------------------------------------------------------------------
def _kernel_marks(tree: isl.Schedule) -> dict[str, isl.ScheduleNode]:
    found: dict[str, isl.ScheduleNode] = {}

    def walk(node: isl.ScheduleNode) -> None:
        if node.get_type() == T.mark and node.mark_get_id().get_name() == KERNEL_MARK:
            found[node.mark_get_id().user.name] = node
            return
        for k in range(node.n_children()):
            walk(node.child(k))

    walk(tree.get_root())
    return found


def _siblings_in_order(tree: isl.Schedule, first: str, second: str) -> bool:
    """Whether the kernels ``first`` and ``second`` are children of one sequence, ``first`` before."""
    marks = _kernel_marks(tree)
    a, b = marks.get(first), marks.get(second)
    if a is None or b is None:
        return False
    fa, fb = a.parent(), b.parent()
    if fa.get_type() != T.filter or fb.get_type() != T.filter:
        return False
    pa, pb = fa.parent(), fb.parent()
    return (pa.get_type() == T.sequence and pa.is_equal(pb)
            and fa.get_child_position() < fb.get_child_position())


# ----- the rebuilt tree -------------------------------------------------------------------------------------
class _CannotRebuild(Exception):
    """The tree holds a node the rebuild does not copy (an extension, a guard, ...)."""


Edit = Callable[[isl.ScheduleNode, isl.UnionSet], "isl.Schedule | None"]


def rebuild(node: isl.ScheduleNode, keep: isl.UnionSet, edit: Edit) -> isl.Schedule | None:
    """The subtree at ``node`` rebuilt as a schedule of its own over the instances of ``keep`` that reach
    it (``None`` when none do): bands with their flags, marks with their payloads, sequences and sets
    without the children left empty. ``edit(node, keep)`` may return a replacement for a subtree."""
    kind = node.get_type()
    domain = (node.domain_get_domain() if kind == T.domain else node.get_domain()).intersect(keep)
    if domain.is_empty():
        return None
    replaced = edit(node, keep)
    if replaced is not None:
        return replaced
    if kind == T.leaf:
        return isl.Schedule.from_domain(domain)
    if kind in (T.domain, T.filter):
        return rebuild(node.child(0), keep, edit)
    if kind == T.band:
        inner = rebuild(node.child(0), keep, edit)
        return None if inner is None else copy_band(node, inner)
    if kind == T.mark:
        inner = rebuild(node.child(0), keep, edit)
        return None if inner is None else inner.get_root().child(0).insert_mark(node.mark_get_id()).get_schedule()
    if kind in (T.sequence, T.set):
        parts = [p for p in (rebuild(node.child(k), keep, edit) for k in range(node.n_children())) if p is not None]
        out = parts[0] if parts else None
        for p in parts[1:]:
            out = out.sequence(p) if kind == T.sequence else out.set(p)
        return out
    raise _CannotRebuild(str(kind))


def copy_band(band: isl.ScheduleNode, inner: isl.Schedule, schedule: isl.MultiUnionPwAff | None = None) -> isl.Schedule:
    """``inner`` below a band with ``band``'s members (or ``schedule``) and flags."""
    mupa = band.band_get_partial_schedule() if schedule is None else schedule
    node = inner.insert_partial_schedule(mupa).get_root().child(0)
    node = node.band_set_permutable(band.band_get_permutable())
    for k in range(band.band_n_member()):
        node = node.band_member_set_coincident(k, band.band_member_get_coincident(k))
        node = node.band_member_set_ast_loop_type(k, band.band_member_get_ast_loop_type(k))
    node = node.band_set_ast_build_options(band.band_get_ast_build_options())
    return node.get_schedule()


def _apply(prog: Program, tree: isl.Schedule, by_name: dict[str, KernelInfo], kernels: Sequence[KernelInfo],
           folds: list[Fold]) -> tuple[isl.Schedule, tuple[KernelInfo, ...]]:
    moved = isl.UnionSet.empty(prog.context.get_space())
    for f in folds:
        moved = moved.union(isl.UnionSet.from_set(prog.statement(f.init).domain))
    into = {f.into: f for f in folds}
    statements = {k.kernel.name: list(k.kernel.statements) for k in kernels}
    for f in folds:
        statements[f.source].remove(f.init)
        statements[f.into].append(f.init)
    survivors = [k.kernel.name for k in kernels if statements[k.kernel.name]]
    new_kernel = {old: dataclasses.replace(by_name[old].kernel, name=f"kernel{n}",
                                           statements=tuple(sorted(statements[old], key=_statement_order)))
                  for n, old in enumerate(survivors)}

    def edit(node: isl.ScheduleNode, keep: isl.UnionSet) -> isl.Schedule | None:
        if node.get_type() != T.mark or node.mark_get_id().get_name() != KERNEL_MARK:
            return None
        old = node.mark_get_id().user.name
        if old in into:
            body = _folded_kernel_body(prog, node.child(0), into[old])
        else:
            body = rebuild(node.child(0), keep, edit)
        if body is None:
            raise _CannotRebuild("kernel left empty")  # (an emptied kernel never reaches here: keep drops it)
        return body.get_root().child(0).insert_mark(isl.Id(KERNEL_MARK, user=new_kernel[old])).get_schedule()

    root = tree.get_root()
    # the moved instances are dropped everywhere; the receiving kernels' bodies are built with them
    new_tree = rebuild(root, root.domain_get_domain().subtract(moved), edit)
    if new_tree is None:
        raise _CannotRebuild("empty")
    marks = _kernel_marks(new_tree)
    infos = []
    for old in survivors:
        k = new_kernel[old]
        info = by_name[old]
        mark = marks[k.name]
        outer = thread = None
        if info.outer is not None:
            band = _below_marks(mark)
            outer, thread = prefix_through(band, 0), prefix_through(band, 1)
        infos.append(KernelInfo(k, mark.get_domain(), outer, thread, info.flat_depth))
    return new_tree, tuple(infos)


def _statement_order(name: str) -> tuple[int, str]:
    return (len(name), name)


def _below_marks(mark: isl.ScheduleNode) -> isl.ScheduleNode:
    node = mark.child(0)
    while node.get_type() == T.mark:
        node = node.child(0)
    return node


def _folded_kernel_body(prog: Program, below_mark: isl.ScheduleNode, fold: Fold) -> isl.Schedule:
    """The body of the receiving kernel (below its kernel mark): its marks, then its tile band extended to
    the initialisation, then a sequence of the initialisation's point loops and the micro-kernel."""
    marks: list[isl.Id] = []
    node = below_mark
    while node.get_type() == T.mark:
        marks.append(node.mark_get_id())
        node = node.child(0)
    tile, micro = node, node.child(0)
    if tile.get_type() != T.band or micro.get_type() != T.mark or micro.mark_get_id().get_name() != MICROTILE_MARK:
        raise _CannotRebuild("kernel layout")
    point = micro.child(0)
    if point.get_type() != T.band:
        raise _CannotRebuild("micro-tile layout")
    init = prog.statement(fold.init)
    same = _same_element(prog, fold.init, fold.update, prog.context)
    # the initialisation's point loops: the micro-kernel's members that follow the element (not the reduction)
    point_members = []
    for k in range(point.band_n_member()):
        through = same.apply_range(member_map(point, k))
        if through.is_single_valued():
            point_members.append(_extended(through, init.domain))
    if not point_members:
        raise _CannotRebuild("no point loops")
    space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, len(point_members)).align_params(init.domain.get_space())
    init_point = isl.MultiUnionPwAff.from_union_pw_aff_list(space, _list(point_members))
    init_band = isl.Schedule.from_domain(isl.UnionSet.from_set(init.domain)).insert_partial_schedule(init_point)
    init_band = init_band.get_root().child(0).band_set_permutable(1)
    for k in range(len(point_members)):
        init_band = init_band.band_member_set_coincident(k, 1)
    payload = micro.mark_get_id().user
    started = _started(prog, payload, same)
    if started is not None:  # the micro-kernel starts from the constant; the printer drops these loops
        payload = started
        init_band = init_band.insert_mark(isl.Id(FOLDED_INIT_MARK, user=payload.statement))
    micro_sched = rebuild(micro.child(0), micro.get_domain(), lambda n, keep: None)
    micro_sched = micro_sched.get_root().child(0).insert_mark(isl.Id(MICROTILE_MARK, user=payload)).get_schedule()
    body = init_band.get_schedule().sequence(micro_sched)
    # the tile band: each member at its least value over the updates of the element
    tile_mupa = tile.band_get_partial_schedule()
    least = [_extended(same.apply_range(member_map(tile, k)).lexmin(), init.domain) for k in range(tile.band_n_member())]
    init_tile = isl.MultiUnionPwAff.from_union_pw_aff_list(tile_mupa.get_space(), _list(least))
    body = copy_band(tile, body, tile_mupa.union_add(init_tile))
    for ident in reversed(marks):
        body = body.get_root().child(0).insert_mark(ident).get_schedule()
    return body


def _started(prog: Program, tile: MicroTile, same: isl.UnionMap) -> MicroTile | None:
    """``tile`` starting its accumulators from the initialisation's value, where that is exact: the value
    is a constant of a floating-point array, every element's first term has the same reduction index
    ``k0`` (so the micro-kernel call whose reduction loop starts at ``k0`` is the one the initialisation
    precedes), and no reduction runs outside the call (its reduction loop and those inside the register
    tile are all the update's iterators that do not pick the element). Else ``None``."""
    init = prog.statement(next(iter(_names(same.domain()))))
    update = prog.statement(tile.statement)
    if not isinstance(init.value, Const) or not prog.arrays[update.write.array].dtype.is_float:
        return None
    write = update.write.relation
    element = {it for k, it in enumerate(update.iterators) if _moves(write, k)}
    if set(update.iterators) - element != {tile.reduction, *tile.inner}:
        return None
    k = update.iterators.index(tile.reduction)
    k_of = isl.UnionMap.from_map(_iterator_map(update.domain, k))
    try:
        first = _extended(same.apply_range(k_of).lexmin(), init.domain)
    except _CannotRebuild:
        return None
    pieces = first.extract_pw_aff(init.domain.get_space().from_domain().add_dims(isl.dim_type.out, 1)).get_pieces()
    aff = pieces[0][1]
    if not aff.is_cst():
        return None
    k0 = aff.get_constant_val()
    if not k0.is_int():
        return None
    return dataclasses.replace(tile, start=float(init.value.value), first=int(k0.to_python()))


def _names(domain: isl.UnionSet) -> list[str]:
    names: list[str] = []
    domain.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return names


def _moves(write: isl.Map, k: int) -> bool:
    """Whether the element written depends on iterator ``k``."""
    coeffs = access_coefficients(write)
    return True if coeffs is None else any(c[0][k] for c in coeffs)


def _iterator_map(domain: isl.Set, k: int) -> isl.Map:
    """``{ S[i] -> [i_k] }`` on ``domain``."""
    space = domain.get_space()
    n = space.dim(isl.dim_type.set)
    identity = isl.Map.identity(space.map_from_set())
    return identity.project_out(isl.dim_type.out, k + 1, n - k - 1).project_out(isl.dim_type.out, 0, k).intersect_domain(domain)


def _extended(values: isl.UnionMap, domain: isl.Set) -> isl.UnionPwAff:
    """The single-valued ``values`` (``I[x] -> [v]``) as one affine expression over all of ``domain``: where
    the sizes leave an element without updates (a reduction over ``K = 0`` terms), its initialisation runs
    at the place the same expression gives (it orders nothing there). Raises where the values are not one
    expression."""
    upa = isl.UnionPwMultiAff.from_union_map(values).get_union_pw_aff(0)
    pa = upa.extract_pw_aff(domain.get_space().from_domain().add_dims(isl.dim_type.out, 1)).coalesce()
    pieces = pa.get_pieces()
    if not pieces or any(not aff.plain_is_equal(pieces[0][1]) for _, aff in pieces[1:]):
        raise _CannotRebuild("piecewise")
    return isl.UnionPwAff.from_pw_aff(isl.PwAff.from_aff(pieces[0][1]).intersect_domain(domain))


def _list(upas: list[isl.UnionPwAff]) -> isl.UnionPwAffList:
    out = isl.UnionPwAffList.alloc(isl.DEFAULT_CONTEXT, len(upas))
    for u in upas:
        out = out.add(u)
    return out
