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
from collections.abc import Mapping

import islpy as isl

from polyfuse.analysis.legality import check_parallel, check_schedule
from polyfuse.errors import IllegalTransformError, PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView
from polyfuse.schedule.deps import dependences_of
from polyfuse.schedule.explain import decisions
from polyfuse.schedule.mapping import Mapper, split
from polyfuse.schedule.model import Schedule
from polyfuse.schedule.privatize import contract, temporaries
from polyfuse.schedule.scheduler import FUSION_POLICIES, base_tree, user_tree
from polyfuse.schedule.tiling import validate_tile

TARGETS = ("c", "cuda")


def schedule(
    prog: Program,
    target: str = "c",
    fusion: str = "smart",
    tile="auto",
    params: Mapping[str, int] | None = None,
    schedule: isl.Schedule | isl.UnionMap | str | None = None,
) -> Schedule:
    """Schedule ``prog`` for ``target`` (``"c"`` or ``"cuda"``).

    ``fusion``: ``"none"`` (source order), ``"min"``, ``"max"``, or ``"smart"`` (for now: maximal fusion
    that keeps the outer loops parallel; a traffic model will decide by bytes later). ``tile``: ``"auto"``,
    ``None``, a tuple of sizes, or a dict statement -> tuple (see ``tiling.py``). ``params``: concrete
    sizes at which CUDA grid and block extents are computed. ``schedule``: an explicit schedule (an
    ``isl.Schedule``, an ``isl.UnionMap``, or its text), checked for legality and then tiled and mapped.
    Raises :class:`IllegalTransformError` for an explicit schedule that violates a dependence.
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
    # (relax the temporaries' order in isl's constraints, relax it when flagging parallel loops)
    attempts = [(True, True), (False, True), (False, False)] if schedule is None and fusion != "none" else [(False, True), (False, False)]
    done: list[tuple[tuple[int, ...], Schedule]] = []
    failures: list[IllegalTransformError] = []
    for n, (relax_isl, relax_view) in enumerate(attempts):
        view = DepView(deps, temporaries(prog), prog.context.get_space(), relax_view)
        try:
            if schedule is not None:
                base = user_tree(prog, schedule, view)
            else:
                base = base_tree(prog, fusion, view, relax_isl=relax_isl)
            sched = _finish(prog, base, view, target, label, tile, params)
        except IllegalTransformError as e:
            failures.append(e)
            continue
        sequential = sum(1 for k in sched.kernels if k.parallel_depth == 0)
        key = (len(sched.kernels), sequential, n) if fusion == "max" else (sequential, len(sched.kernels), n)
        done.append((key, sched))
    if not done:
        raise failures[-1]
    best = min(done, key=lambda ks: ks[0])[1]
    view = DepView(deps, temporaries(prog), prog.context.get_space(), True)
    return dataclasses.replace(best, decisions=decisions(prog, label, best.kernels, view))


def _finish(prog, base, view, target, fusion, tile, params) -> Schedule:
    mapper = Mapper(prog, target, tile, params)
    tree = split(base.get_root(), mapper).get_schedule()
    kernels = tuple(mapper.kernels)
    privatized = contract(prog, tree, kernels, view)
    check_schedule(prog, tree, privatized)
    for k in kernels:
        if k.thread is not None:
            check_parallel(prog, k.domain, k.outer, k.thread, privatized)
    return Schedule(
        program=prog,
        tree=tree,
        target=target,
        fusion=fusion,
        kernels=tuple(k.kernel for k in kernels),
        contracted=frozenset(privatized),
        params=dict(params or {}),
        tile=tile,
    )
