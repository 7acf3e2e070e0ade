"""Explicit data movement for the CUDA target: shared-memory and register promotion as copy statements.

:func:`promote` runs after mapping (``mapping.py``) on a legal tree and returns the tree plus a
:class:`~polyfuse.schedule.model.Promotion`. Everything it adds is an ordinary statement placed in the
schedule tree by an isl **extension node** (``ScheduleNode.graft_before`` / ``graft_after``), so the AST
build prints copies like any statement and indexes them through isl.

Per CUDA kernel (``kernel`` -> ``grid`` -> tile band -> ``block`` -> point band -> rest):

1. **Reduction tiling.** When the rest is a band of the same permutable band (gemm's ``k``), it is tiled
   by ``K_TILE`` and its tile loop moved above the thread band:
   ``it, jt -> kt -> [block] ii, jj -> kk`` with ``k = K_TILE*kt + kk, 0 <= kk < K_TILE``. This is
   rectangular tiling of a permutable band, so legal; ``check_schedule`` re-checks it.
2. **Shared memory**, at the ``block`` mark (prefix ``p`` = host dims, tile coordinates, ``kt``): an array
   read (never written) in the kernel whose elements are read by more than one thread for one ``p`` (an
   exact isl test: ``R o R^-1`` minus the identity is not empty, ``R`` = thread -> element) gets the
   buffer ``X_shared_kN[s0]..[sr]``, the sizes ``s`` of ``get_range_simple_fixed_box_hull`` of the
   per-tile footprint ``F = P^-1 o Acc`` whose offset ``off(p)`` is affine in ``p``. The copy statement
   ``copy_X[p, e]: X_shared[e - off(p)] = X[e]`` runs over ``box(p) & extent(X)`` (never outside the array),
   with the thread band ``(e_d - off_d(p)) mod B_m`` on the last array dims (innermost dim <-> threadIdx.x:
   consecutive threads read consecutive addresses) and the rest as sequential loops. Compute accesses
   become ``X_shared[acc(i) - off(P(i))]``. Arrays are taken in order of reuse while the buffers fit
   ``budget`` bytes.
3. **Barriers** from the dependences on the buffers: ``sync`` before the compute when the flow
   dependence copy -> compute (same ``p``) joins different threads; ``sync`` after the compute when the
   anti dependence compute -> copy of a later ``p`` of the same block (next ``kt``) joins different threads.
   Barriers sit at the level of the ``kt`` loop, outside every thread guard, so every thread reaches them.
4. **Registers**, below the thread band (prefix ``q`` = ``p``, thread coordinates): an array of which each
   ``q`` touches exactly one element, touched by no other thread, and accessed more than once per ``q``
   (an accumulator ``C[i,j] += ...`` over ``kk``) is loaded into ``X_reg_kN`` before and stored after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.analysis.checks import array_extent
from polyfuse.analysis.legality import check_schedule
from polyfuse.errors import IllegalTransformError
from polyfuse.ir.expr import Const, Read
from polyfuse.ir.program import Access, Program, Statement
from polyfuse.schedule.bands import T
from polyfuse.schedule.model import BLOCK_MARK, GRID_MARK, KERNEL_MARK, Buffer, Kernel, Promotion
from polyfuse.schedule.tiling import tile_band
from polyfuse.types import i32

DEFAULT_SHARED_BYTES = 48 * 1024
REPRESENTATIVE_SIZE = 1024  # size of params without a value when counting reuse
K_TILE = 32


# ----- the pass ---------------------------------------------------------------------------------------


def data_movement(
    prog: Program,
    tree: isl.Schedule,
    kernels: tuple[Kernel, ...],
    privatized: Mapping[str, isl.UnionMap],
    budget: int = DEFAULT_SHARED_BYTES,
    sizes: Mapping[str, int] | None = None,
) -> tuple[isl.Schedule, tuple[Kernel, ...], Promotion | None]:
    """The whole pass for a CUDA schedule: reduction tiling (re-checked for legality), then promotion.

    Returns the compute tree (what legality and traffic see), the kernels with their ``shared_bytes``, and
    the promotion (``None`` when nothing was promoted).
    """
    contracted = frozenset(privatized)
    moved = restructure(prog, tree, contracted)
    if moved is not tree:
        try:
            check_schedule(prog, moved, privatized)
            tree = moved
        except IllegalTransformError:
            pass
    full, promotion = promote(prog, tree, contracted, budget, sizes=sizes)
    if promotion is None:
        return tree, kernels, None
    for n, mark in enumerate(_kernel_marks(tree)):
        k = promotion.kernels.get(mark.mark_get_id().user.name)
        if k is not None:
            tree = _kernel_mark(tree, n).delete().insert_mark(isl.Id(KERNEL_MARK, user=k)).get_schedule()
    kernels = tuple(promotion.kernels.get(k.name, k) for k in kernels)
    return tree, kernels, dataclasses.replace(promotion, tree=full)


def restructure(prog: Program, tree: isl.Schedule, contracted: frozenset[str] = frozenset(), k_tile: int = K_TILE) -> isl.Schedule:
    """Tile the sequential rest of a CUDA kernel's permutable band and hoist its tile loop above the
    thread band (step 1 of the module docstring), in kernels where some read-only array is read by several
    threads of a block. Other kernels are unchanged; returns ``tree`` itself when nothing changed."""
    for n in range(_count_kernels(tree)):
        mark = _kernel_mark(tree, n)
        parts = _parts(mark)
        if parts is None or not isinstance(mark.mark_get_id().user, Kernel):
            continue
        tile, block = parts
        if block.parent().get_type() == T.band and block.parent() != tile:
            continue
        if not _KernelWork(prog, mark.mark_get_id().user, n, contracted, {}).shared_candidates(block):
            continue
        point = block.child(0)
        rest = point.child(0)
        if not (rest.get_type() == T.band and tile.band_get_permutable() and rest.band_get_permutable()):
            continue
        if rest.band_n_member() > 1 and _touches_private(prog, rest, contracted):
            # tiling several members reorders each thread's own instances, which a per-thread register
            # (contracted temporary, 0-d temporary) may not survive; check_schedule cannot see that
            continue
        n_thread = point.band_n_member()
        mupa = point.band_get_partial_schedule()
        node = block.delete().delete()  # now at the rest band
        node = tile_band(node, (k_tile,) * node.band_n_member()).child(0)
        node = node.insert_partial_schedule(mupa).band_set_permutable(1)
        for m in range(n_thread):
            node = node.band_member_set_coincident(m, 1)
        tree = node.insert_mark(isl.Id(BLOCK_MARK)).get_schedule()
    return tree


def promote(
    prog: Program,
    tree: isl.Schedule,
    contracted: frozenset[str] = frozenset(),
    budget: int = DEFAULT_SHARED_BYTES,
    registers: bool = True,
    sizes: Mapping[str, int] | None = None,
) -> tuple[isl.Schedule, Promotion | None]:
    """Insert shared-memory and register copies into ``tree`` (steps 2-4 of the module docstring).

    Returns the tree with extension nodes (for code generation only: ``get_map`` cannot flatten it) and
    the :class:`Promotion`; ``None`` when nothing was promoted.
    """
    buffers: list[Buffer] = []
    statements: dict[str, Statement] = {}
    barriers: list[str] = []
    kernels: dict[str, Kernel] = {}
    for n in range(_count_kernels(tree)):
        mark = _kernel_mark(tree, n)
        kernel = mark.mark_get_id().user
        parts = _parts(mark)
        if parts is None or not isinstance(kernel, Kernel):
            continue
        work = _KernelWork(prog, kernel, n, contracted, statements)
        work.sizes = dict(sizes or {})
        if registers:
            tree = work.registers(parts[1])
            parts = _parts(_kernel_mark(tree, n))
        tree = work.shared(parts[1], budget)
        if work.buffers:
            buffers.extend(work.buffers)
            barriers.extend(work.barriers)
            shared = sum(b.nbytes for b in work.buffers if b.space == "shared")
            new = dataclasses.replace(kernel, shared_bytes=kernel.shared_bytes + shared)
            kernels[kernel.name] = new
            node = _kernel_mark(tree, n).delete().insert_mark(isl.Id(KERNEL_MARK, user=new))
            tree = node.get_schedule()
    if not buffers:
        return tree, None
    return tree, Promotion(tree, tuple(buffers), dict(statements), frozenset(barriers), dict(kernels))


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
        grid_depth = _grid_end(block)
        thread = prefix.flat_range_product(point.band_get_partial_schedule_union_map())
        candidates = []
        for x in self.shared_candidates(block):
            acc = self._access(names, x)
            foot = isl.Map.from_union_map(prefix.reverse().apply_range(acc))
            box = fixed_box(foot)
            if box is None:
                continue
            offset, shape = box
            nbytes = _volume(shape) * self.prog.arrays[x].dtype.numpy().itemsize
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
            box = _box_map(foot.domain(), offset, shape).intersect_range(array_extent(arr, self.prog.params))
            box = box.intersect_params(self.prog.context)
            copy = self._name(f"copy_{buf}")
            ext, cst, local = _copy_statement(copy, box, offset, x, buf, arr.dtype)
            self.statements[copy] = cst
            graft = isl.ScheduleNode.from_extension(ext).child(0)
            graft = graft.insert_partial_schedule(_seq_band(local, n, self.block_sizes))
            graft = graft.insert_partial_schedule(_thread_band(local, n, self.block_sizes))
            for m in range(n):
                graft = graft.band_member_set_coincident(m, 1)
            graft = graft.insert_mark(isl.Id(BLOCK_MARK))
            node = node.graft_before(_root(graft))
            threads = _prefix_map(cst.domain, depth)
            for pa in _thread_members(local, n, self.block_sizes):
                threads = threads.flat_range_product(isl.Map.from_pw_aff(pa))
            copies.append((buf, isl.UnionMap.from_map(cst.accesses[0].relation), cst.domain, isl.UnionMap.from_map(threads)))
        if not copies:
            return node.get_schedule()
        # Barriers from the dependences on the buffers.
        reads = None
        for buf, *_ in copies:
            r = self._buffer_reads(names, buf)
            reads = r if reads is None else reads.union(r)
        writes = None
        for _, w, _, _ in copies:
            writes = w if writes is None else writes.union(w)
        copy_threads = None
        for *_, t in copies:
            copy_threads = t if copy_threads is None else copy_threads.union(t)
        flow = writes.apply_range(reads.reverse())  # copy -> compute reading the element it wrote
        same_p = _prefix_of_copies(copies, depth).apply_range(prefix.reverse())
        flow = flow.intersect(same_p)
        sync_before = not _crosses(flow, copy_threads, thread, depth + n)
        anti = reads.apply_range(writes.reverse())  # compute -> copy overwriting the element it read
        later = prefix.apply_range(_later_same_block(depth, grid_depth)).apply_range(_prefix_of_copies(copies, depth).reverse())
        anti = anti.intersect(later)
        sync_after = not _crosses(anti.reverse(), copy_threads, thread, depth + n)
        prefixes = prefix.range()
        if sync_before:
            node = node.graft_before(_root(self._sync(prefixes, depth)))
        if sync_after:
            node = node.graft_after(_root(self._sync(prefixes, depth)))
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
            if not r.apply_range(r.reverse()).subtract(isl.UnionMap.from_map(_identity(dim))).is_empty():
                out.append(x)
        return out

    def _buffer_reads(self, names: Sequence[str], buf: str) -> isl.UnionMap:
        acc = None
        for nm in names:
            st = self.stmt(nm)
            for a in st.accesses:
                if a.array == buf:
                    m = isl.UnionMap.from_map(a.relation.intersect_domain(st.domain))
                    acc = m if acc is None else acc.union(m)
        return acc

    def _sync(self, prefixes: isl.UnionSet, depth: int) -> isl.ScheduleNode:
        name = self._name(f"sync_{self.tag}_{len(self.barriers)}")
        dom = isl.Set.from_union_set(prefixes).set_tuple_name(name)
        ext = _diag(isl.Map.from_domain_and_range(isl.Set.from_union_set(prefixes), dom))
        self.statements[name] = Statement(name, dom, (), 0, "=", Const(0, i32), 0, "__syncthreads()")
        self.barriers.append(name)
        return isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)

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
        tile = _ancestor_band(block)
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
            if not r.apply_range(r.reverse()).subtract(isl.UnionMap.from_map(_identity(nphys))).is_empty():
                continue  # another thread touches the same element
            written = self._access(names, x, ("write", "update")) is not None
            arr = self.prog.arrays[x]
            reg = self._name(f"{x}_reg_{self.tag}")
            self.buffers.append(Buffer(reg, x, self.kernel.name, "register", (), arr.dtype, 0.0))
            self._rewrite_scalar(names, x, reg)
            fmap = isl.Map.from_union_map(foot)
            load = self._name(f"load_{reg}")
            node = node.graft_before(_root(self._reg_copy(load, fmap, reg, x, arr.dtype, into_register=True)))
            if written:
                store = self._name(f"store_{reg}")
                node = node.graft_after(_root(self._reg_copy(store, fmap, reg, x, arr.dtype, into_register=False)))
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
        dom = fmap.domain().set_tuple_name(name)
        ext = _diag(isl.Map.from_domain_and_range(fmap.domain(), dom))
        elem = fmap.set_tuple_name(isl.dim_type.in_, name)
        scalar = isl.Map.from_domain_and_range(dom, isl.Set.universe(isl.Space.set_alloc(dom.get_ctx(), 0, 0)).set_tuple_name(reg))
        scalar = scalar.align_params(dom.get_space())
        if into_register:
            accesses = (Access(reg, "write", scalar), Access(x, "read", elem))
        else:
            accesses = (Access(x, "write", elem), Access(reg, "read", scalar))
        self.statements[name] = Statement(name, dom, accesses, 0, "=", Read(1, dtype), 0, name)
        return isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)

    def _rewrite_scalar(self, names, x: str, reg: str) -> None:
        for nm in names:
            st = self.stmt(nm)
            if not any(a.array == x for a in st.accesses):
                continue
            space0 = isl.Set.universe(isl.Space.set_alloc(st.domain.get_ctx(), 0, 0)).set_tuple_name(reg)
            rel = isl.Map.from_domain_and_range(st.domain, space0.align_params(st.domain.get_space()))
            accesses = tuple(Access(reg, a.kind, rel, a.text) if a.array == x else a for a in st.accesses)
            self.statements[nm] = dataclasses.replace(st, accesses=accesses)


# ----- isl helpers ------------------------------------------------------------------------------------


def _count_kernels(tree: isl.Schedule) -> int:
    return len(_kernel_marks(tree))


def _kernel_marks(tree: isl.Schedule) -> list[isl.ScheduleNode]:
    out: list[isl.ScheduleNode] = []

    def visit(node: isl.ScheduleNode) -> None:
        if node.get_type() == T.mark and node.mark_get_id().get_name() == KERNEL_MARK:
            out.append(node)
            return
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(tree.get_root())
    return out


def _kernel_mark(tree: isl.Schedule, n: int) -> isl.ScheduleNode:
    return _kernel_marks(tree)[n]


def _parts(mark: isl.ScheduleNode) -> tuple[isl.ScheduleNode, isl.ScheduleNode] | None:
    """(tile band, block mark) of a CUDA kernel laid out as ``mapping.py`` does, else None."""
    grid = mark.child(0)
    if grid.get_type() != T.mark or grid.mark_get_id().get_name() != GRID_MARK:
        return None
    tile = grid.child(0)
    if tile.get_type() != T.band:
        return None
    block = tile.child(0)
    if block.get_type() == T.band:  # a hoisted reduction tile loop
        block = block.child(0)
    if block.get_type() != T.mark or block.mark_get_id().get_name() != BLOCK_MARK:
        return None
    if block.child(0).get_type() != T.band:
        return None
    return tile, block


def _touches_private(prog: Program, node: isl.ScheduleNode, contracted: frozenset[str]) -> bool:
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    arrays = {a.array for n in names for a in prog.statement(n).accesses}
    return any(x in contracted or (prog.arrays[x].role == "temp" and prog.arrays[x].ndim == 0) for x in arrays if x in prog.arrays)


def _ancestor_band(block: isl.ScheduleNode) -> isl.ScheduleNode:
    """The tile band (below the grid mark) above ``block``."""
    node = block.parent()
    while not (node.parent().get_type() == T.mark and node.parent().mark_get_id().get_name() == GRID_MARK):
        node = node.parent()
    return node


def _grid_end(block: isl.ScheduleNode) -> int:
    tile = _ancestor_band(block)
    return tile.get_schedule_depth() + tile.band_n_member()


def _root(node: isl.ScheduleNode) -> isl.ScheduleNode:
    return node.get_schedule().get_root()


def _identity(dim: int) -> isl.Map:
    return isl.Map.identity(isl.Space.map_from_set(isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, dim)))


def _volume(shape: Sequence[int]) -> int:
    v = 1
    for s in shape:
        v *= s
    return v


def _pma(prefix: isl.UnionMap, st: Statement) -> isl.PwMultiAff:
    return isl.PwMultiAff.from_map(isl.Map.from_union_map(prefix.intersect_domain(isl.UnionSet.from_set(st.domain))))


def _diag(m: isl.Map) -> isl.Map:
    """``m`` (from an anonymous prefix space to a same-sized named copy) restricted to equal coordinates."""
    for k in range(min(m.dim(isl.dim_type.in_), m.dim(isl.dim_type.out))):
        m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return m


def fixed_box(foot: isl.Map) -> tuple[isl.MultiAff, tuple[int, ...]] | None:
    """A box ``off(p) <= e < off(p) + shape`` holding ``foot(p)`` for every ``p``, with ``off`` affine and
    ``shape`` constant, or None. (What ``get_range_simple_fixed_box_hull`` computes; this islpy does not
    expose the box's offset and size, so each dimension's offset is chosen among the affine pieces of its
    lower bound, the one giving the smallest constant extent.)"""
    wrapped = foot.wrap()
    ls = isl.LocalSpace.from_space(wrapped.get_space())
    to_p = isl.MultiAff.domain_map(foot.get_space())
    depth = foot.dim(isl.dim_type.in_)
    affs, shape = [], []
    for d in range(foot.dim(isl.dim_type.out)):
        e = isl.Aff.var_on_domain(ls, isl.dim_type.set, depth + d)
        best = None
        for _, cand in foot.dim_min(d).get_pieces():
            diff = e - cand.pullback_multi_aff(to_p)
            lo, hi = wrapped.min_val(diff), wrapped.max_val(diff)
            if not (lo.is_int() and hi.is_int()) or lo.to_python() < 0:
                continue
            size = int(hi.to_python()) + 1
            if best is None or size < best[1]:
                best = (cand, size)
        if best is None:
            return None
        affs.append(best[0])
        shape.append(best[1])
    space = foot.get_space()
    lst = isl.AffList.alloc(foot.get_ctx(), len(affs))
    for a in affs:
        lst = lst.add(a)
    return isl.MultiAff.from_aff_list(space, lst), tuple(shape)


def _box_map(prefixes: isl.Set, offset: isl.MultiAff, shape: Sequence[int]) -> isl.Map:
    """``{ p -> e : off(p) <= e < off(p) + shape }`` for ``p`` in ``prefixes``."""
    cube = isl.Set.universe(offset.get_space().range())
    for d, s in enumerate(shape):
        cube = cube.lower_bound_val(isl.dim_type.set, d, isl.Val.int_from_si(cube.get_ctx(), 0))
        cube = cube.upper_bound_val(isl.dim_type.set, d, isl.Val.int_from_si(cube.get_ctx(), s - 1))
    off = isl.Map.from_multi_aff(offset).intersect_domain(prefixes)
    return off.sum(isl.Map.from_domain_and_range(prefixes, cube))


def _copy_statement(name: str, box: isl.Map, offset: isl.MultiAff, x: str, buf: str, dtype):
    """The extension map, the copy statement ``name[p, e]: buf[e - off(p)] = x[e]`` and its local index map."""
    dom = box.wrap().flatten().set_tuple_name(name)
    ext = box.domain_map().reverse().flatten_range().set_tuple_name(isl.dim_type.out, name)
    read = box.range_map().flatten_domain().set_tuple_name(isl.dim_type.in_, name)
    to_p = box.domain_map().flatten_domain().set_tuple_name(isl.dim_type.in_, name)
    off = isl.PwMultiAff.from_multi_aff(offset).pullback_pw_multi_aff(isl.PwMultiAff.from_map(to_p))
    local = isl.PwMultiAff.from_map(read).sub(off).intersect_domain(dom)
    write = isl.Map.from_pw_multi_aff(local.set_tuple_id(isl.dim_type.out, isl.Id(buf)))
    st = Statement(name, dom, (Access(buf, "write", write), Access(x, "read", read.intersect_domain(dom))), 0, "=", Read(1, dtype), 0, name)
    return isl.UnionMap.from_map(ext), st, local


def _member(pa: isl.PwAff) -> isl.MultiUnionPwAff:
    return isl.MultiUnionPwAff.from_union_pw_aff(isl.UnionPwAff.from_pw_aff(pa))


def _product(parts: Sequence[isl.MultiUnionPwAff]) -> isl.MultiUnionPwAff:
    out = parts[0]
    for p in parts[1:]:
        out = out.flat_range_product(p)
    return out


def _thread_members(local: isl.PwMultiAff, n: int, sizes: Sequence[int]) -> list[isl.PwAff]:
    """``(e_d - off_d) mod B_m`` on the last ``n`` array dims (padded with 0 in front)."""
    r = local.dim(isl.dim_type.out)
    zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(local.get_domain_space())).intersect_domain(local.domain())
    out = []
    for m in range(n):
        d = r - n + m
        out.append(zero if d < 0 else local.get_pw_aff(d).mod_val(isl.Val.int_from_si(local.get_ctx(), sizes[m])))
    return out


def _thread_band(local: isl.PwMultiAff, n: int, sizes: Sequence[int]) -> isl.MultiUnionPwAff:
    return _product([_member(pa) for pa in _thread_members(local, n, sizes)])


def _seq_band(local: isl.PwMultiAff, n: int, sizes: Sequence[int]) -> isl.MultiUnionPwAff:
    """The leading array dims, then ``floor((e_d - off_d) / B_m)`` of the thread-mapped ones."""
    r = local.dim(isl.dim_type.out)
    parts = []
    for d in range(r):
        pa = local.get_pw_aff(d)
        m = d - (r - n)
        if m >= 0:
            pa = pa.scale_down_val(isl.Val.int_from_si(local.get_ctx(), sizes[m])).floor()
        parts.append(_member(pa))
    return _product(parts)


def _prefix_of_copies(copies, depth: int) -> isl.UnionMap:
    """copy instance -> its prefix ``p`` (the first ``depth`` coordinates of a copy statement)."""
    out = None
    for _, _, dom, _ in copies:
        m = isl.UnionMap.from_map(_prefix_map(dom, depth))
        out = m if out is None else out.union(m)
    return out


def _prefix_map(dom: isl.Set, depth: int) -> isl.Map:
    m = isl.Map.from_domain_and_range(dom, isl.Set.universe(isl.Space.set_alloc(dom.get_ctx(), 0, depth)).align_params(dom.get_space()))
    return _diag(m)


def _later_same_block(depth: int, grid_depth: int) -> isl.UnionMap:
    """``{ p -> p' : p' lexicographically after p, same first grid_depth coordinates }``."""
    space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, depth)
    rel = isl.Map.lex_lt(space)
    for k in range(grid_depth):
        rel = rel.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return isl.UnionMap.from_map(rel)


def _crosses(rel: isl.UnionMap, copy_threads: isl.UnionMap, thread: isl.UnionMap, dim: int) -> bool:
    """True when ``rel`` (copy -> compute) never joins two different threads (so no barrier is needed)."""
    if rel.is_empty():
        return True
    pairs = rel.apply_domain(copy_threads).apply_range(thread)
    return pairs.subtract(isl.UnionMap.from_map(_identity(dim))).is_empty()
