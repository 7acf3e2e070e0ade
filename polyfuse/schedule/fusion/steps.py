"""One thread: the loop nests of a time step fused row by row, where the traffic model says it pays; and the
source order where its host loops keep their data in the cache (:func:`source_order_one_thread`).

``fusion="smart"`` keeps the outer loops parallel, so the nests of a stencil's time step stay apart when
fusing them would make the outer loop carry a dependence: fdtd-2d's ``hz`` update at row ``i`` reads
``ey[i + 1]``, which the ``ey`` update writes, so fused rows must run in order. On one thread
(``pf.compile(..., threads=1)``) that parallelism is worth nothing, while the separate nests stream every
array through the cache once per nest: on fdtd-2d at PolyBench's LARGE size (three arrays of 9.6 MB,
more than the L2 of a core) the three kernels of a step read seven arrays and write three, where one pass
reads three and writes three.

:func:`fused_steps` builds that pass. The statements must all sit in one outer host loop (the time step).
isl's scheduler, run on one step (the host loop's iterator projected out, the dependences restricted to
one step), gives each statement a row: an iterator of the statement plus a constant shift, or a constant.
The tree is then ``time step -> row -> sequence of the statements, in an order that every dependence
within a row allows -> each statement's other loops in source order``: one row of each nest after the
other, each inner loop contiguous and vectorisable as in the source (isl's fused inner band would put
guards inside the innermost loop instead). :func:`one_thread_steps` maps it like any other tree (the
legality check included) and keeps it only where it moves clearly fewer modelled bytes (:data:`SAVING`)
than the schedule ``"smart"`` chose, with no more strided innermost walks and no register micro-tile lost
(doitgen's time loop holds a contraction). Every kernel of the chosen schedule must run inside the time
loop as a host loop (gemm's row loop also encloses all its statements, but it is the parallel loop of
its kernels, not a host loop), every statement must keep a loop of its own inside the row (jacobi-1d's fused row would
be one scalar loop that does not vectorise: 4x slower measured), and the arrays must not fit in L1.

Measured on one thread against the parallel schedule run on one thread (2-core EPYC, interleaved): fdtd-2d
LARGE 1.25x gcc -O3 (was 0.96), jacobi-2d LARGE 1.24x (1.06), heat-3d LARGE 1.56x (1.16); at MEDIUM,
where the arrays fit in L2, fdtd-2d 1.17x (1.03), heat-3d 1.61x (1.43), jacobi-2d 1.05x (0.99).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import islpy as isl

from polyfuse.cost.host_reuse import has_host_loop, host_reuse_bytes
from polyfuse.cost.machine import cache_sizes
from polyfuse.cost.traffic import array_bytes, program_traffic
from polyfuse.errors import IllegalTransformError, PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView, maps_union, single_affs
from polyfuse.schedule.fusion.locality import strided_walks
from polyfuse.schedule.fusion.scheduler import BudgetExhausted, IslBudget, SchedulerFailed, annotated, detached
from polyfuse.schedule.fusion.smart import counted_microtiles
from polyfuse.schedule.model import ONE_KERNEL_MARK, ROWS_FUSED, Schedule

STEP_OPTIONS = dict(schedule_serialize_sccs=0, schedule_whole_component=1, schedule_outer_coincidence=0,
                    schedule_maximize_coincidence=1)
"""isl's options for one step: every statement in one component, parallelism not asked for."""

SAVING = 0.85
"""The fused steps are kept only below this fraction of the chosen schedule's modelled bytes: a small
saving is within what the model cannot see (a few more guards, a longer loop body)."""


def one_thread_steps(prog: Program, chosen: Schedule, view: DepView, finish: Callable[[isl.Schedule, DepView], Schedule],
                     budget: IslBudget, params: Mapping[str, int]) -> tuple[Schedule, list[str]]:
    """``chosen`` or the row-fused steps of :func:`fused_steps`, whichever the module docstring's rule
    keeps, with a note saying which and why (no note where the program has no time steps to fuse)."""
    if any(p not in params for p in prog.params) or len(chosen.kernels) < 2 or not _in_time_steps(chosen):
        return chosen, []
    try:
        with budget.stage("fusing the time steps (one thread)"):
            tree = fused_steps(prog, view, budget)
            if tree is None:
                return chosen, []
            step_bytes = sum(array_bytes(prog, a, params) or 0 for a in _step_arrays(prog))
            l1 = cache_sizes()[0]
            if step_bytes <= l1:
                return chosen, [f"threads=1: the arrays of a time step ({step_bytes} B) fit in L1 ({l1} B): "
                                "its loop nests were not fused row by row"]
            fused = finish(annotated(prog, tree, view), view)
            before = program_traffic(prog, chosen.tree, chosen.kernels, chosen.contracted, params).total_bytes
            after = program_traffic(prog, fused.tree, fused.kernels, fused.contracted, params).total_bytes
            walks_before = sum(strided_walks(prog, chosen, params).values())
            walks_after = sum(strided_walks(prog, fused, params).values())
            tiles_lost = counted_microtiles(chosen) - counted_microtiles(fused)
    except (IllegalTransformError, BudgetExhausted, SchedulerFailed, PolyfuseError) as e:
        return chosen, [f"threads=1: the time steps were not fused row by row ({e})"]
    if after < SAVING * before and walks_after <= walks_before and tiles_lost <= 0:
        return _under_policy(fused, chosen.fusion), [f"{ROWS_FUSED}: {after} B against {before} B with the parallel kernels (parallel loops are worth "
                     "nothing on one thread)"]
    why = ("it loses register micro-tiles" if tiles_lost > 0 else
           "more strided innermost walks" if walks_after > walks_before else "too small a saving")
    return chosen, [f"threads=1: fusing the loop nests of each time step row by row: {after} B against {before} B: "
                    f"not done ({why})"]


def fused_steps(prog: Program, view: DepView, budget: IslBudget) -> isl.Schedule | None:
    """The tree ``time step -> row -> sequence of statements -> their other loops`` (module docstring),
    or ``None`` where the program is not a sequence of nests inside one time loop, or isl gives no row
    (a skew, a parameter in the shift) or the statements of a row cannot be ordered."""
    names = [s.name for s in prog.statements]
    if len(names) < 2 or not _one_time_loop(prog):
        return None
    project = maps_union([_drop_first(prog.statement(n).domain) for n in names])
    validity = _same_step(view.union(("flow", "anti", "output")))
    body = isl.ScheduleConstraints.on_domain(prog.domains.apply(project)).set_context(prog.context)
    body = body.set_validity(detached(validity.apply_domain(project).apply_range(project)))  # (detached: see there)
    body = body.set_coincidence(body.get_validity())
    body = body.set_proximity(detached(_same_step(view.union(("flow",))).apply_domain(project).apply_range(project)))
    step = budget.compute(body, STEP_OPTIONS)
    node = step.get_root().child(0)
    if node.get_type() != isl.schedule_node_type.band:
        return None
    rows = _rows(node.band_get_partial_schedule().get_at(0), names)
    if rows is None:
        return None
    inner = {n: _inner_map(prog.statement(n).domain, rows[n]) for n in names}
    if any(m is None for m in inner.values()):
        return None  # (a statement with no loop of its own in the row: the fused row would be one scalar loop)
    order = _row_order(prog, rows, validity)
    if order is None:
        return None
    time = isl.MultiUnionPwAff.from_union_map(maps_union([_first(prog.statement(n).domain) for n in names]))
    row = isl.MultiUnionPwAff.from_union_map(maps_union([_row_map(prog.statement(n).domain, rows[n]) for n in names]))
    tree = isl.Schedule.from_domain(prog.domains)
    node = tree.get_root().child(0).insert_partial_schedule(time).child(0).insert_partial_schedule(row)
    node = node.insert_mark(isl.Id(ONE_KERNEL_MARK)).child(0).child(0)  # (one kernel per step: mapping/kernels.split)
    filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, len(order))
    for n in order:
        filters = filters.add(isl.UnionSet.from_set(prog.statement(n).domain))
    node = node.insert_sequence(filters)
    for k, n in enumerate(order):
        node = node.child(k).child(0).insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(inner[n]))
        node = node.parent().parent()
    return node.get_schedule()


def _under_policy(sched: Schedule, fusion: str) -> Schedule:
    """``sched`` labelled as chosen under ``fusion``, keeping the base tree that ``to_text()`` prints."""
    out = dataclasses.replace(sched, fusion=fusion)
    out._lazy.update(sched._lazy)
    return out


def _in_time_steps(sched: Schedule) -> bool:
    """Whether every kernel of ``sched`` runs inside one host loop (the outermost node of its tree is a
    band, not a kernel's mark) that is every statement's first loop: the time steps."""
    top = sched.tree.get_root().child(0)
    if top.get_type() != isl.schedule_node_type.band:
        return False
    maps: list[isl.Map] = []
    isl.UnionMap.from_multi_union_pw_aff(top.band_get_partial_schedule()).foreach_map(maps.append)
    return all(m.dim(isl.dim_type.out) >= 1 and m.dim(isl.dim_type.in_) >= 1 and m.is_subset(_first_of(m)) for m in maps)


def _first_of(m: isl.Map) -> isl.Map:
    """The maps of ``m``'s space whose first output is the first input."""
    return isl.Map.from_basic_map(isl.BasicMap.universe(m.get_space())).equate(isl.dim_type.in_, 0, isl.dim_type.out, 0)


def _one_time_loop(prog: Program) -> bool:
    """Whether every statement runs inside the same outermost loop of the source (its first iterator is
    the source schedule's first dimension) and has a loop inside it."""
    maps: list[isl.Map] = []
    prog.schedule.get_map().foreach_map(maps.append)
    for m in maps:
        if m.dim(isl.dim_type.in_) < 2 or m.dim(isl.dim_type.out) < 1:
            return False
        if not m.is_subset(_first_of(m)):
            return False
    return True


def _rows(row: isl.UnionPwAff, names: list[str]) -> dict[str, tuple[int | None, int]] | None:
    """Per statement, isl's row as (iterator position, shift), or (None, constant); ``None`` when some
    statement's row is anything else (a skew, a parameter, a piecewise expression)."""
    affs = single_affs(row)
    if affs is None or set(affs) != set(names):
        return None
    out: dict[str, tuple[int | None, int]] = {}
    for name, aff in affs.items():
        if aff.dim(isl.dim_type.div) or any(not aff.get_coefficient_val(isl.dim_type.param, p).is_zero()
                                            for p in range(aff.dim(isl.dim_type.param))):
            return None
        coeffs = [aff.get_coefficient_val(isl.dim_type.in_, k) for k in range(aff.dim(isl.dim_type.in_))]
        used = [k for k, c in enumerate(coeffs) if not c.is_zero()]
        constant = aff.get_constant_val()
        if not constant.is_int() or len(used) > 1 or (used and not coeffs[used[0]].is_one()):
            return None
        out[name] = (used[0] + 1 if used else None, constant.to_python())  # (+1: the step's iterator comes first)
    return out


def _row_order(prog: Program, rows: Mapping[str, tuple[int | None, int]], validity: isl.UnionMap) -> list[str] | None:
    """The statements in an order that every dependence between two of them within one step and one row
    allows (source order among the free ones); ``None`` where they form a cycle."""
    names = [s.name for s in prog.statements]
    row = maps_union([_row_map(prog.statement(n).domain, rows[n]) for n in names])
    same = validity.intersect(row.apply_range(row.reverse()))
    after: dict[str, set[str]] = {n: set() for n in names}

    def edge(m: isl.Map) -> None:
        a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        if a != b:
            after[b].add(a)

    same.foreach_map(edge)
    order: list[str] = []
    while len(order) < len(names):
        ready = [n for n in names if n not in order and after[n] <= set(order)]
        if not ready:
            return None
        order.append(ready[0])
    return order


def _same_step(deps: isl.UnionMap) -> isl.UnionMap:
    """The dependences between two instances of one time step (the others the step loop orders)."""
    out: list[isl.Map] = []
    deps.foreach_map(lambda m: out.append(m.equate(isl.dim_type.in_, 0, isl.dim_type.out, 0)))
    return maps_union(out) if out else deps


def _step_arrays(prog: Program) -> set[str]:
    return {acc.array for st in prog.statements for acc in st.accesses if prog.arrays[acc.array].shape}


def _identity(domain: isl.Set) -> isl.Map:
    return isl.Map.identity(domain.get_space().map_from_set())


def _drop_first(domain: isl.Set) -> isl.Map:
    """``S[t, x] -> S[x]``."""
    return _identity(domain).project_out(isl.dim_type.out, 0, 1).set_tuple_name(isl.dim_type.out, domain.get_tuple_name())


def _first(domain: isl.Set) -> isl.Map:
    """``S[t, x] -> [t]``."""
    n = domain.dim(isl.dim_type.set)
    return _identity(domain).project_out(isl.dim_type.out, 1, n - 1).reset_tuple_id(isl.dim_type.out)


def _row_map(domain: isl.Set, row: tuple[int | None, int]) -> isl.Map:
    """``S[x] -> [x_k + c]`` (or ``[c]``)."""
    at, shift = row
    ls = isl.LocalSpace.from_space(domain.get_space())
    aff = isl.Aff.zero_on_domain(ls) if at is None else isl.Aff.var_on_domain(ls, isl.dim_type.set, at)
    return isl.Map.from_aff(aff.add_constant_val(isl.Val.int_from_si(domain.get_ctx(), shift))).intersect_domain(domain)


def _inner_map(domain: isl.Set, row: tuple[int | None, int]) -> isl.UnionMap | None:
    """``S[t, x] -> [the iterators other than t and the row's, in source order]``; ``None`` when none is left."""
    at, _ = row
    n = domain.dim(isl.dim_type.set)
    keep = [k for k in range(1, n) if k != at]
    if not keep:
        return None
    m = _identity(domain)
    for k in reversed([k for k in range(n) if k not in keep]):
        m = m.project_out(isl.dim_type.out, k, 1)
    return isl.UnionMap.from_map(m.reset_tuple_id(isl.dim_type.out).intersect_domain(domain))


SOURCE_SAVING = 0.75
"""On one thread, the source order replaces the chosen schedule only below this fraction of its bytes as
:mod:`polyfuse.cost.host_reuse` counts them: that count trusts the cache, so a small saving is not enough."""


def source_order_one_thread(prog: Program, chosen: Schedule, source: Callable[[], Schedule], budget: IslBudget,
                            params: Mapping[str, int], threads: int = 1) -> tuple[Schedule, list[str]]:
    """``chosen``, or the source order (``source()``: the program scheduled under ``fusion="none"``) where
    the source order has host loops around its kernels, and counted with the reuse those loops keep in the
    cache (:mod:`polyfuse.cost.host_reuse`, for both schedules) it moves far fewer bytes, with no register
    micro-tile lost and no more strided innermost walks. atax: ``"smart"`` reads ``A`` in two parallel
    passes, the source order once, row by row, each row read by both of its kernels while it is in L1; at
    PolyBench's LARGE size 2.7 ms against 4.8 ms on one thread.

    On one thread "far fewer" is :data:`SOURCE_SAVING`. With a team of ``threads``, the source order is
    considered only where none of its kernels has a parallel loop at these sizes (it then runs on the
    calling thread alone: a host loop around parallel kernels would pay a barrier per row), and taken where
    the parallel schedule moves at least ``threads`` times its bytes, so that even split perfectly across the
    team each thread moves as much as the one thread of the source order, and the team's wake-up and barriers
    come on top. atax on 2 threads (session 18's run): the source order on one thread took 0.043 ms at
    MEDIUM against 0.074 ms for the parallel schedule (0.20 against 0.34 ms after an idle pause; gcc -O3
    0.24), and 3.1 against 3.5 ms at LARGE."""
    if any(p not in params for p in prog.params):
        return chosen, []
    if threads > 1 and not _rereads(prog, chosen, params, threads):
        return chosen, []
    try:
        src = source()
    except (IllegalTransformError, BudgetExhausted, PolyfuseError):
        return chosen, []
    if not has_host_loop(src.tree) or (threads > 1 and any(k.parallel_depth for k in src.kernels)):
        return chosen, []
    try:
        with budget.stage("the traffic of the source order"):
            before = host_reuse_bytes(prog, chosen.tree, chosen.kernels, chosen.contracted, params)
            after = host_reuse_bytes(prog, src.tree, src.kernels, src.contracted, params)
            walks_before = sum(strided_walks(prog, chosen, params).values())
            walks_after = sum(strided_walks(prog, src, params).values())
    except (BudgetExhausted, PolyfuseError) as e:
        return chosen, [f"threads=1: the source order not compared ({e})"] if threads == 1 else []
    tiles_lost = counted_microtiles(chosen) - counted_microtiles(src)
    saving = after < SOURCE_SAVING * before if threads == 1 else after * threads <= before
    if saving and walks_after <= walks_before and tiles_lost <= 0:
        why = ("its parallel loops are worth nothing on one thread" if threads == 1 else
               f"split {threads} ways, the parallel schedule would still move as many bytes a thread, and the source "
               "order, with no parallel loop at these sizes, never wakes the team")
        return _under_policy(src, chosen.fusion), [
            f"threads={threads}: the source order ({after} B, its host loops' data reused in the cache) replaces the "
            f"parallel schedule ({before} B counted the same way): {why}"]
    if threads > 1:  # (with a team, a source order not taken is the usual case: no note)
        return chosen, []
    why = ("it loses register micro-tiles" if tiles_lost > 0 else
           "more strided innermost walks" if walks_after > walks_before else "too small a saving")
    return chosen, [f"threads=1: the source order ({after} B with its host loops' reuse) against {before} B: not taken ({why})"]


def _rereads(prog: Program, chosen: Schedule, params: Mapping[str, int], threads: int) -> bool:
    """Whether some array holding more than half of the program's bytes is touched by ``threads`` kernels of
    ``chosen`` or more: otherwise the parallel schedule cannot move ``threads`` times the bytes of any
    other, and the source order is not worth scheduling (a cheap test, before the costly counts)."""
    sizes = {a: array_bytes(prog, a, params) or 0 for a in prog.arrays if prog.arrays[a].role != "temp"}
    total = sum(sizes.values())
    for array, size in sizes.items():
        if 2 * size <= total:
            continue
        touching = sum(1 for k in chosen.kernels
                       if any(acc.array == array for s in k.statements for acc in prog.statement(s).accesses))
        if touching >= threads:
            return True
    return False
