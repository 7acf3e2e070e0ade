"""``fusion="smart"``: keep a fusion only where the traffic model says it does not lose bytes.

The two candidates come from isl (``scheduler.py``): the parallelism-keeping maximal fusion (``fused``,
isl's incremental clustering) and minimal fusion (``unfused``, one loop nest per strongly connected
component). The decision is taken **per fused kernel**, not for the whole program: each kernel of the fused
schedule whose statements are exactly those of several unfused kernels is compared, in modelled bytes at
the schedule's sizes, with those kernels together. Where they move fewer bytes, or keep register
micro-tiles (C: a contraction is compute-bound) that the fused kernel loses, and are no less parallel, the
fused kernel is *distributed*, the rest of the fused schedule left as it is:

* a fused kernel outside every host loop is replaced by the unfused kernels themselves, their subtrees
  copied from the unfused tree under a sequence of filters in the unfused order (no rescheduling: the
  unfused kernels keep their own loop order, e.g. a matmul's ``i, j, k`` rather than the skewed band the
  fused kernel needed, and their tile search and traffic are already known);
* a fused kernel under a host loop keeps its band, copied under one filter per unfused kernel (loop
  distribution of that kernel alone).

The *mixed* schedule is mapped and checked for legality like any other variant (``finish``). The schedule
kept is the one the model rates best among fused, mixed and unfused: the most register micro-tiles, then
the fewest bytes, among those no less parallel (no more sequential kernels) than the fused one; ties go to
the fused schedule, then the mixed one. **Nothing the model rates worse is kept silently**: when the
schedule kept moves more bytes than another one as parallel (it keeps more micro-tiles), when distributing
ran out of its isl budget or failed (the better rated of fused and unfused is kept: ``fusion="min"`` for an
MLP whose fused kernel needs a skewed band), or when a step of the comparison ran out so that the
schedules could not be rated, a :class:`PolyfuseWarning` says so at the user's call and a note says it in
``explain()``. A less parallel candidate is never taken, and only noted: smart fusion keeps the outer loops
parallel (minimal fusion of a stencil puts its time loop in one sequential kernel, which the model counts
as a single tile, so its bytes flatter it; a warning would advise the slower schedule).

Every comparison is written to the notes, which ``explain()`` prints.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.cost.traffic import program_traffic
from polyfuse.errors import IllegalTransformError, PolyfuseError, warn
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView, T, annotate, statement_filters
from polyfuse.schedule.fusion.locality import strided_walks
from polyfuse.schedule.fusion.rating_sizes import REPRESENTATIVE_SIZE, REPRESENTATIVE_WINDOW, representative_sizes
from polyfuse.schedule.fusion.scheduler import BudgetExhausted, IslBudget
from polyfuse.schedule.mapping.kernels import box_volume, split, statements_of
from polyfuse.schedule.model import CARRIED_KEYS, Kernel, Schedule
from polyfuse.schedule.tiling.microtile import fresh_nest, microtile_marks


@dataclass(frozen=True)
class Variant:
    """A finished schedule and what it was finished from: the annotated base tree and the dependence view
    (so that a variant can be rebuilt with some of its kernels distributed)."""

    schedule: Schedule
    log: tuple[str, ...]
    base: isl.Schedule
    view: DepView


APART_KEY = "smart_apart"
"""Where a smart schedule keeps (in its private ``_lazy`` cache) the statement groups of the fused kernels
it did not keep fused: ``explain()`` names the traffic model as the reason they sit in separate kernels."""


def apart_of(sched: Schedule) -> tuple[frozenset[str], ...]:
    """The statements of the fused kernels ``fusion="smart"`` distributed again in ``sched`` (see
    :data:`APART_KEY`); empty for any other schedule."""
    return tuple(sched._lazy.get(APART_KEY, ()))


Finish = Callable[[isl.Schedule, DepView], Schedule]
"""Maps and checks a base tree (``pf.schedule``'s ``_finish`` with everything else fixed)."""


@dataclass(frozen=True)
class _Candidate:
    label: str
    schedule: Schedule
    bytes: int
    sequential: int
    apart: tuple[frozenset[str], ...] = ()  # the fused kernels it distributes
    strided: int = 0  # statement instances x accesses striding along their innermost loop (``locality.py``)

    @functools.cached_property
    def microtiles(self) -> int:
        return sum(_microtiles(self.schedule).values())

    @functools.cached_property
    def starved(self) -> int:
        return len(_starved(self.schedule))

    @property
    def rating(self) -> tuple[int, int, int, int]:
        """Lower is better: register micro-tiles kept (a contraction is compute-bound: one without its
        micro-tile loses more time than any bytes saved), then CUDA kernels starved of threads (a GPU
        running a large kernel on a few threads is idle whatever the bytes), then strided innermost walks
        (a line per element, no vectors: more time than the bytes say), then modelled bytes."""
        return (-self.microtiles, self.starved, self.strided, self.bytes)


def smart_by_traffic(prog: Program, fused: Variant, unfused: Variant, finish: Finish, budget: IslBudget,
                     params: Mapping[str, int] | None) -> tuple[Schedule, list[str]]:
    """The smart schedule from the two candidates, and the notes that say why."""
    f, u = fused.schedule, unfused.schedule
    if same_kernels(f, u):
        return f, []
    more_sequential = _sequential_kernels(u) - _sequential_kernels(f)
    if more_sequential > 0 and not any(_parts(kf, u) for kf in f.kernels):
        # minimal fusion can only be taken whole (it groups the statements differently, e.g. a stencil's
        # time loop inside one kernel), and it is less parallel: nothing to rate
        return f, [f"fusion='smart': kept the fused schedule: minimal fusion ({len(u.kernels)} kernel(s)) groups the "
                   f"statements differently and would run {more_sequential} more kernel(s) sequentially (traffic not compared)"]
    sizes = representative_sizes(prog, params or {})
    at = ", ".join(f"{k}={v}" for k, v in sizes.items())
    if any(p not in (params or {}) for p in prog.params):
        at += (f" (representative sizes: params= does not give them, so each is taken as {REPRESENTATIVE_SIZE}, or the largest "
               "power of two the program's assumptions allow; a sliding window's extent is taken as "
               f"{REPRESENTATIVE_WINDOW})")
    try:
        with budget.stage("the traffic comparison"):
            tf = program_traffic(prog, f.tree, f.kernels, f.contracted, sizes)
            tu = program_traffic(prog, u.tree, u.kernels, u.contracted, sizes)
            wf, wu = strided_walks(prog, f, sizes), strided_walks(prog, u, sizes)
    except (PolyfuseError, BudgetExhausted) as e:
        return f, [unrated(f"traffic not compared ({e})", budget=isinstance(e, BudgetExhausted))]
    notes = [f"fusion='smart' by traffic at {at}: maximal fusion ({len(f.kernels)} kernel(s)) {tf.total_bytes} B vs "
             f"minimal fusion ({len(u.kernels)} kernel(s)) {tu.total_bytes} B"]
    split_kernels: dict[frozenset[str], list[tuple[str, ...]]] = {}
    grouped: dict[frozenset[str], list[tuple[str, ...]]] = {}  # contractions apart, the rest still fused
    micro_f, micro_u = _microtiles(f), _microtiles(u)
    starved_f, starved_u = _starved(f), _starved(u)
    for kf in f.kernels:
        parts = _parts(kf, u)
        if not parts:
            continue
        bytes_f = tf.per_kernel[kf.name].total_bytes
        bytes_u = sum(tu.per_kernel[p.name].total_bytes for p in parts)
        lost = sum(micro_u.get(p.name, 0) for p in parts) - micro_f.get(kf.name, 0)  # register micro-tiles fusion costs
        strided = wf.get(kf.name, 0) - sum(wu.get(p.name, 0) for p in parts)  # strided walks fusion adds
        less_parallel = not kf.without_parallel_loop and any(p.without_parallel_loop for p in parts)
        starves = kf.name in starved_f and not any(p.name in starved_u for p in parts)  # (CUDA: fusion leaves few threads)
        loses = (bytes_u < bytes_f or lost > 0 or strided > 0 or starves) and not less_parallel
        names = " | ".join("+".join(p.statements) for p in parts)
        verdict = ("kept fused (unfused would be less parallel)" if less_parallel and (bytes_u < bytes_f or lost > 0 or strided > 0 or starves) else
                   (f"fusion leaves the GPU {_threads(kf)} thread(s) for {starved_f[kf.name]} statement instances: distributed"
                    if starved_f[kf.name] else "fusion maps one dimension to the GPU's threads where apart the statements map "
                    "two or more (at unknown sizes that dimension may be a batch of one): distributed")
                   if loses and starves else
                   f"fusion loses the register micro-tile of {lost} contraction(s): distributed" if loses and lost > 0 else
                   f"fusion makes {strided} access(es) x instances stride along the innermost loop: distributed"
                   if loses and strided > 0 else
                   "fusion loses: distributed" if loses else "kept fused")
        notes.append(f"fusion='smart': {kf.name} ({'+'.join(kf.statements)}) {bytes_f} B fused vs {bytes_u} B as {names}: {verdict}")
        if loses:
            split_kernels[frozenset(kf.statements)] = [p.statements for p in parts]
            if lost > 0:
                groups = _contractions_apart(parts, micro_u)
                if len(groups) < len(parts):
                    grouped[frozenset(kf.statements)] = groups
    candidates = [_Candidate("the fused schedule", f, tf.total_bytes, _sequential_kernels(f), strided=sum(wf.values()))]
    failed = None
    if split_kernels:
        try:
            with budget.stage("distributing the kernels where fusion loses"):
                mixed = finish(distribute(prog, fused.base, fused.view, split_kernels, donor=unfused.base), fused.view)
                tm = program_traffic(prog, mixed.tree, mixed.kernels, mixed.contracted, sizes).total_bytes
                wm = sum(strided_walks(prog, mixed, sizes).values())
            candidates.append(_Candidate(f"the distributed schedule ({len(split_kernels)} kernel(s) distributed: "
                                         f"{len(mixed.kernels)} kernel(s))", mixed, tm, _sequential_kernels(mixed), tuple(split_kernels), wm))
            notes.append(f"fusion='smart': distributed {len(split_kernels)} kernel(s): {len(mixed.kernels)} kernel(s), {tm} B")
        except (IllegalTransformError, PolyfuseError, BudgetExhausted) as e:
            failed = e
            notes.append(f"fusion='smart': distributing failed ({e})")
    if grouped and failed is None:
        try:
            with budget.stage("taking the contractions out of the kernels where fusion loses"):
                apart = finish(distribute(prog, fused.base, fused.view, grouped, donor=unfused.base), fused.view)
                ta = program_traffic(prog, apart.tree, apart.kernels, apart.contracted, sizes).total_bytes
                wa = sum(strided_walks(prog, apart, sizes).values())
            candidates.insert(1, _Candidate(f"the schedule with the contractions apart ({len(apart.kernels)} kernel(s))",
                                            apart, ta, _sequential_kernels(apart), tuple(grouped), wa))
            notes.append(f"fusion='smart': contractions apart, the rest fused: {len(apart.kernels)} kernel(s), {ta} B")
        except (IllegalTransformError, PolyfuseError, BudgetExhausted) as e:
            notes.append(f"fusion='smart': taking the contractions apart failed ({e})")
    candidates.append(_Candidate("fusion='min'", u, tu.total_bytes, _sequential_kernels(u), strided=sum(wu.values())))
    return _choose(candidates, notes, failed, split_kernels)


def same_kernels(a: Schedule, b: Schedule) -> bool:
    """Whether ``a`` and ``b`` group the statements into the same kernels, in the same order."""
    return [k.statements for k in a.kernels] == [k.statements for k in b.kernels]


def _choose(candidates: list[_Candidate], notes: list[str], failed: Exception | None,
            split_kernels: Mapping[frozenset[str], list[tuple[str, ...]]]) -> tuple[Schedule, list[str]]:
    """The best rated candidate no less parallel than the fused one (``candidates[0]``), with a warning
    when distributing failed; a candidate that moves fewer bytes but keeps fewer register micro-tiles is
    rated worse (a contraction's time is arithmetic) and is said in the note. A less parallel candidate that moves
    fewer bytes is said in the note only: smart fusion keeps the outer loops parallel (a whole stencil in
    one sequential kernel counts as one tile, so the model's bytes flatter it; a warning would advise it)."""
    fused = candidates[0]
    allowed = [c for c in candidates if c.sequential <= fused.sequential]
    chosen = min(allowed, key=lambda c: c.rating)  # min() keeps the first of equals: fused, then distributed
    cheapest = min(candidates, key=lambda c: c.rating)
    if chosen is fused:
        apart: tuple[frozenset[str], ...] = ()
        verdict = "kept the fused schedule"
    elif chosen is candidates[-1]:
        apart = tuple(frozenset(k.statements) for k in fused.schedule.kernels if len(k.statements) > 1)
        verdict = "fusion loses: kept the unfused schedule"
    else:
        apart = chosen.apart
        verdict = f"kept {chosen.label}"
    line = f"fusion='smart': {verdict} ({chosen.bytes} B{_micro_text(chosen)})"
    least = min(allowed, key=lambda c: c.bytes)
    worse = least.bytes < chosen.bytes
    if worse:
        why = ("it keeps fewer register micro-tiles" if least.microtiles < chosen.microtiles else
               f"it runs {least.starved} kernel(s) starved of GPU threads (fewer than {STARVED_THREADS} threads for at least "
               f"{STARVED_WORK} statement instances or, at unknown sizes, one mapped dimension where two are possible), against "
               f"{chosen.starved}" if least.starved > chosen.starved else
               f"more of its innermost loops stride through memory ({least.strided} vs {chosen.strided} access(es) x instances)")
        line += f", although {least.label} moves fewer bytes ({least.bytes} B{_micro_text(least)}): {why}"
    if cheapest.rating < chosen.rating:  # (only where it is less parallel: a note, not a warning)
        line += (f"; {cheapest.label} would move {cheapest.bytes} B{_micro_text(cheapest)} but run "
                 f"{cheapest.sequential - chosen.sequential} more kernel(s) sequentially")
    if failed is not None:
        line = (f"fusion='smart': distributing the kernels where fusion loses failed ({failed}); fell back to "
                f"{chosen.label}, the better rated alternative ({chosen.bytes} B)")
        if isinstance(failed, BudgetExhausted):
            line += " (raise isl_budget= to allow more)"
    if failed is not None:  # (keeping more register micro-tiles for more bytes is the rating itself: a note)
        warn(line)
    out = dataclasses.replace(chosen.schedule, fusion="smart")
    out._lazy.update({k: v for k, v in chosen.schedule._lazy.items() if k in CARRIED_KEYS})
    out._lazy[APART_KEY] = apart
    return out, notes + [line]


def _micro_text(c: _Candidate) -> str:
    return f", {c.microtiles} register micro-tile(s)" if c.microtiles else ""


MICROTILE_WORTH = 1 << 17
"""Updates below which a contraction's register micro-tile does not count in the rating: at a few
microseconds of arithmetic, the bytes fusion saves (and the launches) weigh more."""


def counted_microtiles(sched: Schedule) -> int:
    """The register micro-tiles of ``sched`` that its rating counts (see :data:`MICROTILE_WORTH`)."""
    return sum(_microtiles(sched).values())


def _microtiles(sched: Schedule) -> dict[str, int]:
    """Per kernel name: the register micro-tiles (``microtile`` marks, C) inside it whose contraction does
    at least ``MICROTILE_WORTH`` updates at the schedule's sizes (every one when sizes are unknown)."""
    out: dict[str, int] = {}
    fixed = {p: int(v) for p, v in (sched.params or {}).items()}

    def worth(tile) -> bool:
        if any(p not in fixed for p in sched.program.params):
            return True
        volume = _instances(sched.program, tile.statement, fixed)
        return volume is None or volume >= MICROTILE_WORTH

    for kernel, tile in microtile_marks(sched.tree):
        if worth(tile):
            out[kernel] = out.get(kernel, 0) + 1
    for k in sched.kernels:  # CUDA: the plan rides on the kernel (``tiling/cuda_microtile.py``)
        if getattr(k, "microtile", None) is not None and worth(k.microtile):
            out[k.name] = out.get(k.name, 0) + 1
    return out


def unrated(why: str, budget: bool = True) -> str:
    """The note (and :class:`PolyfuseWarning`) when ``fusion="smart"`` could not rate its candidates
    (``budget``: because a step ran out of its isl budget)."""
    hint = "raise isl_budget= to allow the comparison, or pass fusion='min'" if budget else "pass fusion='min' to take it"
    line = f"fusion='smart': {why}; kept the fused schedule without rating it against fusion='min' ({hint})"
    warn(line)
    return line


def _contractions_apart(parts: list[Kernel], micro_u: Mapping[str, int]) -> list[tuple[str, ...]]:
    """``parts`` (minimal fusion's kernels of one fused kernel, in order) regrouped: each kernel with a
    register micro-tile alone, each run of the others between them as one group (fused again)."""
    groups: list[tuple[str, ...]] = []
    run: list[str] = []
    for p in parts:
        if micro_u.get(p.name, 0):
            if run:
                groups.append(tuple(run))
                run = []
            groups.append(tuple(p.statements))
        else:
            run.extend(p.statements)
    if run:
        groups.append(tuple(run))
    return groups


def _parts(kf: Kernel, u: Schedule) -> list[Kernel]:
    """The kernels of ``u`` that make up the fused kernel ``kf`` exactly (at least two), else none."""
    parts = [ku for ku in u.kernels if set(ku.statements) <= set(kf.statements)]
    return parts if len(parts) >= 2 and sum(len(p.statements) for p in parts) == len(kf.statements) else []


STARVED_THREADS = 1024
"""CUDA: a launch of fewer threads than this uses under 1 % of an H100's resident threads (132 SMs x 2048)."""
STARVED_WORK = 1 << 20
"""... and a kernel running at least this many statement instances on so few threads is *starved*: its
time is its work divided by a handful of threads, which no saving in bytes makes up for (attention fused
into one kernel parallel over its 8 heads only: 8 threads for 2 x 10^8 instances)."""


def _starved(sched: Schedule) -> dict[str, int]:
    """CUDA, at the schedule's sizes: the kernels launching fewer than :data:`STARVED_THREADS` threads for at
    least :data:`STARVED_WORK` statement instances (name -> instances); empty on C. Without every size the
    thread count is unknown: a kernel whose threads run along one dimension only while some statement of
    it has three or more counts as starved (value 0), since that dimension may be a batch of one (a
    convolution fused with its padding is parallel over the images only)."""
    if sched.target != "cuda":
        return {}
    if any(p not in (sched.params or {}) for p in sched.program.params):
        return {k.name: 0 for k in sched.kernels
                if k.parallel_depth == 1 and any(sched.program.statement(s).depth >= 3 for s in k.statements)}
    fixed = {p: int(v) for p, v in sched.params.items()}
    out = {}
    for k in sched.kernels:
        threads = _threads(k)
        if threads is None or threads >= STARVED_THREADS:
            continue
        work = sum(_instances(sched.program, name, fixed) or 0 for name in k.statements)
        if work >= STARVED_WORK:
            out[k.name] = work
    return out


def _instances(prog: Program, statement: str, sizes: Mapping[str, int]) -> int | None:
    """The instances of ``statement`` at ``sizes`` (every size param; its bounding box), ``None`` if unbounded."""
    dom = prog.statement(statement).domain
    for k, p in enumerate(dom.get_space().get_var_names(isl.dim_type.param)):
        dom = dom.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(dom.get_ctx(), sizes[p]))
    return box_volume(dom)


def _threads(k: Kernel) -> int | None:
    """The threads of one launch of ``k`` (grid x block) where both are known numbers."""
    dims = (*k.grid, *k.block)
    return math.prod(dims) if dims and all(isinstance(d, int) for d in dims) else None


def _sequential_kernels(s: Schedule) -> int:
    return sum(1 for k in s.kernels if k.without_parallel_loop)


def distribute(prog: Program, base: isl.Schedule, view: DepView, parts: Mapping[frozenset[str], list[tuple[str, ...]]],
               donor: isl.Schedule | None = None) -> isl.Schedule:
    """``base`` with each kernel whose statements are a key of ``parts`` distributed into a sequence of
    loop nests, one per statement group of ``parts[key]`` (in that order).

    Where ``donor`` (a tree of the same program) has a kernel outside every host loop for a group, and
    the kernel of ``base`` is outside every host loop too, that group gets the donor's subtree (its own
    loops) and every other group a fresh nest (the loops its statements share, then each one's own:
    :func:`~polyfuse.schedule.tiling.microtile.fresh_nest`); without any donor kernel, each group gets a
    copy of the kernel's band (its fused loops). Only the new subtrees are flagged again
    (a distributed nest may be more parallel than the fused one); the rest of ``base`` keeps its flags.
    """
    subtrees = _top_level_kernels(donor) if donor is not None else {}

    def at_kernel(node: isl.ScheduleNode) -> isl.ScheduleNode:
        groups = parts.get(frozenset(statements_of(node)))
        if not groups:
            return node
        filters = statement_filters(prog, groups)
        sources = [subtrees.get(frozenset(g)) for g in groups]
        if node.get_schedule_depth() == 0 and all(s is not None for s in sources):
            node = node.cut().insert_sequence(filters)
            for k, source in enumerate(sources):
                node = _copy_into(node.child(k).child(0), source).parent().parent()
        elif node.get_schedule_depth() == 0 and any(s is not None for s in sources):
            node = node.cut().insert_sequence(filters)  # a group without a donor kernel: a fresh nest
            order = {st.name: n for n, st in enumerate(prog.statements)}
            for k, (source, group) in enumerate(zip(sources, groups)):
                leaf = node.child(k).child(0)
                node = (_copy_into(leaf, source) if source is not None else
                        fresh_nest(prog, leaf, sorted(group, key=order.get))).parent().parent()
        else:
            node = node.insert_sequence(filters)
        return annotate(node, view)

    return split(base.get_root(), at_kernel).get_schedule()


def _top_level_kernels(tree: isl.Schedule) -> dict[frozenset[str], isl.ScheduleNode]:
    """The kernel roots of ``tree`` (as :func:`split` finds them) outside every band, by statements."""
    found: dict[frozenset[str], isl.ScheduleNode] = {}

    def record(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_schedule_depth() == 0:
            found[frozenset(statements_of(node))] = node
        return node

    split(tree.get_root(), record)
    return found


def _copy_into(leaf: isl.ScheduleNode, source: isl.ScheduleNode) -> isl.ScheduleNode:
    """The subtree at ``source`` (another tree) rebuilt at ``leaf``; returns the node at ``leaf``'s position.
    Bands, sequences, sets, filters and marks are copied; anything else (extensions, guards) raises
    :class:`PolyfuseError`, and the caller keeps the fused kernel."""
    kind = source.get_type()
    if kind == T.leaf:
        return leaf
    if kind == T.band:
        node = leaf.insert_partial_schedule(source.band_get_partial_schedule())
        node = node.band_set_permutable(source.band_get_permutable())
        for k in range(source.band_n_member()):
            node = node.band_member_set_coincident(k, source.band_member_get_coincident(k))
        return _copy_into(node.child(0), source.child(0)).parent()
    if kind in (T.sequence, T.set):
        filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, source.n_children())
        for k in range(source.n_children()):
            filters = filters.add(source.child(k).filter_get_filter())
        node = leaf.insert_sequence(filters) if kind == T.sequence else leaf.insert_set(filters)
        for k in range(source.n_children()):
            node = _copy_into(node.child(k).child(0), source.child(k).child(0)).parent().parent()
        return node
    if kind == T.filter:
        return _copy_into(leaf.insert_filter(source.filter_get_filter()).child(0), source.child(0)).parent()
    if kind == T.mark:
        return _copy_into(leaf.insert_mark(source.mark_get_id()).child(0), source.child(0)).parent()
    raise PolyfuseError(f"cannot copy a {kind} node of the unfused schedule")
