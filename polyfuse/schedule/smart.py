"""``fusion="smart"``: keep a fusion only where the traffic model says it does not lose bytes.

The two candidates come from isl (``scheduler.py``): the parallelism-keeping maximal fusion (``fused``,
isl's incremental clustering) and minimal fusion (``unfused``, one loop nest per strongly connected
component). The decision is taken **per fused kernel**, not for the whole program: each kernel of the fused
schedule whose statements are exactly those of several unfused kernels is compared, in modelled bytes at
the schedule's sizes, with those kernels together. Where they move fewer bytes (and are no less parallel)
the fused kernel is *distributed*: its band is copied under a sequence of filters, one per unfused kernel,
in the unfused order, which is loop distribution of that kernel alone; the rest of the fused schedule is
left as it is. The result is mapped and checked for legality like any other variant (``finish``); should
the mixed schedule be illegal or move more bytes than the fused one, the fused schedule stands.

Every comparison is written to the notes, which ``explain()`` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import islpy as isl

from polyfuse.cost.traffic import program_traffic
from polyfuse.errors import IllegalTransformError, PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView, annotate, statement_filters
from polyfuse.schedule.mapping import split, statements_of
from polyfuse.schedule.model import Schedule
from polyfuse.schedule.scheduler import BudgetExhausted, IslBudget

REPRESENTATIVE_SIZE = 1024
"""The size given to every param without a value when ``fusion="smart"`` compares traffic."""


@dataclass(frozen=True)
class Variant:
    """A finished schedule and what it was finished from: the annotated base tree and the dependence view
    (so that a variant can be rebuilt with some of its kernels distributed)."""

    schedule: Schedule
    log: tuple[str, ...]
    base: isl.Schedule
    view: DepView


Finish = Callable[[isl.Schedule, DepView], Schedule]
"""Maps and checks a base tree (``pf.schedule``'s ``_finish`` with everything else fixed)."""


def smart_by_traffic(prog: Program, fused: Variant, unfused: Variant, finish: Finish, budget: IslBudget,
                     params: Mapping[str, int] | None) -> tuple[Schedule, list[str]]:
    """The smart schedule from the two candidates, and the notes that say why."""
    f, u = fused.schedule, unfused.schedule
    if [k.statements for k in u.kernels] == [k.statements for k in f.kernels]:
        return f, []
    sizes = {p: int((params or {}).get(p, REPRESENTATIVE_SIZE)) for p in prog.params}
    at = ", ".join(f"{k}={v}" for k, v in sizes.items())
    if any(p not in (params or {}) for p in prog.params):
        at += " (representative sizes: no params given)"
    try:
        with budget.stage("the traffic comparison"):
            tf = program_traffic(prog, f.tree, f.kernels, f.contracted, sizes)
            tu = program_traffic(prog, u.tree, u.kernels, u.contracted, sizes)
    except (PolyfuseError, BudgetExhausted) as e:
        return f, [f"fusion='smart': traffic not compared ({e}); kept the fused schedule"]
    notes = [f"fusion='smart' by traffic at {at}: fused ({len(f.kernels)} kernel(s)) {tf.total_bytes} B vs "
             f"unfused ({len(u.kernels)} kernel(s)) {tu.total_bytes} B"]
    split_kernels: dict[frozenset[str], list[tuple[str, ...]]] = {}
    compared = 0
    for kf in f.kernels:
        parts = [ku for ku in u.kernels if set(ku.statements) <= set(kf.statements)]
        if len(parts) < 2 or sum(len(p.statements) for p in parts) != len(kf.statements):
            continue
        compared += 1
        bytes_f = tf.per_kernel[kf.name].total_bytes
        bytes_u = sum(tu.per_kernel[p.name].total_bytes for p in parts)
        less_parallel = kf.parallel_depth > 0 and any(p.parallel_depth == 0 for p in parts)
        loses = bytes_u < bytes_f and not less_parallel
        names = " | ".join("+".join(p.statements) for p in parts)
        verdict = ("fusion loses: distributed" if loses else
                   "kept fused (unfused would be less parallel)" if less_parallel and bytes_u < bytes_f else "kept fused")
        notes.append(f"fusion='smart': {kf.name} ({'+'.join(kf.statements)}) {bytes_f} B fused vs {bytes_u} B as {names}: {verdict}")
        if loses:
            split_kernels[frozenset(kf.statements)] = [p.statements for p in parts]
    if not compared:  # the two group statements differently (e.g. around a time loop): compare wholes
        if tu.total_bytes >= tf.total_bytes:
            return f, notes + ["fusion='smart': kept the fused schedule"]
        if _sequential_kernels(u) > _sequential_kernels(f):
            return f, notes + ["fusion='smart': minimal fusion would be less parallel; kept the fused schedule"]
        return dataclasses.replace(u, fusion="smart"), notes + ["fusion='smart': fusion loses: kept the unfused schedule"]
    if not split_kernels:
        return f, notes + ["fusion='smart': kept the fused schedule"]
    try:
        with budget.stage("distributing the kernels where fusion loses"):
            mixed = finish(distribute(prog, fused.base, fused.view, split_kernels), fused.view)
            tm = program_traffic(prog, mixed.tree, mixed.kernels, mixed.contracted, sizes).total_bytes
    except (IllegalTransformError, PolyfuseError, BudgetExhausted) as e:
        return f, notes + [f"fusion='smart': distributing failed ({e}); kept the fused schedule"]
    if tm > tf.total_bytes:
        return f, notes + [f"fusion='smart': the distributed schedule moves {tm} B, more than fused: kept the fused schedule"]
    return dataclasses.replace(mixed, fusion="smart"), notes + [
        f"fusion='smart': distributed {len(split_kernels)} kernel(s): {len(mixed.kernels)} kernel(s), {tm} B"]


def _sequential_kernels(s: Schedule) -> int:
    return sum(1 for k in s.kernels if k.parallel_depth == 0)


def distribute(prog: Program, base: isl.Schedule, view: DepView,
               parts: Mapping[frozenset[str], list[tuple[str, ...]]]) -> isl.Schedule:
    """``base`` with each kernel whose statements are a key of ``parts`` distributed into a sequence of
    loop nests, one per statement group of ``parts[key]`` (in that order), all with the kernel's band; the
    band flags are derived again (a distributed nest may be more parallel than the fused one)."""

    def at_kernel(node: isl.ScheduleNode) -> isl.ScheduleNode:
        groups = parts.get(frozenset(statements_of(node)))
        return node.insert_sequence(statement_filters(prog, groups)) if groups else node

    tree = split(base.get_root(), at_kernel).get_schedule()
    return annotate(tree.get_root(), view).get_schedule()
