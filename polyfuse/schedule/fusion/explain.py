"""Why neighbouring kernels were or were not fused: the decisions ``Schedule.explain()`` prints.

For two neighbouring kernels under ``fusion="max"`` or ``"smart"``, the two groups of statements are
scheduled again on their own with the same policy. If they still end up in separate kernels, each
dependence between the groups is tried alone (with the dependences inside each group): the first one that
by itself keeps them apart is named as the blocking dependence. Under ``"none"``, ``"min"`` or an explicit
schedule the policy is the reason. A statement that runs as a kernel shape of its own (a register
micro-tile, a CUDA sum into a vector: :func:`kernel_shapes`) is the reason where its neighbour was
distributed from it, and ``fusion="smart"``'s own distribution where its model rated the kernels better apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView
from polyfuse.schedule.fusion.scheduler import base_tree
from polyfuse.schedule.mapping.kernels import split, statements_of
from polyfuse.schedule.model import FusionDecision, Kernel
from polyfuse.schedule.tiling.microtile import microtile_marks

_POLICY = {
    "none": "fusion='none' keeps the source order: each loop nest is its own kernel",
    "min": "fusion='min' gives each strongly connected component of the dependence graph its own loop nest",
    "explicit": "the explicit schedule given by the user places them apart",
}


def decisions(prog: Program, fusion: str, kernels: tuple[Kernel, ...], view: DepView,
              apart: tuple[frozenset[str], ...] = (), shapes: Mapping[str, str] | None = None,
              rows_fused: bool = False, folded: Mapping[str, str] | None = None) -> tuple[FusionDecision, ...]:
    """The decisions for each kernel of several statements and each pair of neighbouring kernels.
    ``apart``: the statements of the kernels ``fusion="smart"`` fused and then distributed again because
    its model rated them better apart (the notes give the numbers). ``shapes``: kernel name -> the kernel
    shape its lone statement was distributed into (:func:`kernel_shapes`). ``rows_fused``: the time steps run
    as one row-fused kernel each (``steps.py``, threads=1). ``folded``: initialisation -> the contraction
    whose tiles it was moved into after fusion (``tiling/init_fold.py``): a kernel of its own as far as
    fusion goes."""
    shapes = shapes or {}
    folded = folded or {}
    out: list[FusionDecision] = []
    for k in kernels:
        for init in (s for s in k.statements if s in folded):
            out.append(FusionDecision((folded[init],), (init,), True,
                                      f"{k.name}: {init} initialises {folded[init]}'s elements and runs inside its tiles, "
                                      "just before the micro-kernel reads them (tiling/init_fold.py)"))
        k = dataclasses.replace(k, statements=tuple(s for s in k.statements if s not in folded))
        if len(k.statements) > 1:
            how = _POLICY.get(fusion, f"fusion={fusion!r}")
            reason = "one kernel in the explicit schedule" if fusion == "explicit" else f"fused by isl's scheduler under fusion={fusion!r}"
            if fusion == "none":
                reason = "they share the outermost parallel loop of the source"
            if rows_fused:
                reason = "the loop nests of each time step fused row by row for one thread (threads=1; see the note)"
            out.append(FusionDecision(k.statements[:1], k.statements[1:], True, f"{k.name}: {reason}" if how else reason))
    for a, b in zip(kernels, kernels[1:]):
        first, second = (tuple(s for s in k.statements if s not in folded) for k in (a, b))
        shaped = next(((k.statements[0], shapes[k.name]) for k in (b, a) if k.name in shapes and len(k.statements) == 1), None)
        if any(set(first) | set(second) <= group for group in apart):
            reason = ("fusion='smart' fused them, then distributed them again: the model rates them better in "
                      "separate kernels (register micro-tiles kept, fewer innermost loops striding through memory, or "
                      "fewer bytes; the notes give the numbers)")
        elif shaped is not None and fusion not in _POLICY:
            reason = (f"{shaped[0]} runs as {shaped[1]}, which takes a kernel of its own "
                      "(microtile.distribute_contractions distributes any kernel holding it)")
        elif fusion in _POLICY:
            reason = _POLICY[fusion]
            blocker = _blocker(prog, "max", view, first, second)
            if blocker and blocker != NO_LINK:
                reason += f"; fusing them is also blocked by {blocker}"
        else:
            reason = _blocker(prog, fusion, view, first, second) or (
                "isl's whole-program schedule placed them apart (alone, the two groups could be fused)"
            )
        out.append(FusionDecision(first, second, False, reason))
    return tuple(out)


NO_LINK = "no dependence links them: they share no data to reuse, so they stay separate kernels"


def kernel_shapes(tree: isl.Schedule, kernels: tuple[Kernel, ...]) -> dict[str, str]:
    """Kernel name -> the kernel shape of its own that its statement runs as: a register micro-tile (C: a
    ``microtile`` mark; CUDA: ``Kernel.microtile``) or a sum into a vector (CUDA: ``Kernel.vector_sum``)."""
    out = {k.name: "a register micro-tile" for k in kernels if getattr(k, "microtile", None) is not None}
    out.update({k.name: "a sum into a vector" for k in kernels if getattr(k, "vector_sum", None) is not None})

    for kernel, _ in microtile_marks(tree):
        out.setdefault(kernel, "a register micro-tile")
    return out


def describe(prog: Program, dep) -> str:
    src, snk = prog.statement(dep.source), prog.statement(dep.sink)
    return (f"the {dep.kind} dependence on {dep.array!r} from {dep.source} ({src.text!r}, line {src.line}) "
            f"to {dep.sink} ({snk.text!r}, line {snk.line})")


def _blocker(prog: Program, fusion: str, view: DepView, first, second) -> str | None:
    group = set(first) | set(second)
    inner = tuple(d for d in view.deps if {d.source, d.sink} <= set(first) or {d.source, d.sink} <= set(second))
    across = [d for d in view.deps if d.source in group and d.sink in group and d not in inner]
    if not across:
        return NO_LINK
    if _fusable(prog, fusion, view, group, inner + tuple(across)):
        return None
    for d in across:
        if not _fusable(prog, fusion, view, group, inner + (d,)):
            return describe(prog, d) + " (no fused schedule keeps the outer loop parallel and respects it)"
    return "the combination of the dependences between them: " + "; ".join(describe(prog, d) for d in across)


def _fusable(prog: Program, fusion: str, view: DepView, group: set[str], deps) -> bool:
    sub = DepView(tuple(deps), view.temps, view.space, view.privatize)
    domain = isl.UnionSet.empty(prog.context.get_space())
    for s in prog.statements:
        if s.name in group:
            domain = domain.union(isl.UnionSet.from_set(s.domain))
    tree = base_tree(prog, fusion, sub, domain)
    found: list[tuple[str, ...]] = []

    def record(node: isl.ScheduleNode) -> isl.ScheduleNode:
        found.append(statements_of(node))
        return node

    split(tree.get_root(), record)
    return len(found) == 1
