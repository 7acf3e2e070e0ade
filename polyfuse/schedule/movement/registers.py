"""Register windows: per-thread reuse of a read-only array along the thread's innermost sequential loop
(step 4 of ``movement.py``, next to the accumulators of ``promotion.py``).

Below the thread band a CUDA thread may run sequential loops (heat-3d's ``k`` when ``i, j`` map to
threads, the hoisted ``kk`` of a tiled reduction, the dimensions an explicit tile leaves unmapped). Take an
**innermost band** ``L`` there (no band below it) and ``s`` its last member; the time of an instance at
``L`` is ``(q', s)`` (``q'`` everything above ``s``: host dims, tile and thread coordinates, outer
sequential loops). For an array ``X`` the kernel only reads, each read access seen from the time,
``g(q', s) = Acc o Sched^-1``, is an affine function when the schedule is injective on its statement. Two
reads are in one **group** when their functions differ only by a constant ``c = delta * v``, ``v`` the
(non-zero) coefficient vector of ``s`` (isl gives both): the read with offset ``delta`` sees at iteration
``s`` what the one with offset 0 sees at ``s + delta``. With offsets ``0 .. D`` (``D <= MAX_SPAN``), the
group's elements at iteration ``s`` are ``E(s + j)``, ``j = 0 .. D``, ``E`` the function of offset 0; they
are kept in the registers ``X_wj_kN`` and the reads are redirected to them:

* ``winit_X_wj[q']: X_wj = X[E(q', s_min(q') + j)]`` for ``j < D``, before the loop (``s_min`` the first
  iteration: isl's ``lexmin``);
* ``wload_X[q', s]: X_wD = X[E(q', s + D)]`` at the start of every iteration;
* the compute, reading ``X_w(delta)``;
* ``wrot_X_wj[q', s]: X_wj = X_w(j+1)``, ``j = 0 .. D-1`` in order, at the end of every iteration.

So each element of the window is loaded from global memory once per thread (and per run of the loop),
instead of once per read. ``D = 0`` (several reads of one element in one iteration) is one register loaded
per iteration. Conditions, all checked with isl: the reads of a group run at the same iterations ``I``, and
for each ``q'`` the ``s`` of ``I`` are an interval (the window moves by one at each step). Every element
loaded lies between two elements one iteration reads (a box array is convex), so no load leaves the array.
Arrays that go to shared memory (``shared.py``) are left to it. The statements are placed by extension
nodes, like the other copies; the compute tree (legality, traffic) is unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import islpy as isl

from polyfuse.ir.program import Access
from polyfuse.schedule.bands import T
from polyfuse.schedule.model import Buffer
from polyfuse.schedule.movement.copies import register_copy
from polyfuse.schedule.movement.kernel_tree import kernel_mark, kernel_parts, root

if TYPE_CHECKING:
    from polyfuse.schedule.movement.promotion import KernelWork

MAX_SPAN = 4  # the largest reuse distance kept in registers (a window of MAX_SPAN + 1 registers)


@dataclasses.dataclass(frozen=True)
class Window:
    """One array's window along the last member of the ``band``-th innermost band of a kernel.

    ``reads``: ``(statement, access index, offset)`` of the redirected reads; ``span``: ``D``; ``time``:
    the iterations ``I`` (a set of ``(q', s)``); ``base``: ``E``, time -> element of offset 0 (affine)."""

    band: int
    array: str
    reads: tuple[tuple[str, int, int], ...]
    span: int
    time: isl.Set
    base: isl.MultiAff


def innermost_bands(point: isl.ScheduleNode) -> list[isl.ScheduleNode]:
    """The band nodes below the point band ``point`` with no band below them, depth first."""
    out: list[isl.ScheduleNode] = []

    def visit(node: isl.ScheduleNode) -> bool:
        below = any([visit(node.child(k)) for k in range(node.n_children())])
        if node.get_type() == T.band and not below:
            out.append(node)
        return below or node.get_type() == T.band

    for k in range(point.n_children()):
        visit(point.child(k))
    return out


def plan_windows(work: KernelWork, block: isl.ScheduleNode) -> list[Window]:
    """The register windows of the kernel whose ``block`` mark is given (on a tree without copies)."""
    kernel_names = work.names(block.get_domain())
    out: list[Window] = []
    for b, band in enumerate(innermost_bands(block.child(0))):
        below = band.child(0)
        names = work.names(band.get_domain())
        time = below.get_prefix_schedule_union_map().intersect_domain(band.get_domain())
        depth = below.get_schedule_depth()
        for x in work.arrays(names):
            if work.access(kernel_names, x, ("write", "update")) is not None:
                continue
            for reads in _groups(work, names, x, time, depth):
                w = _window(work, b, x, reads, depth)
                if w is not None:
                    out.append(w)
    return out


def apply_windows(work: KernelWork, tree: isl.Schedule, n: int, windows: list[Window]) -> isl.Schedule:
    """Add the statements and registers of ``windows`` to kernel ``n`` of ``tree`` and redirect the reads."""
    for w in windows:
        parts = kernel_parts(kernel_mark(tree, n))
        band = innermost_bands(parts[1].child(0))[w.band]
        if band.band_n_member() > 1:  # the window moves with the last member alone: split it off
            band = band.band_split(band.band_n_member() - 1).child(0)
        arr = work.prog.arrays[w.array]
        regs = [work.fresh(f"{w.array}_w{j}_{work.tag}") for j in range(w.span + 1)]
        window = f"register window {regs[0]}..{regs[-1]} along the thread's innermost loop"
        for j, reg in enumerate(regs):
            why = (f"{window} (reuse distance {w.span}; one global load per iteration)" if j == 0 and w.span else
                   f"{window} (re-read within one iteration)" if j == 0 else f"slot {j} of the {window}")
            work.buffers.append(Buffer(reg, w.array, work.kernel.name, "register", (), arr.dtype, 0.0, why=why))
        for nm in dict.fromkeys(s for s, _, _ in w.reads):
            st = work.stmt(nm)
            offsets = {k: d for s, k, d in w.reads if s == nm}
            accesses = tuple(Access(regs[offsets[k]], a.kind, _scalar(st.domain, regs[offsets[k]]), a.text) if k in offsets else a
                             for k, a in enumerate(st.accesses))
            work.statements[nm] = dataclasses.replace(st, accesses=accesses)
        depth = w.time.dim(isl.dim_type.set)
        first = w.time.lexmin() if depth == 1 else isl.Map.from_domain(w.time).move_dims(
            isl.dim_type.out, 0, isl.dim_type.in_, depth - 1, 1).lexmin().wrap().flatten()
        for j in range(w.span):
            elems = isl.Map.from_multi_aff(_shift(w.base, j)).intersect_domain(first).project_out(isl.dim_type.in_, depth - 1, 1)
            band = band.graft_before(root(_copy(work, f"winit_{regs[j]}", elems, regs[j], w.array, arr.dtype)))
        node = band.child(0)
        last = isl.Map.from_multi_aff(_shift(w.base, w.span)).intersect_domain(w.time)
        node = node.graft_before(root(_copy(work, f"wload_{w.array}_{work.tag}", last, regs[-1], w.array, arr.dtype)))
        for j in reversed(range(w.span)):  # graft_after puts each right after the compute: last one first
            node = node.graft_after(root(_copy(work, f"wrot_{regs[j]}", _scalar(w.time, regs[j + 1]), regs[j], regs[j + 1], arr.dtype)))
        tree = node.get_schedule()
    return tree


# ----- analysis ------------------------------------------------------------------------------------------


def _groups(work: KernelWork, names, x: str, time: isl.UnionMap, depth: int) -> list[list[tuple]]:
    """The reads of ``x`` grouped as in the module docstring: lists of ``(statement, access index, offset
    from the group's first read, iterations, time -> element)``; ``[]`` when some read is not affine in the
    time."""
    groups: list[list[tuple]] = []
    for nm in names:
        st = work.stmt(nm)
        if not any(a.array == x for a in st.accesses):
            continue
        sched = time.intersect_domain(isl.UnionSet.from_set(st.domain))
        if sched.is_empty() or not sched.is_injective():
            return []
        sched = isl.Map.from_union_map(sched)
        for k, a in enumerate(st.accesses):
            if a.array != x:
                continue
            f = _affine(sched.reverse().apply_range(a.relation.intersect_domain(st.domain)), work.prog.context)
            if f is None:
                return []
            iters, g = f
            if not _moves(g, depth - 1):
                continue  # the same element at every iteration: stays a global read
            for group in groups:
                delta = _offset(group[0][4], g, depth - 1)
                if delta is not None:
                    group.append((nm, k, delta, iters, g))
                    break
            else:
                groups.append([(nm, k, 0, iters, g)])
    return groups


def _window(work: KernelWork, band: int, x: str, reads: list[tuple], depth: int) -> Window | None:
    """The window of one group, or ``None`` when it does not pay or its conditions fail."""
    offsets = [d for _, _, d, _, _ in reads]
    lo, span = min(offsets), max(offsets) - min(offsets)
    if span > MAX_SPAN or (span == 0 and len(reads) < 2):
        return None
    iters = reads[0][3]
    if any(not r[3].is_equal(iters) for r in reads[1:]) or not _intervals(iters, work.prog.context):
        return None
    base = _shift(reads[0][4], lo)
    return Window(band, x, tuple((nm, k, d - lo) for nm, k, d, _, _ in reads), span, iters, base)


def _affine(g: isl.Map, context: isl.Set) -> tuple[isl.Set, isl.MultiAff] | None:
    """``(domain, f)`` when ``g`` (time -> element) is one affine function without integer divisions on
    its domain."""
    if not g.is_single_valued():
        return None
    pieces: list[tuple[isl.Set, isl.MultiAff]] = []
    isl.PwMultiAff.from_map(g).foreach_piece(lambda s, ma: pieces.append((s, ma)))
    if len(pieces) != 1:
        return None
    dom, ma = pieces[0]
    affs = [ma.get_aff(d) for d in range(ma.dim(isl.dim_type.out))]
    if any(a.dim(isl.dim_type.div) for a in affs):
        return None
    return dom.intersect_params(context), ma


def _moves(f: isl.MultiAff, s: int) -> bool:
    """Whether the element ``f`` names changes with the time coordinate ``s``."""
    return any(not f.get_aff(d).get_coefficient_val(isl.dim_type.in_, s).is_zero() for d in range(f.dim(isl.dim_type.out)))


def _offset(f: isl.MultiAff, g: isl.MultiAff, s: int) -> int | None:
    """``delta`` with ``g(q', s) = f(q', s + delta)`` for all ``(q', s)``, else ``None``."""
    delta = None
    for d in range(f.dim(isl.dim_type.out)):
        a, b = f.get_aff(d), g.get_aff(d)
        diff = b.sub(a)
        if not diff.is_cst():
            return None
        c = diff.get_constant_val().to_python()
        v = a.get_coefficient_val(isl.dim_type.in_, s).to_python()
        if v == 0:
            if c != 0:
                return None
            continue
        if c % v or (delta is not None and c // v != delta):
            return None
        delta = c // v
    return delta


def _intervals(iters: isl.Set, context: isl.Set) -> bool:
    """Whether, for each ``q'``, the ``s`` with ``(q', s)`` in ``iters`` are all the integers between the
    first and the last."""
    n = iters.dim(isl.dim_type.set)
    m = isl.Map.from_domain(iters).move_dims(isl.dim_type.out, 0, isl.dim_type.in_, n - 1, 1)
    one = isl.Space.set_alloc(iters.get_ctx(), 0, 1)
    between = m.lexmin().apply_range(isl.Map.lex_le(one)).intersect(m.lexmax().apply_range(isl.Map.lex_ge(one)))
    return between.intersect_params(context).is_subset(m)


def _shift(f: isl.MultiAff, j: int) -> isl.MultiAff:
    """``(q', s) -> f(q', s + j)``: ``f`` plus ``j`` times its coefficients of ``s``."""
    s = f.dim(isl.dim_type.in_) - 1
    for d in range(f.dim(isl.dim_type.out)):
        a = f.get_aff(d)
        step = a.get_coefficient_val(isl.dim_type.in_, s).to_python() * j
        f = f.set_aff(d, a.set_constant_val(a.get_constant_val().add(isl.Val.int_from_si(a.get_ctx(), step))))
    return f


# ----- statements ----------------------------------------------------------------------------------------


def _copy(work: KernelWork, base: str, fmap: isl.Map, reg: str, x: str, dtype) -> isl.ScheduleNode:
    name = work.fresh(base)
    work.statements[name], node = register_copy(name, fmap, reg, x, dtype, into_register=True)
    return node


def _scalar(dom: isl.Set, reg: str) -> isl.Map:
    """``dom -> reg[]``: an access of the 0-d register ``reg``."""
    space0 = isl.Set.universe(isl.Space.set_alloc(dom.get_ctx(), 0, 0)).set_tuple_name(reg)
    return isl.Map.from_domain_and_range(dom, space0.align_params(dom.get_space()))

