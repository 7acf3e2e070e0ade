"""Whole-program scheduling: ``pf.schedule(prog, ...) -> Schedule`` (see ``model.py`` for the tree
conventions the code generators rely on).

The passes, in order, each a function from one value to the next, in the sub-package its name says:

0. on the scheduler's copy of the program: scalar accumulators forwarded into their arrays
   (``accumulators.py``) and statements split around the pivot they read (``pivots.py``);
1. dependences (``deps.py``);
2. fusion: the base tree under the fusion policy or the explicit schedule (``fusion/scheduler.py``);
3. C kernel shapes: contractions distributed and register micro-tiled (``tiling/microtile.py``), row-wise
   kernels rebuilt row by row (``tiling/rowwise.py``);
4. mapping: the host/kernel split, tiling (``tiling/sizes.py``, sizes from ``cost/search.py``), the C
   point-loop interchange (``tiling/interchange.py``), C parallel loops and CUDA grids and blocks
   (``mapping/kernels.py``);
5. contraction of temporaries (``privatize.py``), then the legality check (``analysis/legality.py``, on
   every schedule; a C kernel shape that fails it is dropped for the plain tiling);
6. CUDA: cooperative rows (``mapping/rows.py``, re-checked), data movement (``movement/data_movement.py``)
   and row staging (``mapping/row_staging.py``);
7. for ``"smart"``: per-kernel fusion by traffic and register micro-tiles (``fusion/smart.py``), then the
   fusion decisions (``fusion/explain.py``);
8. on the chosen schedule: C contractions' initialisations into their tiles (``tiling/init_fold.py``), C
   row buffers for outputs rewritten in place (``row_buffers.py``: storage only, the tree unchanged), CUDA
   shared reductions (``mapping/block_reductions.py``, ``mapping/vector_sums.py``).

The C and CUDA targets share the tiling levels of ``tiling/``. Every stage runs under an isl operation
budget; past it the policy falls back (``IslBudget`` in ``fusion/scheduler.py``), down to the source
order run sequentially.

Variants are tried in order until one is legal: with live-range reordering (temporaries' anti/output
dependences relaxed where their values stay local, in isl's constraints and when flagging parallel loops),
without it in isl's constraints only, and with every dependence a hard constraint. A variant that would
need a temporary privatised that cannot be contracted fails the legality check, and the next is tried.
(Until session 13 every variant was finished and the one with the fewest sequential kernels, then the
fewest kernels, kept: over 1028 such choices, on the 30 PolyBench-style kernels, the benchmark workloads
and the examples, for C and CUDA, with and without sizes, under ``"smart"``, ``"min"`` and ``"max"``, the
first legal variant always won, and finishing the others cost deriche a third of its compile time.)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse import progress
from polyfuse.analysis.legality import check_parallel, check_schedule
from polyfuse.cost.search import Limits, TileSearch  # noqa: E402 (cost/ builds on the modules above)
from polyfuse.errors import IllegalTransformError, PolyfuseError, api_boundary, warn
from polyfuse.ir.program import Program
from polyfuse.runtime.args import check_params
from polyfuse.schedule.accumulators import forward_accumulators
from polyfuse.schedule.bands import DepView
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.fusion.explain import decisions, kernel_shapes
from polyfuse.schedule.fusion.scheduler import (
    DEFAULT_ISL_BUDGET,
    FUSION_POLICIES,
    BudgetExhausted,
    IslBudget,
    base_tree,
    user_tree,
)
from polyfuse.schedule.fusion.smart import Variant, apart_of, counted_microtiles, smart_by_traffic, unrated
from polyfuse.schedule.fusion.steps import one_thread_steps, source_order_one_thread
from polyfuse.schedule.mapping.block_reductions import block_reductions
from polyfuse.schedule.mapping.choices import parallel_choices
from polyfuse.schedule.mapping.kernels import Mapper, split
from polyfuse.schedule.mapping.row_staging import stage_rows
from polyfuse.schedule.mapping.rows import cooperative_rows
from polyfuse.schedule.mapping.vector_sums import vector_sum_candidate, vector_sums
from polyfuse.schedule.model import BASE_KEY, FOLD_KEY, ROWS_FUSED, Schedule
from polyfuse.schedule.movement.data_movement import data_movement
from polyfuse.schedule.pivots import split_pivots
from polyfuse.schedule.privatize import contract, temporaries
from polyfuse.schedule.row_buffers import row_buffers
from polyfuse.schedule.text import read_schedule
from polyfuse.schedule.tiling.cuda_microtile import cuda_candidate
from polyfuse.schedule.tiling.init_fold import fold_initialisations
from polyfuse.schedule.tiling.microtile import distribute_contractions
from polyfuse.schedule.tiling.sizes import validate_tile

TARGETS = ("c", "cuda")


@api_boundary
@progress.reported("scheduling")
def schedule(
    prog: Program,
    target: str = "c",
    fusion: str = "smart",
    tile="auto",
    params: Mapping[str, int] | None = None,
    schedule: isl.Schedule | isl.UnionMap | str | None = None,
    shared_memory: int = 49152,
    cache_bytes: int = 262144,
    isl_budget: int | None = DEFAULT_ISL_BUDGET,
    tile_search: TileSearch | None = None,
    reassociate: bool = True,
    parallel: Mapping[str, str | Sequence[str]] | None = None,
    threads: int | None = None,
) -> Schedule:
    """Schedule ``prog`` for ``target`` (``"c"`` or ``"cuda"``).

    ``fusion``: ``"none"`` (source order), ``"min"``, ``"max"``, or ``"smart"`` (maximal fusion that keeps
    the outer loops parallel, kept only where the traffic model says it does not lose bytes against minimal
    fusion; see ``smart.py``). ``tile``: ``"auto"`` (with every size in ``params``: chosen by
    the traffic model, ``cost/search.py``; otherwise the fixed defaults), ``None``, a tuple of sizes, or a
    dict statement -> tuple (see ``tiling.py``). ``params``: concrete sizes at which CUDA grid and block
    extents are computed. ``shared_memory`` (bytes per block, CUDA) and ``cache_bytes`` (per tile, C)
    bound the tile search. ``schedule``: an explicit schedule (an
    ``isl.Schedule``, an ``isl.UnionMap``, or its text), checked for legality and then tiled and mapped.
    Raises :class:`IllegalTransformError` for an explicit schedule that violates a dependence.
    ``isl_budget``: isl operations each call of isl's scheduler may take, and ``STAGE_FACTOR`` times as
    many each other stage (dependence analysis, one variant's band flags, mapping, tile search, legality
    and data movement, the traffic comparison); ``None``: unbounded. Past it the policy falls back
    (smart/max -> min -> source order -> the source order run sequentially, which needs no isl) with a
    :class:`PolyfuseWarning` and a note, so compile time is bounded for any program. An explicit
    ``schedule`` that runs out raises :class:`PolyfuseError` instead (it is never replaced silently).
    ``tile_search``: the :class:`TileSearch` to use for ``"auto"`` tiles (made here when ``None``); the
    autotuner passes its own to read the ranked candidates afterwards. ``reassociate``: whether float
    reductions may be reassociated and contracted (fused multiply-add, SIMD lanes and threads summing
    partial results); ``False`` keeps the source order of every operation exactly (see
    ``docs/architecture.md``, "Reductions and reassociation"). ``parallel``: statement -> iterator name (or
    names, outermost first) of the loop(s) to run in parallel in that statement's kernel: C's OpenMP loop
    (a second one is collapsed with it), CUDA's mapped dimensions. The kernel's band is reordered to start
    with them (tiled by the defaults, no micro-tile); a loop that carries a dependence, or one that is not
    a loop of the kernel's band, is an :class:`IllegalTransformError` naming it. ``threads`` (C): the
    threads the code will run on, where known; with ``1``, ``"smart"`` may give up parallel loops for
    locality (the loop nests of a time step fused row by row: ``fusion/steps.py``; the source order
    instead of a wavefront that only exposed a parallel loop: also ``fusion/steps.py``).
    """
    if target not in TARGETS:
        raise PolyfuseError(f"unknown target {target!r} for pf.schedule; expected one of {', '.join(TARGETS)}")
    if schedule is None and fusion not in FUSION_POLICIES:
        raise PolyfuseError(f"unknown fusion policy {fusion!r}; expected one of {', '.join(FUSION_POLICIES)}")
    if not isinstance(prog, Program):
        raise PolyfuseError(f"pf.schedule expects a pf.Program (a @pf.program function), got {type(prog).__name__}")
    unknown = sorted(set(params or {}) - set(prog.params))
    if unknown:
        raise PolyfuseError(f"params names sizes that {prog.name} does not have: {', '.join(unknown)}")
    check_params(prog, params)
    searched = params is not None  # (the tile search runs only where sizes were given: see below)
    if params is None and not prog.params:
        params = {}  # every size is known (a program built from concrete shapes): size-aware decisions apply
    validate_tile(tile, [s.name for s in prog.statements])
    parallel = parallel_choices(prog, parallel)
    _check_tile_depth(prog, tile)
    forwarded: tuple[str, ...] = ()
    if not parallel:  # (it names the user's statements and loops)
        candidate, notes_ = forward_accumulators(prog)  # acc = 0; acc += ...; C = acc  ->  C = 0; C += ...
        if schedule is None or _schedules_exactly(schedule, candidate):  # (an explicit one: what to_text printed)
            prog, forwarded = candidate, notes_
        if schedule is None:
            prog, split = split_pivots(prog)  # floyd-warshall's row and column k apart from the rest
            forwarded += split
    label = "explicit" if schedule is not None else fusion
    limits = Limits(shared_memory=shared_memory, cache_bytes=cache_bytes, threads=threads)
    search = None
    # (a program with concrete shapes and no params= keeps the default tiles: on the PyTorch encoder layer
    # the search's shapes for a scores kernel with no micro-tile measured 5 ms slower than 32-tiles)
    wants_search = searched and all(p in params for p in prog.params) and tile is not None
    budget = IslBudget(isl_budget)
    policy = fusion
    in_source_order = False  # (the one-thread rule took the source order: nothing left to fall back to)
    while True:
        try:
            with budget.stage("dependence analysis"):
                deps = dependences_of(prog)
        except BudgetExhausted as e:
            if schedule is not None:
                raise _explicit_over_budget(e) from None
            budget.fall_back(fusion, e, stage=True, instead="sequential")
            policy = "sequential"
        if policy == "sequential":
            best, notes = _sequential(prog, target, label, params, tile), []
            view = None
            break
        if wants_search and search is None:  # (after the dependences it reads)
            search = tile_search or TileSearch(prog, target, params, limits)  # shared by every variant: evaluations are cached
        try:
            variant = _best(prog, deps, policy, schedule, target, label, tile, params, search, limits, budget, parallel)
            best, notes = variant.schedule, list(variant.log)
            view = DepView(deps, temporaries(prog), prog.context.get_space(), True, _answers(prog, deps))
            if schedule is None and policy == "smart":
                one_thread = threads == 1 and target == "c" and not parallel
                best, more = _smart_by_traffic(prog, deps, variant, target, tile, params, search, limits, budget, parallel)
                notes += more
                if one_thread and params is not None:
                    best, more = one_thread_steps(prog, best, view, functools.partial(
                        _finish_schedule, prog, target=target, tile=tile, params=params, search=search, limits=limits), budget, params)
                    notes += more
                team = threads if threads is not None else (os.cpu_count() or 1)
                if target == "c" and not parallel and params is not None and (one_thread or team > 1):
                    chosen = best
                    # (with a team, the source order matters only where its kernels stay serial: the default tiles do)
                    searched_here = search if one_thread else None
                    best, more = source_order_one_thread(prog, best, lambda: _best(
                        prog, deps, "none", None, target, "smart", tile, params, searched_here, limits, budget, parallel).schedule,
                        budget, params, threads=team)
                    notes += more
                    in_source_order = best is not chosen
            break
        except BudgetExhausted as e:
            if schedule is not None:
                raise _explicit_over_budget(e) from None
            policy = budget.fall_back(policy, e, stage=True)
    notes = list(forwarded) + budget.notes + notes
    if policy != "sequential" and label != "none" and not in_source_order and _only_fine_grained(best, schedule):
        try:
            with budget.stage("the source order"):
                source = _best(prog, deps, "none", None, target, label, tile, params, search, limits, budget, parallel)
        except (BudgetExhausted, IllegalTransformError):
            source = None
        if source is not None:
            best = source.schedule
            notes.append("every kernel runs on one thread at these sizes (each parallel loop launch does too little work), "
                         "so the reordering that exposed that parallelism (e.g. a wavefront) would only cost locality: "
                         "the program runs in its source order")
    best, more, folded = _with_folds(best)  # C: contractions' initialisations into their tiles
    notes += more
    best, more = row_buffers(best)  # C: outputs rewritten in place keep their rows in per-thread buffers
    notes += more
    best = block_reductions(best, bool(reassociate))  # CUDA: reductions into one element shared by the threads
    best = vector_sums(best, bool(reassociate))  # CUDA: sums into a vector shared by many threads
    rows_fused = any(n.startswith(ROWS_FUSED) for n in notes)
    decide = functools.partial(decisions, prog, label, best.kernels, view, apart_of(best), kernel_shapes(best.tree, best.kernels),
                               rows_fused, folded) if view is not None else None  # on first explain()
    return _keep_base(best, decide=decide, notes=tuple(notes), reassociate=bool(reassociate))


def _only_fine_grained(sched: Schedule, explicit) -> bool:
    """C: whether no kernel of ``sched`` runs in parallel and some only because each launch is tiny
    (``Kernel.serial``): the parallelism the scheduler found is too fine-grained to use."""
    if sched.target != "c" or explicit is not None or not sched.kernels:
        return False
    return all(k.parallel_depth == 0 for k in sched.kernels) and any(k.serial for k in sched.kernels)


def _cuda_kernel_shape(shared_limit: int, prog: Program, stmt) -> bool:
    """Whether ``stmt`` gets a CUDA kernel shape of its own: a register micro-tile or a column reduction."""
    return cuda_candidate(prog, stmt, shared_limit) or vector_sum_candidate(prog, stmt)


def _map_and_check(prog, base, view, target, tile, params, search, microtiles: bool, cache_bytes: int | None = None,
                   parallel: Mapping[str, tuple[str, ...]] | None = None, shared_memory: int = 49152, threads: int | None = None):
    """Host/kernel split, tiling and mapping, contraction of temporaries, and the legality check."""
    mapper = Mapper(prog, target, tile, params, choose=search, microtiles=microtiles, cache_bytes=cache_bytes, parallel=parallel,
                    view=view, shared_memory=shared_memory, wavefronts=threads != 1 and not parallel)
    tree = split(base.get_root(), mapper).get_schedule()
    kernels = tuple(mapper.kernels)
    return _contract_and_check(prog, tree, kernels, view)


def _fold(prog, kernels, params, view, sched: Schedule) -> tuple[Schedule, list[str], dict[str, str]] | None:
    """``sched`` with its contractions' initialisations moved into their tiles (``tiling/init_fold.py``), the
    notes that say so and the moves (initialisation -> update), or ``None`` where nothing moves or the moved
    tree fails a legality check.

    Done on the schedule the policy chose, not on each candidate: the fusion policies compare kernels by
    the statements they group, and the move regroups one statement without changing what the comparison
    weighs (a pass over the initialised array, the same in every candidate that keeps the contraction)."""
    folded, infos, moves = fold_initialisations(prog, sched.tree, kernels, params)
    if not moves:
        return None
    try:
        tree, infos, privatized = _contract_and_check(prog, folded, infos, view)
    except IllegalTransformError:
        return None
    notes = [f"{m.init} (the initialisation of {m.update}) runs inside the tiles of {m.update}'s kernel, just before the "
             "micro-kernel reads the elements it sets (out of its own pass over the array: tiling/init_fold.py)" for m in moves]
    out = dataclasses.replace(sched, tree=tree, kernels=tuple(k.kernel for k in infos), contracted=frozenset(privatized))
    out._lazy.update({k: v for k, v in sched._lazy.items() if k != FOLD_KEY})  # (the base tree, smart's groups)
    return out, notes, {m.init: m.update for m in moves}


def _with_folds(sched: Schedule) -> tuple[Schedule, list[str], dict[str, str]]:
    """The chosen schedule with :func:`_fold` applied where it was prepared, its notes and its moves."""
    fold = sched._lazy.get(FOLD_KEY)
    done = fold(sched) if fold is not None else None
    return done if done is not None else (sched, [], {})


def _contract_and_check(prog, tree, kernels, view):
    """Contraction of temporaries, then the legality of the whole tree and of each parallel loop."""
    privatized = contract(prog, tree, kernels, view)
    check_schedule(prog, tree, privatized)
    for k in kernels:
        if k.thread is not None:
            check_parallel(prog, k.domain, k.outer, k.thread, privatized)
    return tree, kernels, privatized


def _schedules_exactly(spec, prog: Program) -> bool:
    """Whether the explicit schedule ``spec`` names exactly ``prog``'s statements (``to_text()`` of a
    schedule whose accumulators were forwarded names the forwarded program's); False when it cannot be
    read (the scheduler reports that)."""
    try:
        if isinstance(spec, str):
            spec = read_schedule(spec)
        if isinstance(spec, isl.Schedule):
            domain = spec.get_domain()
        elif isinstance(spec, (isl.UnionMap, isl.Map)):
            domain = isl.UnionMap(spec).domain() if isinstance(spec, isl.Map) else spec.domain()
        else:
            return False
    except (isl.Error, PolyfuseError):
        return False
    names: set[str] = set()
    domain.foreach_set(lambda s: names.add(s.get_tuple_name()))
    return names == {s.name for s in prog.statements}


def _keep_base(sched: Schedule, **changes) -> Schedule:
    """``dataclasses.replace`` that keeps the base tree ``sched.to_text()`` prints."""
    out = dataclasses.replace(sched, **changes)
    if BASE_KEY in sched._lazy:
        out._lazy[BASE_KEY] = sched._lazy[BASE_KEY]
    return out


def _check_tile_depth(prog: Program, tile) -> None:
    """Explicit tile sizes may not outnumber the loops of the deepest nest (a statement's sizes apply to
    the band of its kernel, which fusion may make deeper than the statement's own loops; a shallower band
    takes the leading sizes)."""
    if isinstance(tile, Mapping):
        given = [(t,) if isinstance(t, int) else tuple(t) for t in tile.values()]
    elif isinstance(tile, (tuple, list)):
        given = [tuple(tile)]
    else:
        return
    depth = {s.name: s.domain.dim(isl.dim_type.set) for s in prog.statements}
    deepest = max(depth, key=depth.get, default=None)
    for sizes in given:
        if deepest is not None and len(sizes) > depth[deepest]:
            raise PolyfuseError(f"tile={sizes!r} gives {len(sizes)} sizes, but the deepest loop nest of {prog.name} "
                                f"({deepest}) has {depth[deepest]} loop(s)")


def _explicit_over_budget(e: BudgetExhausted) -> PolyfuseError:
    return PolyfuseError(f"checking and mapping the explicit schedule: {e}; raise isl_budget= (--isl-budget; None/none: unbounded)")


def _answers(prog: Program, deps) -> dict:
    """The band questions' answers shared by every dependence view of ``prog`` over ``deps`` (see ``DepView``)."""
    held = prog._cache.get("dep_view_answers")
    if held is None or held[0] is not deps:  # (other dependences: other answers)
        held = prog._cache["dep_view_answers"] = (deps, {})
    return held[1]


def _sequential(prog: Program, target: str, label: str, params, tile) -> Schedule:
    """The last resort when isl runs out of budget even on the source order: the program as written, each
    top-level loop nest one sequential kernel, untiled. Legal by construction (it *is* the source order),
    so it needs neither dependences nor a legality check."""
    mapper = Mapper(prog, target, None, params)
    tree = split(prog.schedule.get_root(), mapper).get_schedule()
    return Schedule(program=prog, tree=tree, target=target, fusion=label, kernels=tuple(k.kernel for k in mapper.kernels),
                    params=dict(params or {}), tile=tile)


def _best(prog, deps, fusion, schedule, target, label, tile, params, search, limits, budget: IslBudget, parallel=None) -> Variant:
    """The first legal variant under one policy (see the module docstring), with its tile-search notes."""
    # (relax the temporaries' order in isl's constraints, relax it when flagging parallel loops)
    attempts = [(True, True), (False, True), (False, False)] if schedule is None and fusion != "none" else [(False, True), (False, False)]
    failures: list[IllegalTransformError] = []
    tried: list[tuple[isl.Schedule, frozenset[str]]] = []  # (base tree, view.relaxed): a variant equal to an earlier one is not finished again
    for relax_isl, relax_view in attempts:
        view = DepView(deps, temporaries(prog), prog.context.get_space(), relax_view, _answers(prog, deps))
        try:
            with budget.stage(f"scheduling under fusion={fusion!r}" if schedule is None else "the explicit schedule"):
                if schedule is not None:
                    base = user_tree(prog, schedule, view)
                else:
                    base = base_tree(prog, fusion, view, relax_isl=relax_isl, budget=budget)
                if any(relaxed == view.relaxed and (b is base or b.plain_is_equal(base)) for b, relaxed in tried):
                    continue  # (by value: the same tree may print differently once isl has simplified it)
                tried.append((base, view.relaxed))
                sched, log = _finish(prog, base, view, target, label, tile, params, search, limits, parallel)
        except IllegalTransformError as e:
            failures.append(e)
            continue
        return Variant(sched, tuple(log), base, view)
    if schedule is None and fusion != "none":
        # isl's tree under this policy broke a dependence after every relaxation (a bug of ours that
        # the legality check caught): the source order is legal by construction
        warn(f"{prog.name}: fusion={fusion!r} gave no legal schedule ({failures[-1]}); fell back to fusion='none'")
        return _best(prog, deps, "none", None, target, label, tile, params, search, limits, budget, parallel)
    raise failures[-1]


def _smart_by_traffic(prog, deps, fused: Variant, target, tile, params, search, limits, budget: IslBudget,
                      parallel=None) -> tuple[Schedule, list[str]]:
    """``fusion="smart"``, decided by bytes, kernel by kernel (``smart.py``), against minimal fusion."""
    try:
        unfused = _best(prog, deps, "min", None, target, "smart", tile, params, search, limits, budget, parallel)
    except IllegalTransformError:
        return fused.schedule, []
    except BudgetExhausted as e:
        return fused.schedule, [unrated(f"minimal fusion not scheduled ({e})")]

    def finish(base: isl.Schedule, view: DepView) -> Schedule:
        return _finish(prog, base, view, target, "smart", tile, params, search, limits, parallel)[0]

    chosen, notes = smart_by_traffic(prog, fused, unfused, finish, budget, params)
    if target == "c":  # a contraction is compute-bound: losing its register micro-tile costs more than bytes
        lost = counted_microtiles(unfused.schedule) - counted_microtiles(chosen)
        if lost > 0:  # (smart.py rates micro-tiles first: only where minimal fusion is less parallel)
            line = (f"fusion='smart': the fused schedule loses the register micro-tile of {lost} contraction(s) "
                    "that minimal fusion keeps (their time is arithmetic, not bytes): took minimal fusion")
            warn(line)  # never silently: the traffic model may rate it worse
            return unfused.schedule, notes + [line]
    return chosen, notes


def _finish_schedule(prog, base, view, target, tile, params, search, limits) -> Schedule:
    """``_finish`` of a ``"smart"`` variant, without its tile-search notes."""
    return _finish(prog, base, view, target, "smart", tile, params, search, limits)[0]


def _finish(prog, base, view, target, fusion, tile, params, search, limits, parallel=None) -> tuple[Schedule, list[str]]:
    if search is not None:
        search.log = []
    mapped = None
    if fusion == "explicit":
        # the user's schedule is checked as given first (an illegal one is never reshaped into a legal one)
        mapped = _map_and_check(prog, base, view, target, tile, params, search, False, parallel=parallel)
    if target == "c":  # C kernel shapes, kept only where the whole tree stays legal
        try:
            mapped = _map_and_check(prog, distribute_contractions(prog, base, view), view, target, tile, params, search, True,
                                    limits.cache_bytes, parallel=parallel, threads=limits.threads)
        except IllegalTransformError:
            pass
    if target == "cuda" and tile == "auto" and not parallel:  # register micro-tiles (tiling/cuda_microtile.py)
        try:
            shaped = distribute_contractions(prog, base, view, functools.partial(_cuda_kernel_shape, limits.shared_memory),
                                             several=vector_sum_candidate)
            mapped = _map_and_check(prog, shaped, view, target, tile, params, search, True, parallel=parallel,
                                    shared_memory=limits.shared_memory)
        except IllegalTransformError:
            pass
    if mapped is None:
        mapped = _map_and_check(prog, base, view, target, tile, params, search, False, parallel=parallel, threads=limits.threads)
    tree, kernels, privatized = mapped
    if target == "cuda":  # one block per row where rows reduce into per-row values (checked inside)
        tree, kernels, privatized = cooperative_rows(prog, tree, kernels, privatized, view, params)
    final = tuple(k.kernel for k in kernels)
    promotion = None
    if target == "cuda" and limits.shared_memory > 0:
        tree, final, promotion = data_movement(prog, tree, final, privatized, limits.shared_memory, params)
        tree, final, promotion = stage_rows(prog, tree, final, promotion, frozenset(privatized), limits.shared_memory, params)
    finished = Schedule(
        program=prog,
        tree=tree,
        target=target,
        fusion=fusion,
        kernels=final,
        promotion=promotion,
        contracted=frozenset(privatized),
        params=dict(params or {}),
        tile=tile,
    )
    finished._lazy[BASE_KEY] = base  # the order before tiling and mapping, for sched.to_text()
    if target == "c" and any(k.kernel.tile_sizes for k in kernels):  # (done on the schedule chosen: _with_folds)
        finished._lazy[FOLD_KEY] = functools.partial(_fold, prog, kernels, params, view)
    return finished, (list(search.log) if search is not None else [])
