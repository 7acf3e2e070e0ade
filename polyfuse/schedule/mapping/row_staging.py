"""Row staging: a cooperative-rows kernel (``rows.py``) keeps on chip the rows it passes over more than once.

Softmax reads ``x[i, :]`` in its max phase and again in its exp phase, writes ``y[i, :]``, reads it back
for the sum and rewrites it in the divide phase: without staging every pass goes to global memory (L1/L2
permitting). :func:`stage_rows` runs after ``movement.data_movement`` (which leaves row kernels alone)
and, per row kernel (``kernel`` -> ``grid`` -> row band -> sequence of phases, ``model.py``):

* **What.** Every global array (not a register) that statements of at least two phases access, whose
  per-row footprint ``F(p)`` (``p`` = host dims and row) lies in a box of constant size
  (``footprint_box.fixed_box``, at the schedule's sizes) with exactly one dimension ``d`` longer than one
  element: its row buffer is ``X_shared_kN[extent_d]``. Either all of them fit the shared-memory budget
  together with what the kernel already uses (the block reductions' scratch), or none is staged: the
  kernel stays as ``rows.py`` built it. Arrays one phase accesses stay global (nothing to reuse), as do
  rows over several dimensions.
* **Rewrite.** Every access ``X[f(s)]`` of the kernel's statements becomes ``X_shared[f_d(s) - off_d(p)]``
  (injective within a row: the other dimensions are fixed by ``p``).
* **Copies** (``Promotion.statements``, placed by extension nodes in ``Promotion.tree``): a copy-in
  ``X_shared[e_d - off_d(p)] = X[e]`` over the elements the row reads before writing them
  (``access_patterns.live_in_reads``; all of ``F(p)`` for a read-only array), grafted right before the
  first phase accessing ``X``; a copy-out ``X[e] = X_shared[e_d - off_d(p)]`` over exactly the elements
  the row writes, right after the last phase writing ``X``. Each copy is a ``cyclic`` loop over ``e_d``:
  consecutive threads copy consecutive addresses (coalesced), and the thread that copies ``e`` is the one
  that touches it in the phases (``x[i, j]`` at ``j``).
* **Barriers** from the buffers' conflicts: two steps of the row (copies and phases, in order) touching one
  buffer element, one of them writing, from different threads (a per-row phase runs in every thread; a
  loop step's instance runs on the thread of its cyclic coordinate) need a ``sync`` mark on the later step
  unless a barrier or a block reduction already lies between them. The phases' own conflicts are those
  ``rows.py`` placed barriers for on the global array; the copies usually add none.

The compute tree (``Schedule.tree``: legality, traffic) is unchanged apart from ``Kernel.shared_bytes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.ir.expr import Read
from polyfuse.ir.program import Access, Program, Statement
from polyfuse.schedule.bands import T
from polyfuse.schedule.model import CYCLIC_MARK, GRID_MARK, KERNEL_MARK, REDUCE_MARK, SYNC_MARK, Buffer, Kernel, Promotion
from polyfuse.schedule.movement.access_patterns import live_in_reads
from polyfuse.schedule.movement.footprint_box import fixed_box
from polyfuse.schedule.movement.kernel_tree import kernel_mark, kernel_marks, root

READS = ("read", "update")
WRITES = ("write", "update")


@dataclass
class _Step:
    """One step of a staged row, in execution order: a phase of ``rows.py`` or a group of copies.

    ``threads`` maps each instance to ``(p, c)`` (``c`` its cyclic coordinate) for a loop step, to ``p`` for
    a per-row phase (every thread runs it); ``touches`` are ``(instance -> buffer element, writes)``."""

    loop: bool
    reduces: bool
    sync: bool
    threads: isl.UnionMap
    touches: list[tuple[isl.UnionMap, bool]]


@dataclass
class _Stage:
    """One staged array: its buffer, the copy statements and the steps they go before/after."""

    array: str
    buffer: str
    nbytes: int
    extent: int
    dim: int  # the array dimension the row runs along
    copy_in: Statement | None = None
    copy_out: Statement | None = None
    first: int = 0  # the copy-in goes before this phase
    last: int = 0  # the copy-out goes after this phase


def stage_rows(
    prog: Program,
    tree: isl.Schedule,
    kernels: tuple[Kernel, ...],
    promotion: Promotion | None,
    private: frozenset[str],
    budget: int,
    params: Mapping[str, int] | None = None,
) -> tuple[isl.Schedule, tuple[Kernel, ...], Promotion | None]:
    """Stage the rows of every cooperative-rows kernel of ``tree`` whose rows fit ``budget`` bytes of shared
    memory (module docstring). ``private`` are the register arrays (contracted ones and 0-d temporaries).

    Returns the compute tree (kernel marks updated), the kernels and the promotion (with the copies,
    the rewritten statements and the buffers added; ``None`` when nothing was promoted at all)."""
    full = promotion.tree if promotion is not None else tree
    statements = dict(promotion.statements) if promotion is not None else {}
    buffers = list(promotion.buffers) if promotion is not None else []
    kernel_records = dict(promotion.kernels) if promotion is not None else {}
    ctx = _sizes(prog, params)
    order = {s.name: k for k, s in enumerate(prog.statements)}
    changed = False
    for n, mark in enumerate(kernel_marks(tree)):
        kernel = mark.mark_get_id().user
        phases = _row_phases(mark)
        if phases is None or not isinstance(kernel, Kernel):
            continue
        for ph in phases:  # rows.py lays out a phase's statements in program order
            ph.names.sort(key=order.__getitem__)
        plan = _plan(prog, kernel, n, mark, phases, private, budget, ctx, set(statements) | {b.name for b in buffers})
        if plan is None:
            continue
        stages, rewritten, steps = plan
        statements.update(rewritten)
        for st in stages:
            for c in (st.copy_in, st.copy_out):
                if c is not None:
                    statements[c.name] = c
            buffers.append(Buffer(st.buffer, st.array, kernel.name, "shared", (st.extent,), prog.arrays[st.array].dtype,
                                  why=f"a row accessed in {_count_phases(prog, phases, st.array)} phases, read from "
                                      "global memory once"))
        new = dataclasses.replace(kernel, shared_bytes=kernel.shared_bytes + sum(st.nbytes for st in stages))
        kernel_records[kernel.name] = new
        full = _graft(kernel_mark(full, n), stages, steps, len(phases), new)
        tree = kernel_mark(tree, n).delete().insert_mark(isl.Id(KERNEL_MARK, user=new)).get_schedule()
        kernels = tuple(new if k.name == kernel.name else k for k in kernels)
        changed = True
    if not changed:
        return tree, kernels, promotion
    barriers = promotion.barriers if promotion is not None else frozenset()
    return tree, kernels, Promotion(full, tuple(buffers), statements, barriers, kernel_records)


# ----- reading the row kernel ---------------------------------------------------------------------------


@dataclass
class _Phase:
    names: list[str]
    loop: bool
    reduces: bool
    sync: bool
    cyclic: isl.UnionMap | None  # instance -> [j] for a loop phase


def _row_phases(mark: isl.ScheduleNode) -> list[_Phase] | None:
    """The phases under a cooperative-rows kernel mark (``kernel`` -> ``grid`` -> band -> sequence), else None."""
    grid = mark.child(0)
    if grid.get_type() != T.mark or grid.mark_get_id().get_name() != GRID_MARK or grid.child(0).get_type() != T.band:
        return None
    seq = grid.child(0).child(0)
    if seq.get_type() != T.sequence:
        return None
    phases = []
    for k in range(seq.n_children()):
        node = seq.child(k).child(0)
        flags = set()
        while node.get_type() == T.mark:
            flags.add(node.mark_get_id().get_name())
            node = node.child(0)
        names: list[str] = []
        seq.child(k).filter_get_filter().foreach_set(lambda s: names.append(s.get_tuple_name()))
        loop = CYCLIC_MARK in flags
        cyclic = node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain()) if loop else None
        phases.append(_Phase(names, loop, REDUCE_MARK in flags, SYNC_MARK in flags, cyclic))
    if not any(ph.loop for ph in phases):
        return None
    return phases


def _count_phases(prog: Program, phases: list[_Phase], x: str) -> int:
    return sum(1 for ph in phases if any(a.array == x for s in ph.names for a in prog.statement(s).accesses))


# ----- deciding -----------------------------------------------------------------------------------------


def _plan(prog, kernel, n, mark, phases, private, budget, ctx, taken: set[str]):
    """``(stages, rewritten statements, steps)`` when the kernel's multi-phase rows fit ``budget``, else None."""
    seq = mark.child(0).child(0).child(0)
    depth = seq.get_schedule_depth()
    prefix = seq.get_prefix_schedule_union_map().intersect_domain(seq.get_domain()).intersect_params(ctx)
    stmts = {s: prog.statement(s) for ph in phases for s in ph.names}
    arrays = dict.fromkeys(a.array for s in stmts.values() for a in s.accesses)
    stages: list[_Stage] = []
    boxes = {}
    for x in arrays:
        if x not in prog.arrays or x in private or prog.arrays[x].ndim == 0 or _count_phases(prog, phases, x) < 2:
            continue
        foot = _union([_acc(s, a, ctx) for s in stmts.values() for a in s.accesses if a.array == x])
        box = fixed_box(isl.Map.from_union_map(prefix.reverse().apply_range(foot)))
        if box is None:
            continue
        offset, shape = box
        long = [d for d, e in enumerate(shape) if e > 1]
        if len(long) != 1:
            continue  # one element per row, or a row over several dimensions: left in global memory
        d = long[0]
        itemsize = int(prog.arrays[x].dtype.numpy().itemsize)
        buf = _fresh(f"{x}_shared_k{n}", prog, taken)
        stages.append(_Stage(x, buf, shape[d] * itemsize, shape[d], d))
        boxes[x] = (d, offset.get_aff(d))
    if not stages or kernel.shared_bytes + sum(st.nbytes for st in stages) > budget:
        return None
    time = _time(phases, stmts, prefix, ctx)
    rewritten: dict[str, Statement] = {}
    for st in stages:
        d, off = boxes[st.array]
        dtype = prog.arrays[st.array].dtype
        users = [k for k, ph in enumerate(phases) if any(a.array == st.array for s in ph.names for a in stmts[s].accesses)]
        writers = [k for k, ph in enumerate(phases) if any(a.array == st.array and a.kind in WRITES
                                                               for s in ph.names for a in stmts[s].accesses)]
        reads = [_acc(s, a, ctx) for s in stmts.values() for a in s.accesses if a.array == st.array and a.kind in READS]
        writes = _union([_acc(s, a, ctx) for s in stmts.values() for a in s.accesses if a.array == st.array and a.kind in WRITES])
        fill = live_in_reads(reads, writes, time, prefix) if writes is not None else _union([prefix.reverse().apply_range(r) for r in reads])
        st.first, st.last = users[0], (writers[-1] if writers else 0)
        if fill is not None and not fill.is_empty():
            st.copy_in = _copy(_fresh(f"copy_{st.buffer}", prog, taken), isl.Map.from_union_map(fill), st, d, off, dtype, out=False)
        if writes is not None:
            drain = isl.Map.from_union_map(prefix.reverse().apply_range(writes))
            st.copy_out = _copy(_fresh(f"copyout_{st.buffer}", prog, taken), drain, st, d, off, dtype, out=True)
        for s in stmts.values():
            if any(a.array == st.array for a in s.accesses):
                s = rewritten.get(s.name, s)
                rewritten[s.name] = _redirect(s, st.array, st.buffer, d, off, prefix)
    steps = _steps(phases, stages, rewritten, stmts, prefix, depth, ctx)
    _place_syncs(steps[0], depth)
    return stages, rewritten, steps


def _acc(s: Statement, a: Access, ctx: isl.Set) -> isl.UnionMap:
    return isl.UnionMap.from_map(a.relation.intersect_domain(s.domain).intersect_params(ctx))


def _time(phases: list[_Phase], stmts: Mapping[str, Statement], prefix: isl.UnionMap, ctx: isl.Set) -> isl.UnionMap:
    """instance -> ``(p, phase, c, position)`` (``c`` = 0 in a per-row phase), in one space: the row's order
    up to a statement's own inner loops (instances tied there count as unordered: conservative)."""
    parts = []
    for k, ph in enumerate(phases):
        for pos, name in enumerate(ph.names):
            part = prefix.intersect_domain(isl.UnionSet.from_set(stmts[name].domain))
            part = part.flat_range_product(_const(part, k))
            part = part.flat_range_product(ph.cyclic.intersect_domain(part.domain()) if ph.loop else _const(part, 0))
            part = part.flat_range_product(_const(part, pos))
            parts.append(isl.Map.from_union_map(part))
    width = max(m.dim(isl.dim_type.out) for m in parts)
    out = None
    for m in parts:
        extra = width - m.dim(isl.dim_type.out)
        if extra:
            m = m.add_dims(isl.dim_type.out, extra)
            for k in range(width - extra, width):
                m = m.fix_val(isl.dim_type.out, k, isl.Val.int_from_si(m.get_ctx(), 0))
        m = isl.UnionMap.from_map(m.intersect_params(ctx))
        out = m if out is None else out.union(m)
    return out


def _const(m: isl.UnionMap, v: int) -> isl.UnionMap:
    """instance -> ``[v]`` for the instances of ``m``."""
    dom = isl.Set.from_union_set(m.domain())
    one = isl.Set.universe(isl.Space.set_alloc(dom.get_ctx(), 0, 1)).fix_val(isl.dim_type.set, 0, isl.Val.int_from_si(dom.get_ctx(), v))
    return isl.UnionMap.from_map(isl.Map.from_domain_and_range(dom, one.align_params(dom.get_space())))


def _fresh(base: str, prog: Program, taken: set[str]) -> str:
    """``base`` made unique among the program's names and ``taken`` (to which it is added)."""
    used = set(prog.arrays) | set(prog.scalars) | {s.name for s in prog.statements} | taken
    name = base
    while name in used:
        name += "_"
    taken.add(name)
    return name


def _union(maps):
    out = None
    for m in maps:
        if m is not None:
            out = m if out is None else out.union(m)
    return out


# ----- the copies and the rewrite -----------------------------------------------------------------------


def _copy(name: str, elems: isl.Map, st: _Stage, d: int, off: isl.Aff, dtype, out: bool) -> Statement:
    """``name[p, e]: X_shared[e_d - off(p)] = X[e]`` for ``e`` in ``elems(p)`` (``out``: the reverse)."""
    dom = elems.wrap().flatten().set_tuple_name(name)
    depth = elems.dim(isl.dim_type.in_)
    glob = elems.range_map().flatten_domain().set_tuple_name(isl.dim_type.in_, name).intersect_domain(dom)
    ls = isl.LocalSpace.from_space(dom.get_space())
    p_of = isl.MultiAff.zero(isl.Space.map_from_domain_and_range(dom.get_space(), off.get_domain_space()))
    for k in range(depth):
        p_of = p_of.set_aff(k, isl.Aff.var_on_domain(ls, isl.dim_type.set, k))
    index = isl.Aff.var_on_domain(ls, isl.dim_type.set, depth + d).sub(off.pullback_multi_aff(p_of))
    local = isl.Map.from_aff(index).intersect_domain(dom).set_tuple_id(isl.dim_type.out, isl.Id(st.buffer))
    value = Read(1, dtype)
    if out:
        accesses = (Access(st.array, "write", glob), Access(st.buffer, "read", local))
    else:
        accesses = (Access(st.buffer, "write", local), Access(st.array, "read", glob))
    return Statement(name, dom, accesses, 0, "=", value, 0, name)


def _redirect(s: Statement, x: str, buf: str, d: int, off: isl.Aff, prefix: isl.UnionMap) -> Statement:
    """``s`` with every access of ``x`` going to ``buf[f_d - off(p(s))]``."""
    p_of = isl.PwMultiAff.from_map(isl.Map.from_union_map(prefix.intersect_domain(isl.UnionSet.from_set(s.domain))))
    offset = isl.PwAff.from_aff(off).pullback_pw_multi_aff(p_of)
    accesses = []
    for a in s.accesses:
        if a.array == x:
            f = a.function.intersect_domain(s.domain).get_pw_aff(d).sub(offset)
            a = Access(buf, a.kind, isl.Map.from_pw_aff(f).set_tuple_id(isl.dim_type.out, isl.Id(buf)), a.text)
        accesses.append(a)
    return dataclasses.replace(s, accesses=tuple(accesses))


# ----- barriers -----------------------------------------------------------------------------------------


def _steps(phases, stages, rewritten, stmts, prefix, depth, ctx):
    """The row's steps in order (copy-ins of a phase, the phase, its copy-outs) and the layout
    ``[(kind, phase index, stages)]`` they were built from (``kind``: ``in``, ``phase`` or ``out``)."""
    bufs = {st.buffer for st in stages}
    steps: list[_Step] = []
    layout: list[tuple[str, int, list[_Stage]]] = []
    for k, ph in enumerate(phases):
        ins = [st for st in stages if st.copy_in is not None and st.first == k]
        outs = [st for st in stages if st.copy_out is not None and st.last == k]
        if ins:
            steps.append(_copy_step([(st, st.copy_in) for st in ins], depth, ctx))
            layout.append(("in", k, ins))
        part = _union([prefix.intersect_domain(isl.UnionSet.from_set(stmts[s].domain)) for s in ph.names])
        threads = part.flat_range_product(ph.cyclic.intersect_domain(part.domain())) if ph.loop else part
        touches = [(_acc(rewritten.get(s, stmts[s]), a, ctx), a.kind in WRITES)
                   for s in ph.names for a in rewritten.get(s, stmts[s]).accesses if a.array in bufs]
        steps.append(_Step(ph.loop, ph.reduces, ph.sync, threads, touches))
        layout.append(("phase", k, []))
        if outs:
            steps.append(_copy_step([(st, st.copy_out) for st in outs], depth, ctx))
            layout.append(("out", k, outs))
    return steps, layout


def _copy_step(copies: list[tuple[_Stage, Statement]], depth: int, ctx: isl.Set) -> _Step:
    """The step of a group of copies: each instance ``copy[p, e]`` runs on the thread of ``e_d``."""
    threads, touches = [], []
    for st, c in copies:
        threads.append(isl.UnionMap.from_map(_cyclic_of_copy(c, depth, st.dim)))
        a = next(a for a in c.accesses if a.array == st.buffer)
        touches.append((_acc(c, a, ctx), a.kind in WRITES))
    return _Step(True, False, False, _union(threads), touches)


def _cyclic_of_copy(c: Statement, depth: int, d: int) -> isl.Map:
    """``copy[p, e] -> [p, e_d]``: the row and the cyclic coordinate of a copy instance."""
    space = isl.Space.set_alloc(c.domain.get_ctx(), 0, depth + 1)
    m = isl.Map.from_domain_and_range(c.domain, isl.Set.universe(space).align_params(c.domain.get_space()))
    for k in range(depth):
        m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return m.equate(isl.dim_type.in_, depth + d, isl.dim_type.out, depth)


def _place_syncs(steps: list[_Step], depth: int) -> None:
    """A ``sync`` on every step that conflicts with an earlier one from another thread with neither a
    barrier nor a block reduction between them (module docstring)."""
    for b in range(len(steps)):
        for a in range(b):
            if any(steps[k].sync for k in range(a + 1, b + 1)) or any(steps[k].reduces for k in range(a, b)):
                continue
            if _conflict(steps[a], steps[b], depth):
                steps[b].sync = True


def _conflict(a: _Step, b: _Step, depth: int) -> bool:
    """Whether instances of ``a`` and ``b`` in one row on different threads touch one buffer element, one
    of them writing."""
    for acc_a, wa in a.touches:
        for acc_b, wb in b.touches:
            if not (wa or wb):
                continue
            rel = a.threads.reverse().apply_range(acc_a).apply_range(acc_b.reverse()).apply_range(b.threads)
            maps: list[isl.Map] = []
            rel.foreach_map(maps.append)
            for m in maps:
                for k in range(depth):
                    m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
                if m.is_empty():
                    continue
                both = m.dim(isl.dim_type.in_) > depth and m.dim(isl.dim_type.out) > depth
                if not (both and m.is_subset(m.equate(isl.dim_type.in_, depth, isl.dim_type.out, depth))):
                    return True
    return False


# ----- grafting -----------------------------------------------------------------------------------------


def _graft(mark: isl.ScheduleNode, stages: list[_Stage], steps, nphases: int, kernel: Kernel) -> isl.Schedule:
    """The promotion tree with the copies of one row kernel grafted around its phases, the new ``sync``
    marks inserted, and ``kernel`` (its ``shared_bytes`` updated) on the kernel mark."""
    steps, layout = steps
    depth = mark.child(0).child(0).child(0).get_schedule_depth()
    seq = mark.child(0).child(0).child(0)
    for k in reversed(range(nphases)):
        node = seq.child(k).child(0)
        for step, (kind, at, group) in zip(steps, layout):
            if at != k:
                continue
            synced = node.get_type() == T.mark and node.mark_get_id().get_name() == SYNC_MARK
            if kind == "phase" and step.sync and not synced:
                node = node.insert_mark(isl.Id(SYNC_MARK))
        for step, (kind, at, group) in reversed(list(zip(steps, layout))):
            if at == k and kind == "out":
                node = node.graft_after(_copy_tree([(st, st.copy_out) for st in group], depth, step.sync))
        for step, (kind, at, group) in zip(steps, layout):
            if at == k and kind == "in":
                node = node.graft_before(_copy_tree([(st, st.copy_in) for st in group], depth, step.sync))
        while node.get_type() != T.sequence or node.parent().get_type() != T.band:
            node = node.parent()
        seq = node
    mark = seq.parent().parent().parent()
    return mark.delete().insert_mark(isl.Id(KERNEL_MARK, user=kernel)).get_schedule()


def _copy_tree(copies: list[tuple[_Stage, Statement]], depth: int, sync: bool) -> isl.ScheduleNode:
    """extension (``p -> copy[p, e]``) -> [``sync``] -> one ``cyclic`` loop over ``e_d`` per copy."""
    ext = None
    for _, c in copies:
        m = isl.Map.from_domain_and_range(isl.Set.universe(isl.Space.set_alloc(c.domain.get_ctx(), 0, depth)).align_params(
            c.domain.get_space()), c.domain)
        for k in range(depth):
            m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
        ext = isl.UnionMap.from_map(m) if ext is None else ext.union(isl.UnionMap.from_map(m))
    node = isl.ScheduleNode.from_extension(ext).child(0)
    if len(copies) > 1:
        filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, len(copies))
        for _, c in copies:
            filters = filters.add(isl.UnionSet.from_set(c.domain))
        node = node.insert_sequence(filters)
        for k, (st, c) in enumerate(copies):
            node = _cyclic_loop(node.child(k).child(0), c, depth, st.dim).parent().parent()
    else:
        node = _cyclic_loop(node, copies[0][1], depth, copies[0][0].dim)
    if sync:
        node = node.insert_mark(isl.Id(SYNC_MARK))
    return root(node)


def _cyclic_loop(node: isl.ScheduleNode, c: Statement, depth: int, d: int) -> isl.ScheduleNode:
    """At ``node``: a ``cyclic`` mark above the atomic loop ``copy[p, e] -> [e_d]``; returns the mark."""
    ls = isl.LocalSpace.from_space(c.domain.get_space())
    var = isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, depth + d)).intersect_domain(c.domain)
    node = node.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(var.to_union_pw_aff()))
    node = node.band_member_set_ast_loop_type(0, isl.ast_loop_type.atomic)
    return node.insert_mark(isl.Id(CYCLIC_MARK))


def _sizes(prog: Program, params: Mapping[str, int] | None) -> isl.Set:
    """The program's context with the sizes of ``params`` fixed."""
    ctx = prog.context.params()
    for k in range(ctx.dim(isl.dim_type.param)):
        name = ctx.get_dim_name(isl.dim_type.param, k)
        if params and name in params:
            ctx = ctx.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(ctx.get_ctx(), int(params[name])))
    return ctx
