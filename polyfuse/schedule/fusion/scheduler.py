"""The base schedule tree of a program under a fusion policy, or from a user's explicit schedule.

Policies (isl's scheduler, options set on ``isl.DEFAULT_CONTEXT`` for one call and restored):

* ``"none"``: the source-order tree (``prog.schedule``), unchanged;
* ``"min"``: isl with ``schedule_serialize_sccs=1``: every strongly connected component of the
  dependence graph gets its own loop nest (minimal fusion);
* ``"max"``: isl with ``schedule_whole_component=1``: each connected component is scheduled as a whole,
  fusing everything that can be fused (with shifts), even at the cost of outer parallelism;
* ``"smart"``: maximal fusion that keeps parallelism: isl's incremental clustering
  (``schedule_whole_component=0``) with ``schedule_outer_coincidence=1`` and
  ``schedule_maximize_coincidence=1``: clusters are merged only while the outer band stays parallel. A later traffic model will make ``"smart"`` decide by bytes moved.
  Where that leaves several kernels, isl's whole-component schedule with a parallel outer loop is tried
  too and kept when it gives fewer kernels and no more sequential ones (row reductions fused with their
  consumers: see ``_whole_if_fewer_kernels``).

With ``privatize=True`` the temporaries' anti and output dependences become *conditional* validity
constraints (isl's live-range reordering, as PPCG does): they may be violated where the flow dependences
of the same temporary are local, which is legal once each iteration gets a private copy.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import islpy as isl

from polyfuse import progress
from polyfuse.analysis.legality import padded_schedule_map
from polyfuse.errors import PolyfuseError, PolyfuseWarning, user_stacklevel
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import QUOTA_MESSAGE, DepView, T, annotate, isl_options, over_quota
from polyfuse.schedule.fusion.lifting import lift, lower
from polyfuse.schedule.mapping.kernels import split
from polyfuse.schedule.text import read_schedule

FUSION_POLICIES = ("none", "min", "max", "smart")

_OPTIONS = {
    "min": dict(schedule_serialize_sccs=1, schedule_whole_component=0, schedule_outer_coincidence=0),
    "max": dict(schedule_serialize_sccs=0, schedule_whole_component=1, schedule_outer_coincidence=0,
                schedule_maximize_coincidence=0),
    "smart": dict(schedule_serialize_sccs=0, schedule_whole_component=0, schedule_outer_coincidence=1,
                  schedule_maximize_coincidence=1),
}
_WHOLE_OUTER = dict(schedule_serialize_sccs=0, schedule_whole_component=1, schedule_outer_coincidence=1,
                    schedule_maximize_coincidence=1)  # "smart"'s second candidate (see _whole_if_fewer_kernels)


def base_tree(
    prog: Program, fusion: str, view: DepView, domain: isl.UnionSet | None = None, relax_isl: bool = True,
    budget: IslBudget | None = None,
) -> isl.Schedule:
    """The annotated schedule tree of ``prog`` (or of the statements in ``domain``) under ``fusion``;
    under a less ambitious policy when isl's scheduler runs out of ``budget`` (see :class:`IslBudget`)."""
    if fusion not in FUSION_POLICIES:
        raise PolyfuseError(f"unknown fusion policy {fusion!r}; expected one of {', '.join(FUSION_POLICIES)}")
    budget = budget if budget is not None else IslBudget()
    tree = None
    while fusion != "none" and tree is None:
        try:
            tree = isl_tree(prog, fusion, view, domain, relax_isl, budget)
        except NoIslSchedule as e:
            fusion = budget.fall_back(fusion, e)
    if tree is None:
        tree = prog.schedule if domain is None else prog.schedule.intersect_domain(domain)
    return annotated(prog, tree, view)


DEFAULT_ISL_BUDGET = 5_000_000
"""isl operations one call of isl's scheduler may take (``isl_ctx_set_max_operations``) before polyfuse
gives up on it and falls back to a less ambitious policy (see :class:`IslBudget`)."""

STAGE_FACTOR = 2
"""A pipeline stage (dependence analysis; one variant's band flags, mapping, tile search, contraction,
legality check and data movement; the traffic comparison of ``"smart"``) may take this many times the
scheduler's budget of isl operations (see :meth:`IslBudget.stage`)."""

FALLBACK = {"smart": "min", "max": "min", "min": "none", "none": "sequential"}
"""The policy tried when isl gives no schedule under a policy. ``"none"`` is the source order with its
loops analysed for parallelism; ``"sequential"``, the last resort, is the source order run as it is
written, which needs no isl analysis at all (see ``pf.schedule``)."""



class NoIslSchedule(Exception):
    """isl's scheduler gave no schedule (internal: :func:`base_tree` falls back to a lesser policy)."""


class BudgetExhausted(NoIslSchedule):
    """isl's scheduler ran out of its operation budget."""


class SchedulerFailed(NoIslSchedule):
    """isl's scheduler failed, e.g. "unable to carry dependences" on some quasi-affine dependences."""


@dataclass
class IslBudget:
    """The operation budget of each isl scheduler call (``None`` or 0: unbounded), and the fallbacks taken.

    A call that runs out (isl fails with ``isl_error_quota``) is abandoned and the policy degrades along
    :data:`FALLBACK` (smart/max -> min -> source order), with a :class:`PolyfuseWarning` and a note that
    ``pf.schedule`` puts in ``Schedule.notes``. Compile time is therefore bounded for any program.
    """

    operations: int | None = DEFAULT_ISL_BUDGET
    notes: list[str] = field(default_factory=list)
    _solved: dict[tuple, isl.Schedule | NoIslSchedule] = field(default_factory=dict, repr=False)

    def compute(self, sc: isl.ScheduleConstraints, options: dict[str, int]) -> isl.Schedule:
        """``sc.compute_schedule()`` under ``options`` and the budget; raises :class:`BudgetExhausted` or
        :class:`SchedulerFailed`. Each problem is solved once per budget (one ``pf.schedule`` call): the
        variants often pose the same constraints under different names (``"smart"``'s whole-component
        candidate with and without relaxed temporaries when there is nothing to relax: a third of
        deriche's scheduler time)."""
        key = (sc.to_str(), tuple(sorted(options.items())), self.operations)
        if key not in self._solved:
            try:
                self._solved[key] = self._compute(sc, options)
            except NoIslSchedule as e:
                self._solved[key] = e
        found = self._solved[key]
        if isinstance(found, NoIslSchedule):
            raise type(found)(*found.args)
        return found

    def _compute(self, sc: isl.ScheduleConstraints, options: dict[str, int]) -> isl.Schedule:
        ctx = isl.DEFAULT_CONTEXT
        saved = ctx.get_max_operations()
        ctx.set_max_operations(self.operations or 0)
        ctx.reset_operations()
        try:
            with isl_options(**options):
                return sc.compute_schedule()
        except isl.Error as e:
            if QUOTA_MESSAGE in str(e):
                raise BudgetExhausted(f"it ran out of its budget (isl_budget={self.operations} operations)") from None
            raise SchedulerFailed(f"it failed ({str(e).split(' in /')[0].split('failed: ')[-1]})") from None
        finally:
            ctx.set_max_operations(saved)
            ctx.reset_operations()

    @property
    def stage_operations(self) -> int:
        """isl operations one pipeline stage may take (0: unbounded)."""
        return int((self.operations or 0) * STAGE_FACTOR)

    @contextmanager
    def stage(self, what: str) -> Iterator[None]:
        """Run one pipeline stage (``what`` names it in messages) under :attr:`stage_operations`.

        isl's operation counter is per context and has no getter, so a stage starts a fresh count and
        leaves a fresh count to the stage around it: each stage is bounded, and a compilation runs a
        bounded number of stages. An isl call past the limit fails; the stage raises
        :class:`BudgetExhausted` for it (whatever the code in between made of the failure).
        """
        progress.step(f"{what} (isl budget: {self.stage_operations or 'unbounded'} operations)")
        ctx = isl.DEFAULT_CONTEXT
        saved = ctx.get_max_operations()
        ctx.set_max_operations(self.stage_operations)
        ctx.reset_operations()
        try:
            yield
        except BudgetExhausted:
            raise
        except Exception as e:
            if self.stage_operations and over_quota(e):
                raise BudgetExhausted(
                    f"{what} ran out of its budget ({self.stage_operations} isl operations: {STAGE_FACTOR} x isl_budget={self.operations})"
                ) from None
            raise
        finally:
            ctx.set_max_operations(saved)
            ctx.reset_operations()

    def fall_back(self, fusion: str, why: NoIslSchedule, stage: bool = False, instead: str | None = None) -> str:
        """Record (warn and note) that isl gave no schedule under ``fusion`` (``stage``: that a pipeline
        stage, which ``why`` names, ran out); the policy to try instead (``instead`` if given)."""
        instead = instead or FALLBACK[fusion]
        what = {"none": "source order", "sequential": "the source order, run sequentially"}.get(instead, f"fusion={instead!r}")
        head = str(why) if stage else f"isl's scheduler gave no schedule under fusion={fusion!r}: {why}"
        note = f"{head}; fell back to {what}"
        if isinstance(why, BudgetExhausted):
            note += " (raise isl_budget=, or --isl-budget on the command line, to allow more; None/none: unbounded)"
        if note not in self.notes:
            self.notes.append(note)
            warnings.warn(note, PolyfuseWarning, stacklevel=user_stacklevel())  # at the user's call
        return instead


def isl_tree(
    prog: Program, fusion: str, view: DepView, domain: isl.UnionSet | None = None, relax: bool = True,
    budget: IslBudget | None = None,
) -> isl.Schedule:
    budget = budget if budget is not None else IslBudget()
    trees = prog._cache.setdefault("isl_trees", {})
    key = _tree_key(fusion, view, domain, relax, budget)
    if key in trees:
        return trees[key]
    dom = prog.domains if domain is None else domain
    flow = view.union(("flow",))
    annotate_view = view
    if not relax:
        view = DepView(view.deps, view.temps, view.space, privatize=False)
    temp_order = detached(view.union(("anti", "output"), arrays=view.temps))
    validity = detached(flow.union(view.union(("anti", "output"), exclude=view.temps)))
    sc = isl.ScheduleConstraints.on_domain(dom)
    sc = sc.set_validity(validity).set_proximity(detached(flow)).set_coincidence(validity)
    if view.privatize and not temp_order.is_empty():
        sc = sc.set_conditional_validity(detached(view.union(("flow",), arrays=view.temps)), temp_order)
    try:
        tree = budget.compute(sc.set_context(prog.context), _OPTIONS[fusion])
        sc = sc.set_context(prog.context)
    except SchedulerFailed:
        # Given the context, isl can fail to carry quasi-affine dependences it carries without it
        # ("unable to carry dependences": `A[N-1-i, i%3] = A[i%3, i+1]` with N >= 2). The dependences
        # already hold the context's constraints, so scheduling without it is as sound.
        tree = budget.compute(sc, _OPTIONS[fusion])
    if fusion == "smart":
        tree = _whole_if_fewer_kernels(prog, sc, tree, annotate_view, budget)
    trees[key] = tree
    return tree


def detached(relation: isl.UnionMap) -> isl.UnionMap:
    """``relation`` for isl's schedule constraints, its maps with integer divisions copied (adding the
    constraint ``0 >= 0`` makes isl copy each basic map it shares). Handed the union of a pair's flow, anti
    and output dependences as they were, ``set_validity`` changed what the dependence maps themselves
    mean: afterwards the anti dependence of ``tests/regressions/test_fuzz_dcf393d737.py`` held pairs it did
    not (its ``mod 3`` constraints gone, while the constraints isl kept had them), and the legality check
    then rejected every ``fusion='min'`` tree for a dependence that does not exist. The dependences are
    computed once per program and read by every later pass, so isl's scheduler must not share them. Maps
    without divisions go as they are: nothing was seen to change in them (the dependences of the 30
    PolyBench-style kernels keep their meaning through smart, min and max scheduling), and copying them
    changes the representation isl's solver gets (deriche: 9 % more scheduler time)."""
    maps: list[isl.Map] = []
    relation.foreach_map(maps.append)
    copied = [m.add_constraint(isl.Constraint.alloc_inequality(isl.LocalSpace.from_space(m.get_space())))  # 0 >= 0
              if _has_divs(m) else m for m in maps]
    if all(c is m for c, m in zip(copied, maps)):
        return relation
    out = isl.UnionMap.empty(relation.get_space())
    for m in copied:
        out = out.union(isl.UnionMap.from_map(m))
    return out


def _has_divs(m: isl.Map) -> bool:
    """Whether some basic map of ``m`` has an integer division (a ``mod`` or ``floor``)."""
    return any(b.dim(isl.dim_type.div) for b in m.get_basic_maps())


def _tree_key(fusion: str, view: DepView, domain: isl.UnionSet | None, relax: bool, budget: IslBudget) -> tuple:
    """What :func:`isl_tree` computes from: the variants of ``pf.schedule`` (and ``"smart"``'s comparison
    with ``"min"``) often pose isl the same problem (e.g. with no temporaries, privatisation changes
    nothing), which is then solved once per program."""
    relaxed = view.temps if relax and view.privatize else frozenset()
    if not any(d.kind != "flow" and d.array in relaxed for d in view.deps):
        relaxed = frozenset()  # no conditional validity constraints: the same problem as without relaxing
    names = tuple((d.kind, d.source, d.sink, d.array, d.array in relaxed) for d in view.deps)
    counted = view.temps if fusion == "smart" else None  # the kernel count of _whole_if_fewer_kernels
    return (fusion, None if domain is None else domain.to_str(), names, counted, budget.operations)


def _whole_if_fewer_kernels(prog: Program, sc: isl.ScheduleConstraints, tree: isl.Schedule, view: DepView,
                            budget: IslBudget | None = None) -> isl.Schedule:
    """``"smart"``: isl's whole-component schedule with a parallel outer loop instead of ``tree`` (from
    incremental clustering) when it gives no more sequential kernels and fewer kernels.

    Clustering refuses to merge clusters when the merged band has fewer coincident members than either
    cluster: a row reduction (``i`` parallel, ``j`` sequential) is kept apart from an elementwise nest over
    the same rows (``i`` and ``j`` parallel). Whole-component scheduling with ``schedule_outer_coincidence``
    fuses them under the parallel ``i`` -- ``for i (parallel) { for j: max; for j: exp, sum; for j: div }``
    -- so softmax and layernorm become one kernel reading each row once from memory.
    """
    clustered = _kernel_count(prog, tree, view)
    if clustered[1] <= 1:
        return tree
    budget = budget if budget is not None else IslBudget()
    lifted = lift(sc) if not prog.params else None  # concrete sizes: solved symbolically (``lifting.py``)
    try:
        if lifted is not None:
            found = lower(budget.compute(lifted, _WHOLE_OUTER), sc.get_domain())
            if found is None:
                return tree
            whole = found
        else:
            whole = budget.compute(sc, _WHOLE_OUTER)
    except (BudgetExhausted, SchedulerFailed):  # the clustered schedule stands
        return tree
    return whole if _kernel_count(prog, whole, view) < clustered else tree


def annotated(prog: Program, tree: isl.Schedule, view: DepView) -> isl.Schedule:
    """``tree`` with its band flags set (``bands.annotate``), computed once per tree and dependence view
    of ``prog``: the variants of ``pf.schedule``, ``"smart"``'s kernel count and its comparison with
    ``"min"`` ask for the same trees (the flags cost many isl subset tests each)."""
    memo = prog._cache.setdefault("annotated_trees", {})
    same = prog._cache.setdefault("annotated_objects", {})  # id(tree) -> (tree, view key, annotated)
    view_key = (view.relaxed, tuple(id(d) for d in view.deps))
    held = same.get(id(tree))
    if held is not None and held[0] is tree and held[1] == view_key:
        return held[2]
    # (isl simplifies a tree's domain in place when it is worked on, so the same tree may print
    # differently the second time: the object itself is the first key, its text the second)
    key = (tree.to_str(), *view_key)
    if key not in memo:
        memo[key] = annotate(tree.get_root(), view).get_schedule()
    same[id(tree)] = (tree, view_key, memo[key])
    return memo[key]


def _kernel_count(prog: Program, tree: isl.Schedule, view: DepView) -> tuple[int, int]:
    """(sequential kernels, kernels) that :func:`~polyfuse.schedule.mapping.kernels.split` makes of ``tree``."""
    parallel: list[bool] = []

    def record(node: isl.ScheduleNode) -> isl.ScheduleNode:
        parallel.append(node.get_type() == T.band and bool(node.band_member_get_coincident(0)))
        return node

    split(annotated(prog, tree, view).get_root(), record)
    return (parallel.count(False), len(parallel))


def user_tree(prog: Program, spec, view: DepView) -> isl.Schedule:
    """The annotated tree of an explicit schedule: an ``isl.Schedule``, an ``isl.UnionMap`` / ``isl.Map``,
    or a string holding either (a schedule tree as ``sched.to_text()`` prints it, or a union map such as
    ``"[N] -> { S0[i] -> [i, 0]; S1[i] -> [i, 1] }"``)."""
    if isinstance(spec, str):
        spec = read_schedule(spec)  # a tree (sched.to_text()) or a union map
    if isinstance(spec, isl.Map):
        spec = isl.UnionMap.from_map(spec)
    if isinstance(spec, isl.Schedule):
        tree = spec.intersect_domain(prog.domains)
    elif isinstance(spec, isl.UnionMap):
        tree = _tree_from_map(prog, spec)
    else:
        raise PolyfuseError(f"schedule= takes an isl.Schedule, an isl.UnionMap or a string, not {type(spec).__name__}")
    return annotate(tree.get_root(), view).get_schedule()


def _tree_from_map(prog: Program, umap: isl.UnionMap) -> isl.Schedule:
    names = {s.name for s in prog.statements}
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    unknown = sorted({m.get_tuple_name(isl.dim_type.in_) for m in maps} - names)
    if unknown:
        raise PolyfuseError(f"the schedule names statements that {prog.name} does not have: {', '.join(unknown)}")
    umap = padded_schedule_map(umap.intersect_domain(prog.domains))
    missing = prog.domains.subtract(umap.domain())
    if not missing.is_empty():
        raise PolyfuseError(f"the schedule does not cover every instance of {prog.name}: {missing}")
    if not umap.is_single_valued():
        raise PolyfuseError("the schedule must map each statement instance to a single time")
    mupa = isl.MultiUnionPwAff.from_union_map(umap)
    tree = isl.Schedule.from_domain(prog.domains)
    if mupa.dim(isl.dim_type.set) == 0:
        return tree
    node = tree.get_root().child(0).insert_partial_schedule(mupa)
    # One band per member; annotate() merges back the permutable runs.
    while node.band_n_member() > 1:
        node = node.band_split(1).child(0)
    return node.get_schedule()
