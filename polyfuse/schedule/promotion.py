"""Deciding what to promote in a CUDA kernel, and rewriting the compute to use it (steps 2 and 4 of the
data-movement pass; ``movement.py`` runs it and states the whole scheme).

* **Shared memory**, at the ``block`` mark (prefix ``p`` = host dims, tile coordinates, ``kt``): an array
  read (never written) in the kernel whose elements are read by more than one thread for one ``p`` (an
  exact isl test: ``R o R^-1`` minus the identity is not empty, ``R`` = thread -> element) gets the
  buffer ``X_shared_kN[s0]..[sr]``, ``s`` the sizes of the per-tile footprint box ``F = P^-1 o Acc``
  (``footprint_box.py``) whose offset ``off(p)`` is affine in ``p``. Compute accesses become
  ``X_shared[acc(i) - off(P(i))]``; the copy statement comes from ``copies.py``, the barriers it needs
  from ``barriers.py``. Arrays are taken in order of reuse (accesses per footprint element in one tile)
  while the buffers fit ``budget`` bytes.
* **Registers**, below the thread band (prefix ``q`` = ``p``, thread coordinates): an array of which each
  ``q`` touches exactly one element, touched by no other thread, and accessed more than once per ``q``
  (an accumulator ``C[i,j] += ...`` over ``kk``) is loaded into ``X_reg_kN`` before and stored after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.analysis.checks import array_extent
from polyfuse.ir.program import Access, Program, Statement
from polyfuse.schedule.bands import T
from polyfuse.schedule.barriers import barriers_needed, sync_statement
from polyfuse.schedule.copies import copy_statement, copy_threads, register_copy, shared_copy_tree
from polyfuse.schedule.footprint_box import box_map, fixed_box, volume
from polyfuse.schedule.kernel_tree import count_kernels, grid_end, identity, kernel_mark, kernel_parts, root, tile_band_above
from polyfuse.schedule.model import KERNEL_MARK, Buffer, Kernel, Promotion

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
        work = _KernelWork(prog, kernel, n, contracted, statements)
        work.sizes = dict(sizes or {})
        if registers:
            tree = work.registers(parts[1])
            parts = kernel_parts(kernel_mark(tree, n))
        tree = work.shared(parts[1], budget)
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
    return _KernelWork(prog, kernel, 0, contracted, {}).shared_candidates(block)


# ----- one kernel -------------------------------------------------------------------------------------


class _KernelWork:
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

    def _names(self, domain: isl.UnionSet) -> list[str]:
        out: list[str] = []
        domain.foreach_set(lambda s: out.append(s.get_tuple_name()))
        return [n for n in out if n in {s.name for s in self.prog.statements}]

    def _access(self, names: Sequence[str], array: str, kinds=("read", "write", "update")) -> isl.UnionMap:
        acc = None
        for n in names:
            st = self.stmt(n)
            for a in st.accesses:
                if a.array == array and a.kind in kinds:
                    m = isl.UnionMap.from_map(a.relation.intersect_domain(st.domain))
                    acc = m if acc is None else acc.union(m)
        return acc

    def _arrays(self, names: Sequence[str]) -> list[str]:
        seen = dict.fromkeys(a.array for n in names for a in self.stmt(n).accesses)
        return [x for x in seen if x in self.prog.arrays and x not in self.contracted and self.prog.arrays[x].ndim > 0]

    def _name(self, base: str) -> str:
        taken = set(self.prog.arrays) | {s.name for s in self.prog.statements} | set(self.statements)
        name = base
        while name in taken:
            name += "_"
        return name

    # -- shared memory ----------------------------------------------------------------------------------

    def shared(self, block: isl.ScheduleNode, budget: int) -> isl.Schedule:
        point = block.child(0)
        n = point.band_n_member()
        if len(self.block_sizes) != n:
            return block.get_schedule()
        domain = block.get_domain()
        names = self._names(domain)
        prefix = block.get_prefix_schedule_union_map().intersect_domain(domain)
        depth = block.get_schedule_depth()
        grid_depth = grid_end(block)
        thread = prefix.flat_range_product(point.band_get_partial_schedule_union_map())
        candidates = []
        for x in self.shared_candidates(block):
            acc = self._access(names, x)
            foot = isl.Map.from_union_map(prefix.reverse().apply_range(acc))
            box = fixed_box(foot)
            if box is None:
                continue
            offset, shape = box
            nbytes = volume(shape) * self.prog.arrays[x].dtype.numpy().itemsize
            reuse = self._reuse(names, x, prefix, foot)
            candidates.append((reuse, x, acc, foot, offset, shape, nbytes))
        candidates.sort(key=lambda c: -c[0])
        used = 0
        node = block
        copies: list[tuple[str, isl.UnionMap, isl.UnionMap, isl.UnionMap]] = []
        for reuse, x, acc, foot, offset, shape, nbytes in candidates:
            if used + nbytes > budget:
                continue
            used += nbytes
            buf = self._name(f"{x}_shared_{self.tag}")
            arr = self.prog.arrays[x]
            self.buffers.append(Buffer(buf, x, self.kernel.name, "shared", shape, arr.dtype, reuse))
            off = isl.PwMultiAff.from_multi_aff(offset)
            self._rewrite(names, x, buf, lambda s: off.pullback_pw_multi_aff(_pma(prefix, s)))
            box = box_map(foot.domain(), offset, shape).intersect_range(array_extent(arr, self.prog.params))
            box = box.intersect_params(self.prog.context)
            copy = self._name(f"copy_{buf}")
            ext, cst, local = copy_statement(copy, box, offset, x, buf, arr.dtype)
            self.statements[copy] = cst
            node = node.graft_before(shared_copy_tree(ext, local, n, self.block_sizes))
            threads = copy_threads(cst.domain, depth, local, n, self.block_sizes)
            copies.append((buf, isl.UnionMap.from_map(cst.accesses[0].relation), cst.domain, threads))
        if not copies:
            return node.get_schedule()
        reads = None
        for buf, *_ in copies:
            r = self._access(names, buf)
            reads = r if reads is None else reads.union(r)
        sync_before, sync_after = barriers_needed(copies, reads, prefix, thread, depth, n, grid_depth)
        prefixes = prefix.range()
        if sync_before:
            node = node.graft_before(root(self._sync(prefixes)))
        if sync_after:
            node = node.graft_after(root(self._sync(prefixes)))
        return node.get_schedule()

    def shared_candidates(self, block: isl.ScheduleNode) -> list[str]:
        """Arrays read (never written) in the kernel of which one tile's threads read some element twice."""
        point = block.child(0)
        domain = block.get_domain()
        names = self._names(domain)
        prefix = block.get_prefix_schedule_union_map().intersect_domain(domain)
        thread = prefix.flat_range_product(point.band_get_partial_schedule_union_map())
        dim = block.get_schedule_depth() + point.band_n_member()
        out = []
        for x in self._arrays(names):
            if self._access(names, x, ("write", "update")) is not None:
                continue  # only read-only arrays go to shared memory (no copy-out)
            r = thread.reverse().apply_range(self._access(names, x))
            if not r.apply_range(r.reverse()).subtract(isl.UnionMap.from_map(identity(dim))).is_empty():
                out.append(x)
        return out

    def _sync(self, prefixes: isl.UnionSet) -> isl.ScheduleNode:
        name = self._name(f"sync_{self.tag}_{len(self.barriers)}")
        self.statements[name], node = sync_statement(name, prefixes)
        self.barriers.append(name)
        return node

    def _reuse(self, names, x, prefix: isl.UnionMap, foot: isl.Map) -> float:
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

    def _rewrite(self, names, x: str, buf: str, offset_of) -> None:
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
        names = self._names(domain)
        q = node.get_prefix_schedule_union_map().intersect_domain(domain)
        tile = tile_band_above(block)
        phys = tile.get_prefix_schedule_union_map().intersect_domain(domain).flat_range_product(
            tile.band_get_partial_schedule_union_map()).flat_range_product(point.band_get_partial_schedule_union_map())
        nphys = tile.get_schedule_depth() + tile.band_n_member() + point.band_n_member()
        for x in self._arrays(names):
            acc = self._access(names, x)
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
            written = self._access(names, x, ("write", "update")) is not None
            arr = self.prog.arrays[x]
            reg = self._name(f"{x}_reg_{self.tag}")
            self.buffers.append(Buffer(reg, x, self.kernel.name, "register", (), arr.dtype, 0.0))
            self._rewrite_scalar(names, x, reg)
            fmap = isl.Map.from_union_map(foot)
            load = self._name(f"load_{reg}")
            node = node.graft_before(root(self._reg_copy(load, fmap, reg, x, arr.dtype, into_register=True)))
            if written:
                store = self._name(f"store_{reg}")
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


def _pma(prefix: isl.UnionMap, st: Statement) -> isl.PwMultiAff:
    return isl.PwMultiAff.from_map(isl.Map.from_union_map(prefix.intersect_domain(isl.UnionSet.from_set(st.domain))))
