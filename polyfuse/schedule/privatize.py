"""Array contraction: temporaries that live in one scalar per thread instead of a global buffer.

A temporary ``X`` (role ``temp``: never read before the program writes it, never read after) is
contracted when, for the one kernel that accesses it, there is a depth ``d`` of the flattened schedule
``F`` (``tree.get_map()``) at or below the kernel's thread dimensions such that, with ``P_d`` the first
``d`` dimensions of ``F``:

1. every flow dependence of ``X`` links instances with equal ``P_d`` (each value is produced and consumed
   in one iteration of ``P_d``, hence by one thread), and
2. all accesses of ``X`` made in one iteration of ``P_d`` touch one element (``P_d^-1 . A_X`` is
   single-valued).

Then each thread needs one scalar, reused by its successive ``P_d`` iterations (they run one after the
other), and the schedule is legal if it orders the anti and output dependences of ``X`` *within* each
``P_d`` iteration: :func:`polyfuse.analysis.legality.check_schedule` is given ``P_d`` as ``X``'s
privatisation map. The largest such ``d`` is taken (fewest ordering constraints left).
"""

from __future__ import annotations

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.bands import DepView
from polyfuse.schedule.mapping.kernels import KernelInfo


def temporaries(prog: Program) -> frozenset[str]:
    return frozenset(n for n, a in prog.arrays.items() if a.role == "temp")


def contract(prog: Program, tree: isl.Schedule, kernels: tuple[KernelInfo, ...], view: DepView) -> dict[str, isl.UnionMap]:
    """The contracted temporaries, each with its privatisation map ``P_d`` (see the module docstring).

    A temporary several kernels use (deriche's ``ym1``, reset at the start of every row of two different
    passes) is contracted when no value of it flows from one kernel to another: each kernel then has a
    scalar of its own, and ``P_d`` is the union of the kernels' maps, each at its own depth."""
    flat = tree.get_map()
    out: dict[str, isl.UnionMap] = {}
    accesses = prog.access_relations(("read", "write", "update"))
    home_of: dict[str, int] = {}
    for k, info in enumerate(kernels):
        names: list[str] = []
        info.domain.foreach_set(lambda st: names.append(st.get_tuple_name()))
        for name in names:
            home_of.setdefault(name, k)
    for x in sorted(temporaries(prog)):
        users = _accessing(prog, x)
        if not users or any(s not in home_of for s in users):
            continue
        if any(d.kind == "flow" and d.array == x and home_of.get(d.source) != home_of.get(d.sink) for d in view.deps):
            continue  # a value crosses from one kernel to another (by statement: no isl needed)
        homes = [kernels[k] for k in sorted({home_of[s] for s in users})]
        flow = view.union(("flow",), arrays=(x,))
        acc = accesses.intersect_range(_array_universe(prog, x))
        maps = [_home_map(prog, flat, home, {s for s in users if _in(home.domain, s)}, flow, acc) for home in homes]
        if any(m is None for m in maps):
            continue
        p = maps[0]
        for m in maps[1:]:
            p = p.union(m)
        if flows_within(flow, p):  # (no value crosses from one kernel to another)
            out[x] = p
    return out


def _home_map(prog: Program, flat: isl.UnionMap, home: KernelInfo, users: set[str], flow: isl.UnionMap,
              acc: isl.UnionMap) -> isl.UnionMap | None:
    """``P_d`` for the statements ``users`` of one kernel (the deepest ``d`` that works), or ``None``."""
    dom = isl.UnionSet.empty(prog.context.get_space())
    for s in prog.statements:
        if s.name in users:
            dom = dom.union(isl.UnionSet.from_set(s.domain))
    f = flat.intersect_domain(dom)
    flow = flow.intersect_domain(dom).intersect_range(dom)
    acc = acc.intersect_domain(dom)
    # Condition 1 holds for every depth up to some d* and for none below it (equal at d dimensions, equal at
    # fewer), condition 2 from some depth on (fewer accesses per deeper iteration): the deepest depth that
    # works is d* when condition 2 holds there, else there is none. d* by bisection.
    lo, hi = home.flat_depth, _width(f)
    if lo > hi or not flows_within(flow, schedule_prefix(f, lo)):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if flows_within(flow, schedule_prefix(f, mid)):
            lo = mid
        else:
            hi = mid - 1
    p = schedule_prefix(f, lo)
    return p if p.reverse().apply_range(acc).is_single_valued() else None


def flows_within(flow: isl.UnionMap, p: isl.UnionMap) -> bool:
    """Whether every pair of ``flow`` has equal ``p`` values: ``flow`` within ``{ s -> t : p(s) = p(t) }``,
    asked on the images ``p(s) -> p(t)`` (building that relation pairs every two statements of ``p``)."""
    images = flow.apply_domain(p).apply_range(p)
    return images.is_subset(images.domain().identity())


def _accessing(prog: Program, array: str) -> set[str]:
    return {s.name for s in prog.statements if any(a.array == array for a in s.accesses)}


def _in(domain: isl.UnionSet, stmt: str) -> bool:
    names: list[str] = []
    domain.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return stmt in names


def _width(umap: isl.UnionMap) -> int:
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    return max((m.dim(isl.dim_type.out) for m in maps), default=0)


def schedule_prefix(umap: isl.UnionMap, d: int) -> isl.UnionMap:
    """``umap`` (a flattened schedule) with only its first ``d`` output dimensions."""
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    out = None
    for m in maps:
        n = m.dim(isl.dim_type.out)
        u = isl.UnionMap.from_map(m.project_out(isl.dim_type.out, d, n - d) if n > d else m)
        out = u if out is None else out.union(u)
    return out


def _array_universe(prog: Program, array: str) -> isl.UnionSet:
    ndim = prog.arrays[array].ndim
    space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=[f"a{k}" for k in range(ndim)], params=list(prog.params))
    return isl.UnionSet.from_set(isl.Set.universe(space).set_tuple_name(array))
