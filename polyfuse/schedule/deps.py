"""The dependences the scheduler works from, as plain ``(kind, source, sink, array, relation)`` records.

:func:`dependences_of` is the one place the scheduler and the legality checker read dependences from: it
takes them from ``prog.dependences()`` (``polyfuse.analysis.dependences``) and, should that analysis be
unavailable, computes the same three kinds with isl's ``compute_flow`` on the source schedule: flow is
value-based (the last writer), anti and output are memory-based (every earlier read / write of the element).
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polyfuse.ir.program import Program

KINDS = ("flow", "anti", "output")


@dataclass(frozen=True)
class Dep:
    """One dependence: ``relation`` maps instances of ``source`` to instances of ``sink`` that touch
    the same element of ``array`` later in the source order."""

    kind: str
    source: str
    sink: str
    array: str
    relation: isl.Map


def dependences_of(prog: Program) -> tuple[Dep, ...]:
    """Every dependence of ``prog``'s source order, flow first."""
    if "scheduler_deps" in prog._cache:
        return prog._cache["scheduler_deps"]
    try:
        # the uncoalesced pieces: isl's scheduler is far faster on them (see ``Dependence.pieces``)
        deps = tuple(Dep(d.kind, d.source, d.sink, d.array, d.pieces if d.pieces is not None else d.relation)
                     for d in prog.dependences())
    except ImportError:
        deps = _compute(prog)
    deps = tuple(sorted(deps, key=lambda d: KINDS.index(d.kind)))
    prog._cache["scheduler_deps"] = deps
    return deps


def union_of(deps, kinds=KINDS, arrays=None, space: isl.Space | None = None) -> isl.UnionMap:
    """The union of the relations of ``deps`` of the given kinds (and arrays, when given)."""
    out = None
    for d in deps:
        if d.kind in kinds and (arrays is None or d.array in arrays):
            m = isl.UnionMap.from_map(d.relation)
            out = m if out is None else out.union(m)
    if out is None:
        assert space is not None
        return isl.UnionMap.empty(space)
    return out


def _compute(prog: Program) -> tuple[Dep, ...]:
    out: list[Dep] = []
    for name in prog.arrays:
        reads = _accesses(prog, name, ("read", "update"))
        writes = _accesses(prog, name, ("write", "update"))
        if writes.is_empty():
            continue
        sched = prog.schedule
        flow = isl.UnionAccessInfo.from_sink(reads).set_must_source(writes).set_schedule(sched).compute_flow()
        anti = isl.UnionAccessInfo.from_sink(writes).set_may_source(reads).set_schedule(sched).compute_flow()
        output = isl.UnionAccessInfo.from_sink(writes).set_may_source(writes).set_schedule(sched).compute_flow()
        for kind, umap in (("flow", flow.get_must_dependence()), ("anti", anti.get_may_dependence()),
                           ("output", output.get_may_dependence())):
            for m in _maps(umap):
                if not m.is_empty():
                    out.append(Dep(kind, m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out), name, m))
    return tuple(out)


def _accesses(prog: Program, array: str, kinds: tuple[str, ...]) -> isl.UnionMap:
    out = isl.UnionMap.empty(prog.context.get_space())
    for s in prog.statements:
        for a in s.accesses:
            if a.array == array and a.kind in kinds:
                out = out.union(isl.UnionMap.from_map(a.relation))
    return out


def _maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out
