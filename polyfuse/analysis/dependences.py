"""Exact dependences of a program's source order.

Three kinds, each a relation from statement instances to later statement instances:

- ``flow`` (read after write) is *value-based*: ``s -> t`` when ``t`` reads an element whose value was
  last written by ``s`` (isl's ``compute_flow`` with every write a must-source, so an intervening write
  kills older ones).
- ``anti`` (write after read) and ``output`` (write after write) are *memory-based*: every pair ``s -> t``
  with ``s`` before ``t`` in the source order and both touching the same element, whether or not another
  access to that element lies between them. They come from ``compute_flow`` with the earlier accesses as
  *may*-sources only and no kills, so nothing is filtered out.

An update access (``+=``, ``-=``, ``*=``) reads then writes its element, so it is a sink and a source of
every kind; a read and a write of one instance are never ordered against each other (the instance reads
all its operands before it writes).

Accesses are *tagged* before the analysis (``S[i] -> A[..]`` becomes ``[S[i] -> S_ref1[]] -> A[..]``, with
the source schedule pulled back onto the tagged instances), so each dependence piece knows the exact pair
of accesses it links. A :class:`Dependence` is one ``(kind, source statement, sink statement, array)``,
the union over its access pairs; it is a *reduction* when every pair links two update accesses with the
same operator. Distances and carrying loops are read off the schedule tree (see
:mod:`polyfuse.analysis.distance`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

import islpy as isl

from polyfuse.analysis.distance import LoopDistance, LoopStructure
from polyfuse.errors import PolyfuseWarning, user_stacklevel
from polyfuse.ir.printer import format_statement

if TYPE_CHECKING:
    from polyfuse.ir.program import Program, Statement

KINDS = ("flow", "anti", "output")
_READS = ("read", "update")
_WRITES = ("write", "update")


@dataclass(frozen=True, eq=False)
class Dependence:
    """One ``(kind, source, sink, array)`` dependence of a program's source order.

    ``relation`` maps source instances to sink instances (``{ S0[i, j] -> S1[i, j] : ... }``), restricted to
    the program context and coalesced. ``source_accesses`` / ``sink_accesses`` are the positions, in each
    statement's ``accesses``, of the accesses that take part. The loop-distance fields describe the
    ``common_depth`` loops shared by both statements, outermost (depth 0) first:

    - ``distance``: the constant vector ``sink - source`` over those loops when it is the same for every
      instance pair, else ``None`` (``()`` when no loop is shared);
    - ``distance_set``: the full (parametric) set of distance vectors, ``None`` when no loop is shared;
    - ``distance_bounds``: per depth, the least and greatest distance over all sizes (``None`` = unbounded);
    - ``carried_depths``: every depth that carries some pair (all outer distances zero, this one positive);
    - ``loop_independent``: some pair has distance zero at every common depth (ordered by the sequence).

    ``is_reduction`` holds when every access pair is an update of the same array on both ends with the same
    operator: gemm's ``C[i, j] += ...`` chain is one, its ``C[i, j] *= beta`` before it is not. Equality is
    identity (``eq=False``): isl values hash by their text, not by the set they denote.

    ``pieces`` is the same relation as ``relation``, kept as the union of its per-access-pair pieces
    (not coalesced): the form the scheduler and the legality checks work on. Coalescing fuses a stencil's
    shifted pieces into one basic map with many constraints (heat-3d: 25), and isl's scheduler builds the
    constraints of each basic map by Farkas elimination, whose cost grows steeply with that number (one
    basic map of 25 constraints costs more than 20 of 3).
    """

    kind: str
    source: str
    sink: str
    array: str
    relation: isl.Map
    source_accesses: tuple[int, ...]
    sink_accesses: tuple[int, ...]
    is_reduction: bool
    common_depth: int
    distance: tuple[int, ...] | None
    distance_set: isl.Set | None
    distance_bounds: tuple[tuple[int | None, int | None], ...]
    carried_depths: tuple[int, ...]
    loop_independent: bool
    pieces: isl.Map | None = None

    @property
    def carried_depth(self) -> int | None:
        """The outermost loop depth that carries the dependence; ``None`` when no loop carries it."""
        return min(self.carried_depths) if self.carried_depths else None

    def distance_text(self) -> str:
        """``(0, 1)`` when uniform; otherwise per depth a constant, ``lo..hi``, ``>=lo``, ``<=hi`` or ``*``."""
        if self.distance is not None:
            return "(" + ", ".join(str(d) for d in self.distance) + ")"
        parts = []
        for lo, hi in self.distance_bounds:
            if lo is not None and lo == hi:
                parts.append(str(lo))
            elif lo is not None and hi is not None:
                parts.append(f"{lo}..{hi}")
            elif lo is not None:
                parts.append(f">={lo}")
            elif hi is not None:
                parts.append(f"<={hi}")
            else:
                parts.append("*")
        return "(" + ", ".join(parts) + ")"

    def to_dict(self, context: isl.Set | None = None) -> dict:
        """The JSON-ready record of ``to_json``; the relation is printed simplified under ``context``."""
        return {
            "kind": self.kind,
            "source": self.source,
            "sink": self.sink,
            "array": self.array,
            "relation": _simplified(self.relation, context).to_str(),
            "distance": list(self.distance) if self.distance is not None else None,
            "carried_depth": self.carried_depth,
            "carried_depths": list(self.carried_depths),
            "loop_independent": self.loop_independent,
            "is_reduction": self.is_reduction,
        }

    def describe(self, context: isl.Set | None = None) -> str:
        """One readable line: kind, ends, array, distance, carrying loop, relation."""
        carried = "loop-independent" if self.carried_depth is None else f"carried at depth {self.carried_depth}"
        if len(self.carried_depths) > 1:
            carried = "carried at depths " + ",".join(str(c) for c in self.carried_depths)
        if self.carried_depths and self.loop_independent:
            carried += " and loop-independent"
        red = " reduction" if self.is_reduction else ""
        return (
            f"{self.kind:<6} {self.source} -> {self.sink}  {self.array}{red}  distance {self.distance_text()}  "
            f"{carried}  {_simplified(self.relation, context)}"
        )

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return f"<pf.Dependence {self.kind} {self.source} -> {self.sink} on {self.array}>"


@dataclass(frozen=True, eq=False)
class Dependences:
    """All dependences of one program, in order of kind (flow, anti, output), source, sink, array.

    Iterating yields :class:`Dependence` values; ``flow``, ``anti`` and ``output`` are the untagged unions
    of each kind. ``between`` and ``of_kind`` return filtered :class:`Dependences`.
    """

    program: str
    context: isl.Set
    items: tuple[Dependence, ...]
    statement_text: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "statement_text", MappingProxyType(dict(self.statement_text)))

    # ----- collection ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Dependence]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k: int) -> Dependence:
        return self.items[k]

    def between(self, source: str | Statement, sink: str | Statement) -> Dependences:
        """The dependences from statement ``source`` to statement ``sink`` (names or Statements)."""
        a, b = _name(source), _name(sink)
        return self._subset(d for d in self.items if d.source == a and d.sink == b)

    def of_kind(self, *kinds: str) -> Dependences:
        """The dependences of the given kinds (``"flow"``, ``"anti"``, ``"output"``)."""
        for k in kinds:
            if k not in KINDS:
                raise ValueError(f"unknown dependence kind {k!r}; expected one of {', '.join(KINDS)}")
        return self._subset(d for d in self.items if d.kind in kinds)

    def _subset(self, items: Iterator[Dependence]) -> Dependences:
        return Dependences(self.program, self.context, tuple(items), self.statement_text)

    # ----- unions -------------------------------------------------------------------------------
    @cached_property
    def flow(self) -> isl.UnionMap:
        """Value-based flow dependences, all arrays: source instance -> sink instance."""
        return self._union("flow")

    @cached_property
    def anti(self) -> isl.UnionMap:
        """Memory-based anti dependences (read, then a later write of the element)."""
        return self._union("anti")

    @cached_property
    def output(self) -> isl.UnionMap:
        """Memory-based output dependences (write, then a later write of the element)."""
        return self._union("output")

    @cached_property
    def all(self) -> isl.UnionMap:
        """The union of every kind: what a legal schedule must respect."""
        return self.flow.union(self.anti).union(self.output).coalesce()

    def _union(self, kind: str) -> isl.UnionMap:
        out = isl.UnionMap.empty(self.context.get_space())
        for d in self.items:
            if d.kind == kind:
                out = out.union(isl.UnionMap.from_map(d.relation))
        return out.coalesce()

    # ----- output -------------------------------------------------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        """``{"program", "context", "dependences": [{kind, source, sink, array, relation, distance,
        carried_depth, carried_depths, loop_independent, is_reduction}, ...]}``."""
        doc = {
            "program": self.program,
            "context": self.context.to_str(),
            "dependences": [d.to_dict(self.context) for d in self.items],
        }
        return json.dumps(doc, indent=indent)

    def to_dot(self) -> str:
        """A DOT digraph: one node per statement (labelled with its source text), one edge per dependence."""
        lines = [f"digraph {_dot_quote(self.program)} {{", '  node [shape=box, fontname="monospace"];']
        for name, text in self.statement_text.items():
            lines.append(f"  {name} [label={_dot_quote(text)}];")
        for d in self.items:
            label = f"{d.kind} {d.array} {d.distance_text()}"
            lines.append(f"  {d.source} -> {d.sink} [label={_dot_quote(label)}, style={_DOT_STYLE[d.kind]}];")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        if not self.items:
            return f"(no dependences in {self.program})"
        return "\n".join(d.describe(self.context) for d in self.items)

    def __repr__(self) -> str:
        counts = ", ".join(f"{sum(d.kind == k for d in self.items)} {k}" for k in KINDS)
        return f"<pf.Dependences {self.program}: {counts}>"


_DOT_STYLE = {"flow": "solid", "anti": "dashed", "output": "dotted"}


def compute_dependences(prog: Program) -> Dependences:
    """The exact flow, anti and output dependences of ``prog``'s source order."""
    tags = _Tags(prog)
    schedule = tags.schedule(prog.schedule)
    reads, writes = tags.accesses(_READS), tags.accesses(_WRITES)
    flow = _last_writer(prog, reads, writes, schedule)
    anti = _all_earlier(writes, reads, schedule)
    output = _all_earlier(writes, writes, schedule)

    loops = LoopStructure(prog.schedule)
    order = {s.name: k for k, s in enumerate(prog.statements)}
    items: list[Dependence] = []
    for kind, tagged in (("flow", flow), ("anti", anti), ("output", output)):
        groups = _group(tagged, tags, prog.context.params())
        for key in sorted(groups, key=lambda g: (order[g[0]], order[g[1]], g[2])):
            items.append(_make(kind, key, groups[key], prog, loops))
    text = {s.name: _statement_label(s) for s in prog.statements}
    return Dependences(prog.name, prog.context, tuple(items), text)


def _last_writer(prog: Program, reads: isl.UnionMap, writes: isl.UnionMap, schedule: isl.Schedule) -> isl.UnionMap:
    """Value-based flow: each read's last writer (isl's dataflow). isl's dataflow can fail internally on
    some quasi-affine accesses ("affine expression involves some of the domain dimensions", found by the
    fuzzer on ``A[t % 2]`` updates); the flow is then taken memory-based -- every earlier write of the
    element -- a superset of the exact relation, so every schedule legal under it is legal, with a
    warning that the reported flow dependences are not exact."""
    info = isl.UnionAccessInfo.from_sink(reads).set_must_source(writes).set_schedule(schedule)
    try:
        return info.compute_flow().get_must_dependence()
    except isl.Error as e:
        if "maximal number of operations exceeded" in str(e):
            raise  # the caller's operation budget (pf.schedule falls back)
        why = str(e).split(" in /")[0].split("failed: ")[-1]
        warnings.warn(f"{prog.filename}: {prog.name}: isl's dataflow analysis failed ({why}); flow dependences are "
                      "taken memory-based (every earlier write of the element), a safe over-approximation",
                      PolyfuseWarning, stacklevel=user_stacklevel())
        return _all_earlier(reads, writes, schedule)


def _all_earlier(sinks: isl.UnionMap, sources: isl.UnionMap, schedule: isl.Schedule) -> isl.UnionMap:
    """Every ``source -> sink`` instance pair touching one element with the source strictly earlier.

    May-sources never kill one another and no kills are set, so this is the memory-based relation.
    """
    info = isl.UnionAccessInfo.from_sink(sinks).set_may_source(sources).set_schedule(schedule)
    return info.compute_flow().get_may_dependence()


class _Tags:
    """Reference tags: access number ``k`` of statement ``S`` is the 0-d tuple ``S_ref<k>[]``."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.ref: dict[str, tuple[str, int]] = {}
        self._tagged: list[tuple[str, isl.Map]] = []  # (access kind, [S[..] -> S_refk[]] -> A[..])
        untag = isl.UnionMap.empty(prog.context.get_space())
        for s in prog.statements:
            for k, acc in enumerate(s.accesses):
                name = f"{s.name}_ref{k}"
                self.ref[name] = (s.name, k)
                ref = isl.Set.universe(prog.context.get_space()).set_tuple_name(name)
                tag = isl.Map.from_domain_and_range(s.domain, ref)  # S[i] -> S_refk[]
                self._tagged.append((acc.kind, tag.range_product(acc.relation).uncurry()))
                untag = untag.union(isl.UnionMap.from_map(tag.domain_map()))
        self._untag = isl.UnionPwMultiAff.from_union_map(untag)

    def accesses(self, kinds: tuple[str, ...]) -> isl.UnionMap:
        """The tagged access relations of the given kinds."""
        out = isl.UnionMap.empty(self.prog.context.get_space())
        for kind, rel in self._tagged:
            if kind in kinds:
                out = out.union(isl.UnionMap.from_map(rel))
        return out

    def schedule(self, schedule: isl.Schedule) -> isl.Schedule:
        """The source schedule on tagged instances: ``[S[i] -> S_refk[]]`` runs when ``S[i]`` does."""
        return schedule.pullback_union_pw_multi_aff(self._untag)

    def access_of(self, tagged_instances: isl.Set) -> tuple[str, int]:
        """``(statement, access number)`` of a set of tagged instances ``[S[..] -> S_refk[]]``."""
        return self.ref[tagged_instances.unwrap().get_tuple_name(isl.dim_type.out)]


_Key = tuple[str, str, str]  # (source statement, sink statement, array)


def _group(tagged: isl.UnionMap, tags: _Tags, context: isl.Set) -> dict[_Key, list[tuple[int, int, isl.Map]]]:
    """Split tagged dependences by (source, sink, array) into (source access, sink access, relation)."""
    groups: dict[_Key, list[tuple[int, int, isl.Map]]] = {}
    maps: list[isl.Map] = []
    tagged.foreach_map(maps.append)
    for m in maps:
        m = m.intersect_params(context)
        if m.is_empty():
            continue
        src, a = tags.access_of(m.domain())
        snk, b = tags.access_of(m.range())
        array = tags.prog.statement(src).accesses[a].array
        groups.setdefault((src, snk, array), []).append((a, b, m.factor_domain()))
    return groups


def _make(kind: str, key: _Key, pieces: list[tuple[int, int, isl.Map]], prog: Program, loops: LoopStructure) -> Dependence:
    src, snk, array = key
    union = pieces[0][2]
    for _, _, m in pieces[1:]:
        union = union.union(m)
    relation = union.coalesce()
    s, t = prog.statement(src), prog.statement(snk)
    reduction = all(s.accesses[a].kind == "update" and t.accesses[b].kind == "update" and s.op == t.op for a, b, _ in pieces)
    dist: LoopDistance = loops.distance(relation)
    return Dependence(
        kind=kind,
        source=src,
        sink=snk,
        array=array,
        relation=relation,
        source_accesses=tuple(sorted({a for a, _, _ in pieces})),
        sink_accesses=tuple(sorted({b for _, b, _ in pieces})),
        is_reduction=reduction,
        common_depth=dist.common_depth,
        distance=dist.distance,
        distance_set=dist.distance_set,
        distance_bounds=dist.bounds,
        carried_depths=dist.carried_depths,
        loop_independent=dist.loop_independent,
        pieces=union,
    )


def _simplified(m: isl.Map, context: isl.Set | None) -> isl.Map:
    """``m`` for printing: constraints implied by the context dropped, pieces coalesced."""
    return (m.gist_params(context.params()) if context is not None else m).coalesce()


def _statement_label(s: Statement) -> str:
    return f"{s.name}: {s.text}" if s.text else format_statement(s)


def _name(s: str | Statement) -> str:
    return s if isinstance(s, str) else s.name


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
