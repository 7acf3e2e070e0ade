"""Legality of a schedule: every dependence must map to a lexicographically positive schedule distance.

:func:`check_schedule` is run on every schedule polyfuse produces and on every schedule a user supplies.
What it checks, precisely, for a schedule ``S`` (the flattened map of a tree, or a map):

* every statement instance of the program is scheduled;
* for every flow dependence, and every anti and output dependence on an array that is *not* privatised,
  ``S(source) <<_lex S(sink)`` for every pair of the relation (restricted to the program's context);
* for an array ``X`` privatised with thread map ``P_X`` (``privatized[X]``: instance -> identity of the
  thread that runs it, e.g. the schedule prefix through the parallel loops): every flow dependence of ``X``
  links two instances of the same thread (``P_X(source) = P_X(sink)``, the live range is local to the
  thread), and the anti and output dependences of ``X`` between instances of the same thread are ordered
  as above. Anti and output dependences between different threads are dropped: each thread has its own copy.

A violation raises :class:`~polyfuse.errors.IllegalTransformError` naming the kind, the two statements with
their source text, the array, and a witness pair of instances (with the sizes that exhibit it).
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.errors import IllegalTransformError
from polyfuse.ir.program import Program
from polyfuse.schedule.deps import dependences_of


def check_schedule(
    prog: Program,
    schedule: isl.Schedule | isl.UnionMap,
    privatized: Mapping[str, isl.UnionMap] | None = None,
) -> None:
    """Raise :class:`IllegalTransformError` unless ``schedule`` respects every dependence of ``prog``."""
    privatized = dict(privatized or {})
    smap = schedule.get_map() if isinstance(schedule, isl.Schedule) else padded_schedule_map(schedule)
    smap = smap.intersect_params(prog.context)
    missing = prog.domains.subtract(smap.domain())
    if not missing.is_empty():
        point = missing.sample_point()
        raise IllegalTransformError(
            f"the schedule of {prog.name} does not schedule every statement instance, e.g. {_instance(prog, point)}"
        )
    later = _Later(smap)
    ordered = _Ordered(smap)
    deps = dependences_of(prog)
    if _all_ordered(prog, [d for d in deps if d.array not in privatized], ordered):
        deps = tuple(d for d in deps if d.array in privatized)  # (the others hold)
    same_of: dict[tuple[str, str, str], isl.UnionMap] = {}
    domain_of = {s.name: isl.UnionSet.from_set(s.domain) for s in prog.statements}
    for dep in deps:  # (privatised arrays, or a pair that fails: the dependence and its witness, one by one)
        rel = isl.UnionMap.from_map(dep.relation).intersect_params(prog.context)
        thread = privatized.get(dep.array)
        if thread is not None:
            key = (dep.array, dep.source, dep.sink)
            if key not in same_of:  # (the pairs of one iteration, for these two statements only: the whole
                # privatisation map relates every pair of its statements, quadratic in their number)
                src = thread.intersect_domain(domain_of[dep.source])
                dst = thread.intersect_domain(domain_of[dep.sink])
                same_of[key] = src.apply_range(dst.reverse())
            same = same_of[key]
            if dep.kind == "flow":
                escaping = rel.subtract(same)
                if not escaping.is_empty():
                    _fail(prog, dep, escaping, f"the value of privatised {dep.array!r} is not consumed by the thread that produced it")
            else:
                rel = rel.intersect(same)
        if ordered(dep.source, dep.sink, rel):
            continue
        bad = rel.subtract(later(dep.source, dep.sink))
        if not bad.is_empty():
            _fail(prog, dep, bad, "the schedule does not run the source before the sink")


def _all_ordered(prog: Program, deps, ordered: _Ordered) -> bool:
    """Whether the schedule runs the source before the sink of every one of ``deps`` (none on a privatised
    array), asked once per pair of statements (the union of their dependences) instead of once per
    dependence: the same answer in half the isl calls or fewer (correlation: 53 dependences, 29 pairs).
    ``False`` says only that some pair needs the closer look of :func:`check_schedule`."""
    pairs: dict[tuple[str, str], isl.UnionMap] = {}
    for dep in deps:
        rel = isl.UnionMap.from_map(dep.relation)
        key = (dep.source, dep.sink)
        pairs[key] = pairs[key].union(rel) if key in pairs else rel
    return all(ordered(source, sink, rel.intersect_params(prog.context)) for (source, sink), rel in pairs.items())


class _Later:
    """``{ s -> t : S(s) <<_lex S(t) }`` for the instances of one pair of statements at a time.

    The same relation as ``S.lex_lt_union_map(S)`` restricted to the pair, computed only for the pairs that
    some dependence links (the whole union map relates every pair of statements: quadratic in their number
    and, on deriche, most of the legality check's time)."""

    def __init__(self, smap: isl.UnionMap) -> None:
        self._of: dict[str, isl.UnionMap] = {}
        maps: list[isl.Map] = []
        smap.foreach_map(maps.append)
        for m in maps:
            name = m.get_tuple_name(isl.dim_type.in_)
            u = isl.UnionMap.from_map(m)
            self._of[name] = self._of[name].union(u) if name in self._of else u
        self._empty = isl.UnionMap.empty(smap.get_space())
        self._pairs: dict[tuple[str, str], isl.UnionMap] = {}

    def __call__(self, source: str, sink: str) -> isl.UnionMap:
        key = (source, sink)
        if key not in self._pairs:
            s, t = self._of.get(source), self._of.get(sink)
            self._pairs[key] = self._empty if s is None or t is None else s.lex_lt_union_map(t)
        return self._pairs[key]


class _Ordered:
    """Whether ``S(s) <<_lex S(t)`` for every pair ``s -> t`` of a relation: the relation mapped through
    the schedule, ``{ S(s) -> S(t) }``, meets ``{ x -> y : x >=_lex y }`` nowhere.

    Exactly the question ``rel - _Later(source, sink) = {}`` answers, but on the images in the schedule
    space, against one fixed lexicographic relation, instead of building ``<<_lex`` between the two
    statements' instances (piecewise, statement by statement) and subtracting: the legality check's cost
    on deriche and adi, 5 to 10 times cheaper. Only a failing dependence is looked at the slow way, for
    the witness the error message shows."""

    def __init__(self, smap: isl.UnionMap) -> None:
        self._of: dict[str, isl.UnionMap] = {}
        maps: list[isl.Map] = []
        smap.foreach_map(maps.append)
        space = None
        for m in maps:
            name = m.get_tuple_name(isl.dim_type.in_)
            u = isl.UnionMap.from_map(m)
            self._of[name] = self._of[name].union(u) if name in self._of else u
            here = m.get_space().range()
            if space is None:
                space = here
            elif not here.is_equal(space):  # ranges of different spaces never compare: the slow way only
                space = None
                break
        self._ge = None if space is None else isl.UnionMap.from_map(isl.Map.lex_ge(space))

    def __call__(self, source: str, sink: str, rel: isl.UnionMap) -> bool:
        s, t = self._of.get(source), self._of.get(sink)
        if s is None or t is None or self._ge is None:
            return False  # (the slow way decides)
        images = rel.apply_domain(s).apply_range(t)
        return images.intersect(self._ge).is_empty()


def check_parallel(
    prog: Program,
    domain: isl.UnionSet,
    outer: isl.UnionMap,
    thread: isl.UnionMap,
    privatized: Mapping[str, isl.UnionMap] | None = None,
) -> None:
    """Raise :class:`IllegalTransformError` if two instances of ``domain`` that run in the same iteration
    of ``outer`` (the loops around a parallel loop nest) but in different threads (``thread``) depend on
    each other. Anti and output dependences on a privatised array between different copies do not count.
    """
    privatized = dict(privatized or {})
    names: set[str] = set()
    domain.foreach_set(lambda s: names.add(s.get_tuple_name()))
    deps = [d for d in dependences_of(prog) if d.source in names and d.sink in names]
    images = _SameOuterOtherThread(domain, outer, thread)
    slow = []
    for dep in deps:
        copies = privatized.get(dep.array) if dep.kind != "flow" else None
        rel = isl.UnionMap.from_map(dep.relation).intersect_params(prog.context)
        if not images(dep.source, dep.sink, rel, copies, dep.array):
            slow.append((dep, rel, copies))
    if not slow:
        return
    same_outer = outer.apply_range(outer.reverse())
    same_thread = thread.apply_range(thread.reverse())
    for dep, rel, copies in slow:  # (the pairs the fast test could not clear: exactly, and with a witness when one races)
        rel = rel.intersect_domain(domain).intersect_range(domain).intersect(same_outer)
        if copies is not None:
            rel = rel.intersect(copies.apply_range(copies.reverse()))
        racing = rel.subtract(same_thread)
        if not racing.is_empty():
            _fail(prog, dep, racing, "a parallel loop carries it (the two instances run in different threads)")


class _SameOuterOtherThread:
    """Whether no pair ``s -> t`` of a dependence runs in the same iteration of the outer loops (and, for a
    privatised array, on the same copy) but on different threads.

    The question :func:`check_parallel` asks, answered on the images of the pair in the space of
    ``[outer, copy, thread]`` values against one fixed relation ``{ x -> y : equal outer (and copy) part,
    some thread coordinate differs }``, instead of building ``same_outer`` and ``same_thread`` between
    every two instances of the kernel and subtracting (on deriche, 25 ms per kernel). ``True`` means
    proved safe; ``False`` only that the exact test of :func:`check_parallel` decides (a race, or maps this
    test cannot use: not defined on every instance, or ranges of different sizes)."""

    def __init__(self, domain: isl.UnionSet, outer: isl.UnionMap, thread: isl.UnionMap) -> None:
        pieces: list[isl.Set] = []
        domain.foreach_set(pieces.append)
        self._domain = {piece.get_tuple_name(): isl.UnionSet.from_set(piece) for piece in pieces}
        self._outer, self._thread = outer, thread
        self._maps: dict[tuple[str | None, str], tuple[isl.UnionMap, tuple[int, int]] | None] = {}
        self._races: dict[tuple[int, int], isl.UnionMap] = {}

    def __call__(self, source: str, sink: str, rel: isl.UnionMap, copies: isl.UnionMap | None, array: str) -> bool:
        src, snk = self._image(source, copies, array), self._image(sink, copies, array)
        if src is None or snk is None or src[1] != snk[1]:
            return False
        images = rel.apply_domain(src[0]).apply_range(snk[0])
        return images.intersect(self._race(src[1])).is_empty()

    def _image(self, stmt: str, copies: isl.UnionMap | None, array: str) -> tuple[isl.UnionMap, tuple[int, int]] | None:
        """``stmt -> [outer, copy, thread]`` with the sizes of (outer + copy, all); None when a map is not
        defined on every instance of ``stmt`` in the kernel or has a named range."""
        key = (array if copies is not None else None, stmt)
        if key not in self._maps:
            self._maps[key] = self._joined(stmt, [self._outer, *([copies] if copies is not None else []), self._thread])
        return self._maps[key]

    def _joined(self, stmt: str, maps: list[isl.UnionMap]) -> tuple[isl.UnionMap, tuple[int, int]] | None:
        domain = self._domain.get(stmt)
        if domain is None:
            return None
        parts = [m.intersect_domain(domain) for m in maps]
        sizes = [_range_size(m) for m in parts]
        if None in sizes or not all(domain.is_subset(m.domain()) for m in parts):
            return None
        joined = parts[0]
        for m in parts[1:]:
            joined = joined.flat_range_product(m)
        return joined, (sum(sizes[:-1]), sum(sizes))  # type: ignore[arg-type]

    def _race(self, shape: tuple[int, int]) -> isl.UnionMap:
        if shape not in self._races:
            lead, width = shape
            xs = [f"x{k}" for k in range(width)]
            ys = [f"y{k}" for k in range(width)]
            same = " and ".join(f"{x} = {y}" for x, y in zip(xs[:lead], ys[:lead])) or "0 = 0"
            differs = " or ".join(f"{x} != {y}" for x, y in zip(xs[lead:], ys[lead:])) or "1 = 0"
            self._races[shape] = isl.UnionMap(f"{{ [{', '.join(xs)}] -> [{', '.join(ys)}] : {same} and ({differs}) }}")
        return self._races[shape]


def _range_size(m: isl.UnionMap) -> int | None:
    """The range dimension of the maps of ``m`` (one statement's: None when they differ, a range is named, or
    ``m`` is empty)."""
    sizes: set[int] = set()
    named: list[bool] = []

    def look(piece: isl.Map) -> None:
        sizes.add(piece.dim(isl.dim_type.out))
        named.append(piece.has_tuple_name(isl.dim_type.out))

    m.foreach_map(look)
    return sizes.pop() if len(sizes) == 1 and not any(named) else None


def _fail(prog: Program, dep, bad: isl.UnionMap, why: str) -> None:
    pair = isl.Map.from_union_map(bad).wrap().sample_point()
    src, snk = prog.statement(dep.source), prog.statement(dep.sink)
    coords = [int(pair.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(src.depth + snk.depth)]
    params = {p: int(pair.get_coordinate_val(isl.dim_type.param, k).to_python())
              for k, p in enumerate(pair.get_space().get_var_names(isl.dim_type.param))}
    sizes = ", ".join(f"{p}={v}" for p, v in params.items())
    raise IllegalTransformError(
        f"illegal schedule for {prog.name}: {dep.kind} dependence on array {dep.array!r} from {dep.source} "
        f"({src.text!r}, line {src.line}) to {dep.sink} ({snk.text!r}, line {snk.line}) is violated: {why}; "
        f"witness {_fmt(src, coords[:src.depth])} -> {_fmt(snk, coords[src.depth:])}" + (f" with {sizes}" if sizes else "")
    )


def _fmt(stmt, values) -> str:
    return f"{stmt.name}[" + ", ".join(f"{n}={v}" for n, v in zip(stmt.iterators, values)) + "]"


def _instance(prog: Program, point: isl.Point) -> str:
    stmt = prog.statement(point.get_space().get_tuple_name(isl.dim_type.set))
    return _fmt(stmt, [int(point.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(stmt.depth)])


def padded_schedule_map(umap: isl.UnionMap) -> isl.UnionMap:
    """``umap`` with every range padded with zeros to the same number of anonymous dimensions, so that
    instances of different statements compare lexicographically."""
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    width = max((m.dim(isl.dim_type.out) for m in maps), default=0)
    out = None
    for m in maps:
        n = m.dim(isl.dim_type.out)
        m = m.reset_tuple_id(isl.dim_type.out)
        if n < width:
            m = m.add_dims(isl.dim_type.out, width - n)
            for k in range(n, width):
                m = m.fix_si(isl.dim_type.out, k, 0)
        u = isl.UnionMap.from_map(m)
        out = u if out is None else out.union(u)
    return out if out is not None else umap
