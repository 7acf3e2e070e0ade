"""Dependence distances over the loops that two statements share in a schedule tree.

The loops common to statements ``S`` and ``T`` are the band members above the deepest node of the
schedule tree that both reach: the node where their root-to-leaf paths part (a sequence or set node), or
``S``'s own leaf when ``S == T``. That node's *prefix schedule* (``get_prefix_schedule_multi_union_pw_aff``)
maps every instance of both statements to the values of exactly those loops, outermost first, so one
band member is one loop depth. For a dependence relation ``R: S -> T`` we take

    distances(R) = { P(t) - P(s) : (s -> t) in R }        with P the common prefix schedule,

computed with isl as ``deltas(P^-1 . R . P)``. Sequence positions never enter the distance: two instances
with equal common-loop values are ordered by the sequence node alone (a loop-independent dependence).

We chose the prefix schedule of the common ancestor rather than slicing ``Schedule.get_map()``: that flat
map interleaves loop values with sequence positions only where sequences exist, so its even/odd layout
varies from program to program, while the tree says directly which dimensions are loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

Path = tuple[int, ...]


@dataclass(frozen=True)
class LoopDistance:
    """What a dependence's distance set says about the loops common to its two ends.

    ``distance_set`` is ``{ P(t) - P(s) }`` (a set of ``common_depth`` integers, parametric), ``None`` when
    the statements share no loop. ``distance`` is the single constant vector when every instance pair,
    for every value of the size parameters, has the same distance; else ``None``. ``carried_depths`` lists
    each depth ``c`` at which some pair has ``d_0 = ... = d_{c-1} = 0 < d_c``; ``loop_independent`` says
    that some pair has distance zero at every common depth (ordered only by statement order).
    """

    common_depth: int
    distance_set: isl.Set | None
    distance: tuple[int, ...] | None
    bounds: tuple[tuple[int | None, int | None], ...]
    carried_depths: tuple[int, ...]
    loop_independent: bool


class LoopStructure:
    """The loop nesting of a schedule tree, answering "which loops do S and T share" for any pair.

    Built once per schedule; holds only the tree (immutable isl values) and each statement's leaf path.
    """

    def __init__(self, schedule: isl.Schedule) -> None:
        self._schedule = schedule
        paths: dict[str, Path] = {}
        _collect_leaf_paths(schedule.get_root(), (), paths)
        self._paths = paths
        self._prefix_cache: dict[Path, isl.UnionMap | None] = {}

    def common_path(self, source: str, sink: str) -> Path:
        """The path (child positions from the root) of the deepest node both statements reach."""
        a, b = self._paths[source], self._paths[sink]
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return a[:n]

    def common_schedule(self, source: str, sink: str) -> isl.UnionMap | None:
        """``P``: each instance of either statement to its common-loop values; ``None`` if none shared."""
        path = self.common_path(source, sink)
        if path not in self._prefix_cache:
            node = self._schedule.get_root()
            for k in path:
                node = node.child(k)
            prefix = node.get_prefix_schedule_multi_union_pw_aff()
            if prefix.dim(isl.dim_type.out) == 0:
                self._prefix_cache[path] = None
            else:
                self._prefix_cache[path] = isl.UnionMap.from_multi_union_pw_aff(prefix)
        return self._prefix_cache[path]

    def distance(self, relation: isl.Map) -> LoopDistance:
        """The :class:`LoopDistance` of ``relation`` (a map from source instances to sink instances)."""
        source = relation.get_tuple_name(isl.dim_type.in_)
        sink = relation.get_tuple_name(isl.dim_type.out)
        prefix = self.common_schedule(source, sink)
        if prefix is None:
            return LoopDistance(0, None, (), (), (), True)
        on_loops = isl.UnionMap.from_map(relation).apply_domain(prefix).apply_range(prefix)
        deltas = on_loops.deltas().as_set().coalesce()
        return _summarise(deltas)


def _collect_leaf_paths(node: isl.ScheduleNode, path: Path, out: dict[str, Path]) -> None:
    """Record the leaf path of every statement; one reaching several leaves keeps their common prefix."""
    if node.get_type() == isl.schedule_node_type.leaf:
        names: list[str] = []
        node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
        for name in names:
            old = out.get(name)
            out[name] = path if old is None else _common_prefix(old, path)
        return
    for k in range(node.n_children()):
        _collect_leaf_paths(node.child(k), (*path, k), out)


def _common_prefix(a: Path, b: Path) -> Path:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _summarise(deltas: isl.Set) -> LoopDistance:
    """Read constant distance, per-depth bounds and carrying depths off a distance set."""
    depth = deltas.dim(isl.dim_type.set)
    # Bounds over every size-parameter value: project the params away, then read each dimension's range.
    flat = deltas.project_out(isl.dim_type.param, 0, deltas.dim(isl.dim_type.param))
    bounds = tuple((_finite(flat.dim_min_val(k)), _finite(flat.dim_max_val(k))) for k in range(depth))
    uniform = all(lo is not None and lo == hi for lo, hi in bounds) and not flat.is_empty()
    distance = tuple(lo for lo, _ in bounds) if uniform else None  # type: ignore[misc]
    carried: list[int] = []
    prefix_zero = deltas
    for c in range(depth):
        if not prefix_zero.lower_bound_val(isl.dim_type.set, c, 1).is_empty():
            carried.append(c)
        prefix_zero = prefix_zero.fix_val(isl.dim_type.set, c, 0)
    return LoopDistance(depth, deltas, distance, bounds, tuple(carried), not prefix_zero.is_empty())


def _finite(v: isl.Val) -> int | None:
    return int(v.to_python()) if v.is_int() else None
