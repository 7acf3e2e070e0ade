"""Deciding what to promote in a CUDA kernel, and rewriting the compute to use it (steps 2 and 4 of the
data-movement pass; ``movement.py`` runs it and states the whole scheme).

* **Shared memory**, at the ``block`` mark: ``shared.py`` (reuse across threads, or uncoalesced accesses;
  copy-in, copy-out and barriers).
* **Registers**, below the thread band (prefix ``q`` = ``p``, thread coordinates): an array of which each
  ``q`` touches exactly one element, touched by no other thread, and accessed more than once per ``q``
  (an accumulator ``C[i,j] += ...`` over ``kk``) is loaded into ``X_reg_kN`` before (unless every read
  of it in ``q`` follows a write in ``q``) and stored after (when written). Read-only arrays re-read
  along the thread's innermost sequential loop get register windows (``registers.py``), planned on the
  tree before any copy is grafted and left out when ``shared.py`` would stage the array.

:class:`KernelWork` holds what both share for one kernel: the statements rewritten so far, the buffers,
fresh names, and the access maps of the kernel's statements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.ir.program import Access, Program, Statement
from polyfuse.schedule.bands import T
from polyfuse.schedule.model import KERNEL_MARK, Buffer, Kernel, Promotion
from polyfuse.schedule.movement.access_patterns import live_in_reads
from polyfuse.schedule.movement.barriers import sync_statement
from polyfuse.schedule.movement.copies import register_copy
from polyfuse.schedule.movement.kernel_tree import count_kernels, identity, kernel_mark, kernel_parts, root, tile_band_above
from polyfuse.schedule.movement.registers import apply_windows, plan_windows
from polyfuse.schedule.movement.shared import promote_shared, shared_arrays
from polyfuse.schedule.movement.shared import shared_candidates as _shared_candidates

DEFAULT_SHARED_BYTES = 48 * 1024
REPRESENTATIVE_SIZE = 1024  # size of params without a value when counting reuse


def promote(
    prog: Program,
    tree: isl.Schedule,
    contracted: frozenset[str] = frozenset(),
    budget: int = DEFAULT_SHARED_BYTES,
    registers: bool = True,
    sizes: Mapping[str, int] | None = None,
) -> tuple[isl.Schedule, Promotion | None]:
    """Insert shared-memory and register copies into ``tree`` (steps 2-4 of ``movement.py``).

    Returns the tree with extension nodes (for code generation only: ``get_map`` cannot flatten it) and
    the :class:`Promotion`; ``None`` when nothing was promoted.
    """
    buffers: list[Buffer] = []
    statements: dict[str, Statement] = {}
    barriers: list[str] = []
    kernels: dict[str, Kernel] = {}
    for n in range(count_kernels(tree)):
        mark = kernel_mark(tree, n)
        kernel = mark.mark_get_id().user
        parts = kernel_parts(mark)
        if parts is None or not isinstance(kernel, Kernel):
            continue
        work = KernelWork(prog, kernel, n, contracted, statements)
        work.sizes = dict(sizes or {})
        rest = _rest_schedule(parts[1])  # before register copies are grafted below the thread band
        if registers:
            windows = plan_windows(work, parts[1])  # analysed before anything is grafted
            if windows:
                staged = shared_arrays(work, parts[1], budget, rest)
                windows = [w for w in windows if w.array not in staged]
            tree = work.registers(parts[1])
            tree = apply_windows(work, tree, n, windows)
            parts = kernel_parts(kernel_mark(tree, n))
        tree = promote_shared(work, parts[1], budget, rest)
        if work.buffers:
            buffers.extend(work.buffers)
            barriers.extend(work.barriers)
            shared = sum(b.nbytes for b in work.buffers if b.space == "shared")
            new = dataclasses.replace(kernel, shared_bytes=kernel.shared_bytes + shared)
            kernels[kernel.name] = new
            node = kernel_mark(tree, n).delete().insert_mark(isl.Id(KERNEL_MARK, user=new))
            tree = node.get_schedule()
    if not buffers:
        return tree, None
    return tree, Promotion(tree, tuple(buffers), dict(statements), frozenset(barriers), dict(kernels))


def shared_candidates(prog: Program, kernel: Kernel, contracted: frozenset[str], block: isl.ScheduleNode) -> list[str]:
    """Arrays read (never written) in ``kernel`` of which one tile's threads read some element twice
    (``block``: its ``block`` mark)."""
    return _shared_candidates(KernelWork(prog, kernel, 0, contracted, {}), block)


# ----- one kernel -------------------------------------------------------------------------------------


class KernelWork:
    """One kernel's promotion work (shared by ``shared.py`` and the register promotion below)."""

    def __init__(self, prog: Program, kernel: Kernel, index: int, contracted, statements: dict[str, Statement]):
        self.prog = prog
        self.kernel = kernel
        self.tag = f"k{index}"
        self.contracted = contracted
        self.statements = statements  # shared across kernels: rewritten compute statements by name
        self.buffers: list[Buffer] = []
        self.barriers: list[str] = []
        self.block_sizes = tuple(reversed(kernel.block))  # outermost member first
        self.sizes: Mapping[str, int] = {}

    def stmt(self, name: str) -> Statement:
        return self.statements.get(name) or self.prog.statement(name)

    def names(self, domain: isl.UnionSet) -> list[str]:
        """The program statements (not copies) with instances in ``domain``."""
        out: list[str] = []
        domain.foreach_set(lambda s: out.append(s.get_tuple_name()))
        return [n for n in out if n in {s.name for s in self.prog.statements}]

    def accesses(self, names: Sequence[str], array: str, kinds=("read", "write", "update")) -> list[isl.UnionMap]:
        """One map (instance -> element, on the statement's domain) per access of ``array`` of ``kinds``."""
        out = []
        for n in names:
            st = self.stmt(n)
            out.extend(isl.UnionMap.from_map(a.relation.intersect_domain(st.domain)) for a in st.accesses
                       if a.array == array and a.kind in kinds)
        return out

    def access(self, names: Sequence[str], array: str, kinds=("read", "write", "update")) -> isl.UnionMap | None:
        """The union of :meth:`accesses` (``None`` when there is none)."""
        out = None
        for m in self.accesses(names, array, kinds):
            out = m if out is None else out.union(m)
        return out

    def to_buffers(self, names: Sequence[str], buffers: set[str], kinds) -> isl.UnionMap | None:
        """instance -> element of any of ``buffers`` accessed with ``kinds`` (after the rewrites)."""
        out = None
        for b in sorted(buffers):
            m = self.access(names, b, kinds)
            if m is not None:
                out = m if out is None else out.union(m)
        return out

    def arrays(self, names: Sequence[str]) -> list[str]:
        """Arrays of ``names`` that may be promoted: with a global buffer (not contracted) and a dimension."""
        seen = dict.fromkeys(a.array for n in names for a in self.stmt(n).accesses)
        return [x for x in seen if x in self.prog.arrays and x not in self.contracted and self.prog.arrays[x].ndim > 0]

    def fresh(self, base: str) -> str:
        """``base``, made unique among arrays and statements."""
        taken = set(self.prog.arrays) | {s.name for s in self.prog.statements} | set(self.statements)
        name = base
        while name in taken:
            name += "_"
        return name

    # -- shared by both ----------------------------------------------------------------------------------

    def sync(self, prefixes: isl.UnionSet) -> isl.ScheduleNode:
        """A new barrier statement over ``prefixes``; returns the extension node to graft."""
        name = self.fresh(f"sync_{self.tag}_{len(self.barriers)}")
        self.statements[name], node = sync_statement(name, prefixes)
        self.barriers.append(name)
        return node

    def reuse(self, names, x, prefix: isl.UnionMap, foot: isl.Map) -> float:
        """Accesses per footprint element in one (the first) tile; 0 when it cannot be counted."""
        try:
            fixed = isl.Set.universe(self.prog.context.get_space().params())
            for k, name in enumerate(fixed.get_var_names(isl.dim_type.param)):
                value = int(self.sizes.get(name, REPRESENTATIVE_SIZE))
                fixed = fixed.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(fixed.get_ctx(), value))
            foot = foot.intersect_params(fixed)
            prefix = prefix.intersect_params(fixed)
            p0 = foot.domain().lexmin()
            if p0.is_empty():
                return 0.0
            elems = foot.intersect_domain(p0).range().count_val().to_python()
            inst = prefix.intersect_range(isl.UnionSet.from_set(p0)).domain()
            total = 0
            for nm in names:
                st = self.stmt(nm)
                k = sum(1 for a in st.accesses if a.array == x)
                if k:
                    part = inst.intersect(isl.UnionSet.from_set(st.domain))
                    if not part.is_empty():
                        total += k * isl.Set.from_union_set(part).count_val().to_python()
            return total / elems if elems else 0.0
        except (isl.Error, ValueError):
            return 0.0

    def rewrite(self, names, x: str, buf: str, offset_of) -> None:
        """Redirect every access of ``x`` in ``names`` to ``buf[acc - offset_of(statement)]``."""
        for nm in names:
            st = self.stmt(nm)
            if not any(a.array == x for a in st.accesses):
                continue
            accesses = []
            for a in st.accesses:
                if a.array == x:
                    f = a.function.intersect_domain(st.domain).sub(offset_of(st)).set_tuple_id(isl.dim_type.out, isl.Id(buf))
                    a = Access(buf, a.kind, isl.Map.from_pw_multi_aff(f), a.text)
                accesses.append(a)
            self.statements[nm] = dataclasses.replace(st, accesses=tuple(accesses))

    # -- registers ----------------------------------------------------------------------------------------

    def registers(self, block: isl.ScheduleNode) -> isl.Schedule:
        point = block.child(0)
        node = point.child(0)
        if node.get_type() == T.leaf:
            return node.get_schedule()
        domain = node.get_domain()
        names = self.names(domain)
        q = node.get_prefix_schedule_union_map().intersect_domain(domain)
        tile = tile_band_above(block)
        phys = tile.get_prefix_schedule_union_map().intersect_domain(domain).flat_range_product(
            tile.band_get_partial_schedule_union_map()).flat_range_product(point.band_get_partial_schedule_union_map())
        nphys = tile.get_schedule_depth() + tile.band_n_member() + point.band_n_member()
        time = q.flat_range_product(node.get_subtree_schedule_union_map().intersect_domain(domain))
        for x in self.arrays(names):
            acc = self.access(names, x)
            if acc is None:
                continue
            users = acc.domain()
            qx = q.intersect_domain(users)
            if qx.is_injective():
                continue  # one access per thread iteration: nothing to keep in a register
            if self._several_elements(names, x):
                continue  # some instance touches two elements (a stencil): cheap to see, costly for isl below
            foot = qx.reverse().apply_range(acc)
            if not foot.is_single_valued():
                continue
            r = phys.reverse().apply_range(acc)
            if not r.apply_range(r.reverse()).subtract(isl.UnionMap.from_map(identity(nphys))).is_empty():
                continue  # another thread touches the same element
            writes = self.access(names, x, ("write", "update"))
            # no load when every read of the element in its thread iteration follows a write of it there
            live = writes is None or live_in_reads(self.accesses(names, x, ("read", "update")), writes, time, q) is not None
            arr = self.prog.arrays[x]
            reg = self.fresh(f"{x}_reg_{self.tag}")
            self.buffers.append(Buffer(reg, x, self.kernel.name, "register", (), arr.dtype, 0.0))
            self._rewrite_scalar(names, x, reg)
            fmap = isl.Map.from_union_map(foot)
            if live:
                load = self.fresh(f"load_{reg}")
                node = node.graft_before(root(self._reg_copy(load, fmap, reg, x, arr.dtype, into_register=True)))
            if writes is not None:
                store = self.fresh(f"store_{reg}")
                node = node.graft_after(root(self._reg_copy(store, fmap, reg, x, arr.dtype, into_register=False)))
        return node.get_schedule()

    def _several_elements(self, names: Sequence[str], x: str) -> bool:
        """Whether some instance of ``names`` touches two different elements of ``x`` (two accesses of one
        statement whose functions differ on its domain): then no thread iteration touches a single element."""
        for nm in names:
            st = self.stmt(nm)
            rels = [a.relation.intersect_domain(st.domain).intersect_params(self.prog.context)
                    for a in st.accesses if a.array == x]
            if any(not r.is_equal(rels[0]) for r in rels[1:]):
                return True
        return False

    def _reg_copy(self, name: str, fmap: isl.Map, reg: str, x: str, dtype, into_register: bool) -> isl.ScheduleNode:
        self.statements[name], node = register_copy(name, fmap, reg, x, dtype, into_register)
        return node

    def _rewrite_scalar(self, names, x: str, reg: str) -> None:
        for nm in names:
            st = self.stmt(nm)
            if not any(a.array == x for a in st.accesses):
                continue
            space0 = isl.Set.universe(isl.Space.set_alloc(st.domain.get_ctx(), 0, 0)).set_tuple_name(reg)
            rel = isl.Map.from_domain_and_range(st.domain, space0.align_params(st.domain.get_space()))
            accesses = tuple(Access(reg, a.kind, rel, a.text) if a.array == x else a for a in st.accesses)
            self.statements[nm] = dataclasses.replace(st, accesses=accesses)


# ----- helpers ----------------------------------------------------------------------------------------


def _rest_schedule(block: isl.ScheduleNode) -> isl.UnionMap | None:
    """The schedule of the subtree below the point band under ``block`` (``None`` when it is a leaf)."""
    rest = block.child(0).child(0)
    if rest.get_type() == T.leaf:
        return None
    return rest.get_subtree_schedule_union_map()
