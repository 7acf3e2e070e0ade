"""Whole-program scheduling: ``pf.schedule(prog, ...) -> Schedule`` (see ``model.py`` for the tree
conventions the code generators rely on).

The stages, each in its own module: dependences (``deps.py``) -> base tree under the fusion policy or the
explicit schedule (``scheduler.py``) -> host/kernel split, tiling and mapping (``mapping.py``,
``tiling.py``) -> contraction of temporaries (``privatize.py``) -> legality check
(``analysis/legality.py``, on every schedule) -> fusion decisions (``explain.py``).

Several variants are built and the legal ones compared: with live-range reordering (temporaries'
anti/output dependences relaxed where their values stay local, in isl's constraints and when flagging
parallel loops), without it in isl's constraints only, and with every dependence a hard constraint. A
variant that would need a temporary privatised that cannot be contracted fails the legality check and is
dropped. The winner has the fewest sequential kernels, then the fewest kernels (``"max"``: the fewest
kernels first).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import islpy as isl

from polyfuse.analysis.legality import check_parallel, check_schedule
from polyfuse.cost.search import Limits, TileSearch  # noqa: E402 (cost/ builds on the modules above)
from polyfuse.cost.traffic import program_traffic  # noqa: E402
from polyfuse.errors import IllegalTransformError, PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.explain import decisions
from polyfuse.schedule.mapping import Mapper, split
from polyfuse.schedule.model import Schedule
from polyfuse.schedule.movement import data_movement
from polyfuse.schedule.privatize import contract, temporaries
from polyfuse.schedule.scheduler import DEFAULT_ISL_BUDGET, FUSION_POLICIES, IslBudget, base_tree, user_tree
from polyfuse.schedule.tiling import validate_tile

TARGETS = ("c", "cuda")


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
) -> Schedule:
    """Schedule ``prog`` for ``target`` (``"c"`` or ``"cuda"``).

    ``fusion``: ``"none"`` (source order), ``"min"``, ``"max"``, or ``"smart"`` (maximal fusion that keeps
    the outer loops parallel, kept only where the traffic model says it does not lose bytes against minimal
    fusion; see :func:`_smart_by_traffic`). ``tile``: ``"auto"`` (with every size in ``params``: chosen by
    the traffic model, ``cost/search.py``; otherwise the fixed defaults), ``None``, a tuple of sizes, or a
    dict statement -> tuple (see ``tiling.py``). ``params``: concrete sizes at which CUDA grid and block
    extents are computed. ``shared_memory`` (bytes per block, CUDA) and ``cache_bytes`` (per tile, C)
    bound the tile search. ``schedule``: an explicit schedule (an
    ``isl.Schedule``, an ``isl.UnionMap``, or its text), checked for legality and then tiled and mapped.
    Raises :class:`IllegalTransformError` for an explicit schedule that violates a dependence.
    ``isl_budget``: isl operations each call of isl's scheduler may take (``None``: unbounded); past it
    the policy falls back (smart/max -> min -> source order) with a :class:`PolyfuseWarning` and a note.
    ``tile_search``: the :class:`TileSearch` to use for ``"auto"`` tiles (made here when ``None``); the
    autotuner passes its own to read the ranked candidates afterwards.
    """
    if target not in TARGETS:
        raise PolyfuseError(f"unknown target {target!r} for pf.schedule; expected one of {', '.join(TARGETS)}")
    if schedule is None and fusion not in FUSION_POLICIES:
        raise PolyfuseError(f"unknown fusion policy {fusion!r}; expected one of {', '.join(FUSION_POLICIES)}")
    unknown = sorted(set(params or {}) - set(prog.params))
    if unknown:
        raise PolyfuseError(f"params names sizes that {prog.name} does not have: {', '.join(unknown)}")
    validate_tile(tile, [s.name for s in prog.statements])
    deps = dependences_of(prog)
    label = "explicit" if schedule is not None else fusion
    limits = Limits(shared_memory=shared_memory, cache_bytes=cache_bytes)
    search = None
    if params is not None and all(p in params for p in prog.params) and tile is not None:
        search = tile_search or TileSearch(prog, target, params, limits)  # shared by every variant: evaluations are cached
    budget = IslBudget(isl_budget)
    best, notes = _best(prog, deps, fusion, schedule, target, label, tile, params, search, limits, budget)
    if schedule is None and fusion == "smart":
        best, more = _smart_by_traffic(prog, deps, best, target, tile, params, search, limits, budget)
        notes += more
    notes = budget.notes + notes
    view = DepView(deps, temporaries(prog), prog.context.get_space(), True)
    decide = functools.partial(decisions, prog, label, best.kernels, view)  # on first explain(): see Schedule
    return dataclasses.replace(best, decide=decide, notes=tuple(notes))


def _best(prog, deps, fusion, schedule, target, label, tile, params, search, limits, budget=None) -> tuple[Schedule, list[str]]:
    """The best legal variant under one policy (see the module docstring) and its tile-search notes."""
    # (relax the temporaries' order in isl's constraints, relax it when flagging parallel loops)
    attempts = [(True, True), (False, True), (False, False)] if schedule is None and fusion != "none" else [(False, True), (False, False)]
    done: list[tuple[tuple[int, ...], Schedule, list[str]]] = []
    failures: list[IllegalTransformError] = []
    for n, (relax_isl, relax_view) in enumerate(attempts):
        view = DepView(deps, temporaries(prog), prog.context.get_space(), relax_view)
        try:
            if schedule is not None:
                base = user_tree(prog, schedule, view)
            else:
                base = base_tree(prog, fusion, view, relax_isl=relax_isl, budget=budget)
            sched, log = _finish(prog, base, view, target, label, tile, params, search, limits)
        except IllegalTransformError as e:
            failures.append(e)
            continue
        sequential = sum(1 for k in sched.kernels if k.parallel_depth == 0)
        key = (len(sched.kernels), sequential, n) if fusion == "max" else (sequential, len(sched.kernels), n)
        done.append((key, sched, log))
    if not done:
        raise failures[-1]
    _, best, log = min(done, key=lambda ks: ks[0])
    return best, list(log)


REPRESENTATIVE_SIZE = 1024
"""The size given to every param without a value when ``fusion="smart"`` compares traffic."""


def _smart_by_traffic(prog, deps, fused, target, tile, params, search, limits, budget=None) -> tuple[Schedule, list[str]]:
    """``fusion="smart"``, decided by bytes: the parallelism-keeping maximal fusion (isl's clustering)
    against minimal fusion (one loop nest per strongly connected component), compared as whole programs
    by modelled traffic at ``params`` (missing sizes: :data:`REPRESENTATIVE_SIZE`). The fused schedule is
    kept unless the unfused one moves fewer bytes without being less parallel."""
    try:
        unfused, _ = _best(prog, deps, "min", None, target, "smart", tile, params, search, limits, budget)
    except IllegalTransformError:
        return fused, []
    if [k.statements for k in unfused.kernels] == [k.statements for k in fused.kernels]:
        return fused, []
    seq_f = sum(1 for k in fused.kernels if k.parallel_depth == 0)
    seq_u = sum(1 for k in unfused.kernels if k.parallel_depth == 0)
    if seq_u > seq_f:
        return fused, ["fusion='smart': minimal fusion would be less parallel; kept the fused schedule"]
    sizes = {p: int((params or {}).get(p, REPRESENTATIVE_SIZE)) for p in prog.params}
    at = ", ".join(f"{k}={v}" for k, v in sizes.items())
    if any(p not in (params or {}) for p in prog.params):
        at += " (representative sizes: no params given)"
    try:
        tf = program_traffic(prog, fused.tree, fused.kernels, fused.contracted, sizes).total_bytes
        tu = program_traffic(prog, unfused.tree, unfused.kernels, unfused.contracted, sizes).total_bytes
    except PolyfuseError as e:
        return fused, [f"fusion='smart': traffic not compared ({e}); kept the fused schedule"]
    keep = tf <= tu
    verdict = "kept the fused schedule" if keep else "fusion loses: kept the unfused schedule"
    note = (f"fusion='smart' by traffic at {at}: fused ({len(fused.kernels)} kernel(s)) {tf} B vs unfused "
            f"({len(unfused.kernels)} kernel(s)) {tu} B: {verdict}")
    return (fused if keep else dataclasses.replace(unfused, fusion="smart")), [note]


def _finish(prog, base, view, target, fusion, tile, params, search, limits) -> tuple[Schedule, list[str]]:
    if search is not None:
        search.log = []
    mapper = Mapper(prog, target, tile, params, choose=search)
    tree = split(base.get_root(), mapper).get_schedule()
    kernels = tuple(mapper.kernels)
    privatized = contract(prog, tree, kernels, view)
    check_schedule(prog, tree, privatized)
    for k in kernels:
        if k.thread is not None:
            check_parallel(prog, k.domain, k.outer, k.thread, privatized)
    final = tuple(k.kernel for k in kernels)
    promotion = None
    if target == "cuda" and limits.shared_memory > 0:
        tree, final, promotion = data_movement(prog, tree, final, privatized, limits.shared_memory, params)
    return Schedule(
        program=prog,
        tree=tree,
        target=target,
        fusion=fusion,
        kernels=final,
        promotion=promotion,
        contracted=frozenset(privatized),
        params=dict(params or {}),
        tile=tile,
    ), (list(search.log) if search is not None else [])
