"""Cooperative rows: one thread block per row for CUDA kernels whose inner loops reduce into per-row values.

``mapping.py`` maps a kernel's parallel outer loops to threads and leaves the rest sequential in each
thread. For a kernel like softmax (rows ``i``; per row a max over ``j``, an exp, a sum over ``j``, a
divide) that is one row per thread: adjacent threads read addresses a row apart, and only ``R`` threads
exist. :func:`cooperative_rows` re-maps such kernels, decided from the tree and the dependences only:

* **When.** A mapped CUDA kernel with ``n`` parallel members whose statements all start with the ``n``
  row iterators (legal as rows: ``check_parallel`` on the new row band), in which some statement is a
  *row reduction*: ``X op= e`` (``+=``, ``-=``, ``*=``; the Dependences mark it a reduction) or
  ``X = f(X, e)`` with ``f`` in max, min, +, * and ``e`` not reading ``X``, into a private ``X`` (a
  register: contracted, or a 0-d temporary) indexed by the row only, reading some array whose elements
  belong to one row each (the row streams its own data; gemm's ``A[i, k]``, read by many ``(i, j)``,
  does not qualify). At concrete sizes the row must have at least :data:`MIN_ROW` elements.
* **Layout** (contract in ``model.py``): ``kernel`` -> ``grid`` -> row band (one row per block, untiled)
  -> sequence of *phases* in dependence order. A phase is a set of per-row statements (run redundantly by
  every thread of the block, in order) or a loop over the next iterator ``j`` under a ``cyclic`` mark
  (``for (j = threadIdx.x; j < L; j += blockDim.x)``), optionally under a ``reduce`` mark (user object:
  the :class:`RowReduction` records) and a ``sync`` mark (``__syncthreads()`` before the phase).
  Phases are built greedily in source order: a loop statement joins the earliest loop phase after its
  producers where every dependence it has on phase members links the same ``j`` (the same thread) and it
  reads no reduction result of the phase.
* **Reductions.** In a ``reduce`` phase thread 0 keeps the incoming value of ``X`` and the others start
  from the operator's identity; each thread accumulates its ``j``'s; after the loop a block-wide reduction
  (warp shuffles, then one value per warp in shared memory) combines the partials and gives every thread
  the row's value. Reordering is legal because the operator is associative and commutative (up to float
  rounding); :func:`check_threads` checks that every other dependence inside a row links one thread, or
  crosses phases separated by a barrier.
* Every rewritten tree is re-checked: contraction is recomputed on it (``privatize.contract``; no array
  may lose its register), then ``check_schedule``, ``check_parallel`` over rows and :func:`check_threads`.
  A kernel failing any of them keeps the mapping of ``mapping.py``.

``row_staging.py`` later keeps in shared memory the rows that several phases pass over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from polyfuse.analysis.legality import check_parallel, check_schedule
from polyfuse.errors import IllegalTransformError
from polyfuse.ir.expr import Binary, Read
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.bands import member_map, prefix_through, statement_filters
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.mapping.kernels import KernelInfo, flat_depth
from polyfuse.schedule.model import CYCLIC_MARK, GRID_MARK, KERNEL_MARK, REDUCE_MARK, SYNC_MARK, Kernel
from polyfuse.schedule.movement.kernel_tree import kernel_mark, kernel_parts
from polyfuse.schedule.privatize import contract

MIN_ROW = 32
"""Rows shorter than this (at concrete sizes) keep one row per thread."""
MAX_BLOCK = 256
ROW_SHARE = 8
"""Elements of a row each thread takes: a block has the row's length over this many threads (a power of
two from 32 to :data:`MAX_BLOCK`). Measured on an H100 (session 13, ``benchmarks/cuda_acceptance.py``'s
row sweep; % of the copy bandwidth, the kernel alone), softmax 8192 x 1024 f32 with the row loops
unrolled 8 times: 32 threads 68 %, 64 80 %, 128 85 %, 256 43 % (4 elements a thread: the unrolled body
never runs); unrolled 4 times: 59, 74, 73 and 66 %. layernorm 8192 x 1024, unrolled 4 times: 77, 82, 81
and 73 %. softmax 16384 x 4096 (unrolled 4 times): 128 threads 67 %, 256 86 %, 512 82 %, 1024 57 %."""
MAX_UNROLL = 8
"""The farthest a row loop is unrolled: up to a thread's share of a row of known length, so that its loads
are in flight at once (see :data:`ROW_SHARE`; softmax 16384 x 4096, 16 elements a thread, ran at 95 % of
the copy bandwidth unrolled 8 times against 86 % 4 times, and 8192 x 2048 at 92 against 90 %)."""
REDUCE_SCRATCH = 32
"""Elements of the ``__shared__`` scratch array of each block-reduction helper (one per warp)."""

_OPS = {"+=": "sum", "-=": "sum", "*=": "prod"}
_FORMS = {"max": "max", "min": "min", "+": "sum", "*": "prod"}


@dataclass(frozen=True)
class RowReduction:
    """A per-row reduction combined across the block after its phase: ``array`` (a register) by ``op``
    (``sum``, ``prod``, ``max`` or ``min``), of ``dtype`` (the array's).

    ``element`` is set for a reduction into one element of a global array (``block_reductions.py``): the
    threads accumulate in a register, which thread 0 loads from and stores to that element, or, with
    ``across_blocks``, which thread 0 of every block adds to it with ``atomicAdd`` (the blocks of the
    launch share the loop)."""

    statement: str
    array: str
    op: str
    dtype: object
    element: tuple[int, ...] | None = None
    across_blocks: bool = False


@dataclass
class _Phase:
    loop: bool
    statements: list[str]
    reductions: list[RowReduction] = dataclasses.field(default_factory=list)
    sync: bool = False


def reduction_op(stmt: Statement) -> str | None:
    """The combining operator of ``stmt`` when it has a reduction's form (see the module docstring)."""
    if stmt.op in _OPS:
        return _OPS[stmt.op]
    v = stmt.value
    if stmt.op != "=" or not isinstance(v, Binary) or v.op not in _FORMS:
        return None
    target = stmt.write
    for acc, other in ((v.lhs, v.rhs), (v.rhs, v.lhs)):
        if isinstance(acc, Read):
            a = stmt.accesses[acc.access]
            reads_target = any(isinstance(n, Read) and stmt.accesses[n.access].array == target.array for n in other.walk())
            if a.array == target.array and a.relation.is_equal(target.relation) and not reads_target:
                return _FORMS[v.op]
    return None


def cooperative_rows(
    prog: Program,
    tree: isl.Schedule,
    infos: tuple[KernelInfo, ...],
    privatized: Mapping[str, isl.UnionMap],
    view,
    params: Mapping[str, int] | None = None,
) -> tuple[isl.Schedule, tuple[KernelInfo, ...], dict[str, isl.UnionMap]]:
    """Re-map every qualifying kernel of a mapped CUDA ``tree`` to cooperative rows (module docstring).

    Returns the tree, the kernel infos and the privatisation maps (recomputed when a kernel changed);
    unchanged when no kernel qualifies.
    """
    privatized = dict(privatized)
    infos = tuple(infos)
    for n, info in enumerate(infos):
        plan = _plan(prog, tree, n, info, privatized, params)
        if plan is None:
            continue
        new_tree, new_info = _build(prog, tree, n, info, plan, params)
        new_infos = infos[:n] + (new_info,) + infos[n + 1:]
        try:
            new_priv = contract(prog, new_tree, new_infos, view)
            if not set(privatized) <= set(new_priv):
                continue
            check_schedule(prog, new_tree, new_priv)
            check_parallel(prog, new_info.domain, new_info.outer, new_info.thread, new_priv)
            check_threads(prog, plan, new_info.kernel.parallel_depth, _private(prog, new_info.kernel, new_priv))
        except IllegalTransformError:
            continue
        tree, infos, privatized = new_tree, new_infos, new_priv
    return tree, infos, privatized


# ----- deciding -----------------------------------------------------------------------------------------


def _private(prog: Program, kernel: Kernel, privatized: Mapping[str, isl.UnionMap]) -> frozenset[str]:
    """Arrays held in one register per thread in ``kernel``: contracted ones and 0-d temporaries."""
    arrays = {a.array for s in kernel.statements for a in prog.statement(s).accesses}
    scalars = {x for x in arrays if prog.arrays[x].role == "temp" and prog.arrays[x].ndim == 0}
    return frozenset(x for x in arrays if x in privatized) | frozenset(scalars)


def _plan(prog, tree, n, info: KernelInfo, privatized, params) -> list[_Phase] | None:
    """The phases of kernel ``n`` when it qualifies, else None."""
    kernel = info.kernel
    if info.thread is None or kernel_parts(kernel_mark(tree, n)) is None or kernel.parallel_depth < 1:
        return None
    rows = kernel.parallel_depth
    stmts = [s for s in prog.statements if s.name in kernel.statements]
    if any(s.depth < rows for s in stmts) or all(per_row(s, rows) for s in stmts):
        return None
    private = _private(prog, kernel, privatized)
    reductions = {s.name: op for s in stmts if not per_row(s, rows) and (op := _row_reduction(s, rows, private)) is not None}
    if not any(_streams_row(prog.statement(s), rows, private) for s in reductions):
        return None
    if not _long_enough(prog, stmts, rows, params):
        return None
    return _phases(prog, stmts, rows, private, reductions)


def per_row(stmt: Statement, rows: int) -> bool:
    """Whether ``stmt`` runs once per row (no row loop of its own, or one fixed iteration of it, as a
    ``keepdims`` reduction's ``t[i, 0]``): such statements run in every thread of the block."""
    return stmt.depth == rows or _row_map(stmt, rows).is_injective()


def _row_map(stmt: Statement, rows: int) -> isl.Map:
    """``S[i] -> [i_0 .. i_{rows-1}]``."""
    m = isl.Map.from_domain(stmt.domain).add_dims(isl.dim_type.out, rows)
    for k in range(rows):
        m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return m


def _row_reduction(stmt: Statement, rows: int, private: frozenset[str]) -> str | None:
    op = reduction_op(stmt)
    if op is None or stmt.write.array not in private:
        return None
    per_row = _row_map(stmt, rows).reverse().apply_range(stmt.write.relation)
    return op if per_row.is_single_valued() else None


def _streams_row(stmt: Statement, rows: int, private: frozenset[str]) -> bool:
    """Some array ``stmt`` reads has each element read by one row only (``element -> row`` single-valued)."""
    for k, a in enumerate(stmt.accesses):
        if k != stmt.target and a.array not in private and a.kind == "read":
            if a.relation.reverse().apply_range(_row_map(stmt, rows)).is_single_valued():
                return True
    return False


def _long_enough(prog: Program, stmts: Sequence[Statement], rows: int, params) -> bool:
    if params is None or any(p not in params for p in prog.params):
        return True
    fixed = isl.Set.universe(prog.context.get_space())
    for k, p in enumerate(prog.context.get_space().get_var_names(isl.dim_type.param)):
        fixed = fixed.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(fixed.get_ctx(), int(params[p])))
    return row_length(stmts, rows, fixed) >= MIN_ROW


def row_length(stmts: Sequence[Statement], rows: int, fixed: isl.Set) -> int:
    """The largest extent of a row loop (iterator ``rows``) over ``stmts`` at the sizes of ``fixed``."""
    best = 0
    for s in stmts:
        if s.depth <= rows:
            continue
        dom = s.domain.intersect_params(fixed.params())
        if dom.is_empty():
            continue
        lo, hi = dom.dim_min_val(rows), dom.dim_max_val(rows)
        if lo.is_int() and hi.is_int():
            best = max(best, int(hi.to_python()) - int(lo.to_python()) + 1)
    return best


def block_size(length: int | None, share: int = ROW_SHARE) -> int:
    """Threads per row: a power of two from 32, about the row over ``share`` elements a thread, at most
    :data:`MAX_BLOCK` (that when the length is unknown)."""
    if not length:
        return MAX_BLOCK
    b = 32
    while b < MAX_BLOCK and share * b < length:
        b *= 2
    return b


def row_unroll(length: int | None, threads: int) -> int:
    """How far the row loops of a block of ``threads`` are unrolled: a thread's share of a row of known
    ``length``, at most :data:`MAX_UNROLL` (unrolling further than the trip count leaves the loads in
    nvcc's remainder loop, one at a time); 0 (the printer's default, ``cuda_rows.CYCLIC_UNROLL``) when
    the length is unknown. (Where the threads' shares differ, are at most 8 and the loop's bounds are
    constants, the printer unrolls the whole share behind a guard instead: ``cuda_rows.FULL_UNROLL``.)"""
    if not length:
        return 0
    return min(-(-length // threads), MAX_UNROLL)


def _same_row(rel: isl.Map, rows: int) -> isl.Map:
    for k in range(rows):
        rel = rel.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return rel


def _same_j(rel: isl.Map, rows: int) -> bool:
    """Whether every pair of ``rel`` (already within one row) has the same row-loop iterator ``j``."""
    if rel.dim(isl.dim_type.in_) <= rows or rel.dim(isl.dim_type.out) <= rows:
        return False
    return rel.is_subset(rel.equate(isl.dim_type.in_, rows, isl.dim_type.out, rows))


def _row_deps(prog: Program, names: set[str], rows: int):
    """The dependences between statements of the kernel, restricted to pairs in one row."""
    out = []
    for d in dependences_of(prog):
        if d.source in names and d.sink in names:
            rel = _same_row(d.relation.intersect_params(prog.context), rows)
            if not rel.is_empty():
                out.append((d, rel))
    return out


def _phases(prog, stmts, rows, private, reductions) -> list[_Phase] | None:
    names = {s.name for s in stmts}
    deps = _row_deps(prog, names, rows)
    phase_of: dict[str, int] = {}
    phases: list[_Phase] = []
    for s in stmts:
        loop = not per_row(s, rows)
        earliest = 0
        for d, rel in deps:
            if d.sink != s.name or d.source == s.name:
                continue
            if d.source not in phase_of:
                return None  # a dependence against the statement order: the statements share a loop inside the row
            p = phase_of[d.source]
            fusible = loop and phases[p].loop and _same_j(rel, rows) and d.source not in reductions
            earliest = max(earliest, p if fusible else p + 1)
        where = next((p for p in range(earliest, len(phases)) if phases[p].loop == loop and
                      _joins(phases[p], s, deps, rows, reductions)), None)
        if where is None:
            phases.append(_Phase(loop, []))
            where = len(phases) - 1
        phases[where].statements.append(s.name)
        phase_of[s.name] = where
        if s.name in reductions:
            phases[where].reductions.append(RowReduction(s.name, s.write.array, reductions[s.name], prog.arrays[s.write.array].dtype))
    for ph in phases:  # a reduction's target is accessed by no other statement of its phase
        for r in ph.reductions:
            others = [t for t in ph.statements if t != r.statement]
            if any(a.array == r.array for t in others for a in prog.statement(t).accesses):
                return None
    if not any(ph.reductions for ph in phases):
        return None
    _place_barriers(phases, phase_of, deps, rows, private)
    return phases


def _joins(phase: _Phase, s: Statement, deps, rows, reductions) -> bool:
    """Whether ``s`` may join the loop ``phase``: its dependences with members link the same ``j``, and it
    reads no reduction result of the phase (members precede it in the phase body)."""
    members = set(phase.statements)
    for d, rel in deps:
        if d.sink == s.name and d.source in members and (d.source in reductions or not _same_j(rel, rows)):
            return False
    return True


def _place_barriers(phases, phase_of, deps, rows, private) -> None:
    """``sync`` on a phase that consumes (or overwrites) global data another thread touched in an earlier
    phase, unless a block reduction lies between them (it synchronises the block)."""
    for d, rel in deps:
        if d.array in private or d.source == d.sink:
            continue
        p, q = phase_of[d.source], phase_of[d.sink]
        if p == q or _same_j(rel, rows):
            continue
        if not any(phases[k].reductions for k in range(p, q)):
            phases[q].sync = True


def check_threads(prog: Program, phases: Sequence[_Phase], rows: int, private: frozenset[str]) -> None:
    """Raise :class:`IllegalTransformError` unless every dependence inside a row is honoured by the
    cooperative mapping: it links one thread (same ``j``), or it is a row reduction's own chain, or it
    reaches a later phase (private values: from a per-row statement or after the block reduction; global
    data: with a barrier or a block reduction between the phases)."""
    phase_of = {s: k for k, ph in enumerate(phases) for s in ph.statements}
    loops = {s for ph in phases if ph.loop for s in ph.statements}
    reduced = {(r.statement, r.array) for ph in phases for r in ph.reductions}
    for d, rel in _row_deps(prog, set(phase_of), rows):
        p, q = phase_of[d.source], phase_of[d.sink]
        if d.source == d.sink and (d.source, d.array) in reduced:
            continue
        if d.source in loops and d.sink in loops and _same_j(rel, rows):
            continue
        if d.array in private:
            if d.kind != "flow" or d.source not in loops or ((d.source, d.array) in reduced and q > p):
                continue
            why = "a register value produced by one thread of the row is read by another"
        elif q > p and (phases[q].sync or any(phases[k].reductions for k in range(p, q))):
            continue
        else:
            why = "two threads of one row touch the same element without a barrier between them"
        raise IllegalTransformError(f"cooperative rows for {prog.name}: {d.kind} dependence on {d.array!r} from "
                                    f"{d.source} to {d.sink}: {why}")


# ----- building -----------------------------------------------------------------------------------------


def _var(stmt: Statement, d: int) -> isl.UnionPwAff:
    ls = isl.LocalSpace.from_space(stmt.domain.get_space())
    return isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, d)).intersect_domain(stmt.domain).to_union_pw_aff()


def loop_band(stmts: Sequence[Statement], lo: int, hi: int) -> isl.MultiUnionPwAff:
    """``S[i] -> [i_lo, ..., i_{hi-1}]`` for every statement of ``stmts``."""
    out = None
    for d in range(lo, hi):
        upa = None
        for s in stmts:
            piece = _var(s, d)
            upa = piece if upa is None else upa.union_add(piece)
        m = isl.MultiUnionPwAff.from_union_pw_aff(upa)
        out = m if out is None else out.flat_range_product(m)
    return out


def _build(prog: Program, tree, n, info: KernelInfo, phases: list[_Phase], params) -> tuple[isl.Schedule, KernelInfo]:
    kernel = info.kernel
    rows = kernel.parallel_depth
    stmts = [s for s in prog.statements if s.name in kernel.statements]
    node = kernel_mark(tree, n).child(0).cut()
    node = node.insert_partial_schedule(loop_band(stmts, 0, rows)).band_set_permutable(1)
    for k in range(rows):
        node = node.band_member_set_coincident(k, 1)
    row_depth = node.get_tree_depth()
    node = node.child(0).insert_sequence(statement_filters(prog, [ph.statements for ph in phases]))
    for p, ph in enumerate(phases):
        node = node.child(p).child(0)
        node = _phase_tree(prog, node, ph, rows)
        node = node.ancestor(node.get_tree_depth() - row_depth - 1)
    band = node.parent()
    length = None
    if params is not None and all(p in params for p in prog.params):
        fixed = isl.Set.universe(prog.context.get_space())
        for k, p in enumerate(prog.context.get_space().get_var_names(isl.dim_type.param)):
            fixed = fixed.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(fixed.get_ctx(), int(params[p])))
        length = row_length(stmts, rows, fixed)
    grid = tuple(reversed([_extent(band, k, prog, params) for k in range(rows)]))
    helpers = {(r.op, r.dtype.name): int(r.dtype.numpy().itemsize) for ph in phases for r in ph.reductions}
    scratch = REDUCE_SCRATCH * sum(helpers.values())  # one __shared__ scratch array per helper used
    threads = block_size(length)
    new = dataclasses.replace(kernel, grid=grid, block=(threads,), parallel_depth=rows, tile_sizes=(1,) * rows,
                              shared_bytes=kernel.shared_bytes + scratch, unroll=row_unroll(length, threads))
    outer, thread = prefix_through(band, 0), prefix_through(band, rows)
    node = band.insert_mark(isl.Id(GRID_MARK)).parent()
    node = node.delete().insert_mark(isl.Id(KERNEL_MARK, user=new))
    new_tree = node.get_schedule()
    return new_tree, KernelInfo(new, info.domain, outer, thread, flat_depth(band) + rows)


def _phase_tree(prog: Program, node: isl.ScheduleNode, ph: _Phase, rows: int) -> isl.ScheduleNode:
    """Below the leaf of a phase's filter: its statements in order (deeper loops of a statement as a
    sequential band below the row loop); a loop phase under its marks. Returns a node of the phase."""
    stmts = [prog.statement(s) for s in ph.statements]
    top = node.get_tree_depth()
    if ph.loop:
        node = node.insert_partial_schedule(loop_band(stmts, rows, rows + 1))
        node = node.band_member_set_ast_loop_type(0, isl.ast_loop_type.atomic).child(0)
    if len(stmts) > 1:
        node = node.insert_sequence(statement_filters(prog, [[s.name] for s in stmts]))
        for k, s in enumerate(stmts):
            if ph.loop and s.depth > rows + 1:
                node = node.child(k).child(0).insert_partial_schedule(loop_band([s], rows + 1, s.depth)).parent().parent()
    elif ph.loop and stmts[0].depth > rows + 1:
        node = node.insert_partial_schedule(loop_band(stmts, rows + 1, stmts[0].depth))
    node = node.ancestor(node.get_tree_depth() - top)
    if ph.loop:
        node = node.insert_mark(isl.Id(CYCLIC_MARK))
        if ph.reductions:
            node = node.insert_mark(isl.Id(REDUCE_MARK, user=tuple(ph.reductions)))
    if ph.sync:
        node = node.insert_mark(isl.Id(SYNC_MARK))
    return node


def _extent(band: isl.ScheduleNode, k: int, prog: Program, params) -> int:
    """``max + 1`` of row member ``k`` at the given sizes; 0 when unknown."""
    if params is None:
        return 0
    fixed = isl.Set.universe(prog.context.get_space())
    for j, p in enumerate(prog.context.get_space().get_var_names(isl.dim_type.param)):
        if p in params:
            fixed = fixed.fix_val(isl.dim_type.param, j, isl.Val.int_from_si(fixed.get_ctx(), int(params[p])))
    rng = member_map(band, k).intersect_params(fixed & prog.context).range()
    if rng.is_empty():
        return 1
    hi = isl.Set.from_union_set(rng).dim_max_val(0)
    return int(hi.to_python()) + 1 if hi.is_int() else 0
