"""Copy statements and the extension nodes that place them (steps 2 and 4 of ``promotion.py``).

A copy is an ordinary :class:`~polyfuse.ir.program.Statement` (``op`` ``=``, value ``Read(1)``: the
second access) whose instances are named by the prefix ``p`` of the node it is grafted at, plus its own
coordinates. An extension node (``ScheduleNode.from_extension``) maps ``p`` to those instances, so the AST
build prints and indexes copies like any statement.

* shared: ``copy_X[p, e]: X_shared[e - off(p)] = X[e]`` over ``box(p) & extent(X)`` (a read-only array)
  or over the elements the tile reads before writing them (a written one), and the copy-out
  ``copyout_X[p, e]: X[e] = X_shared[e - off(p)]`` over exactly the elements the tile writes; under a
  ``block`` mark a thread band ``(e_d - off_d(p)) mod B_m`` on the last array dims (innermost dim <->
  ``threadIdx.x``, so consecutive threads touch consecutive global addresses), the rest as sequential loops;
* registers: ``load_X_reg[q]: X_reg = X[f(q)]`` before and ``store_X_reg[q]: X[f(q)] = X_reg`` after.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from polyfuse.ir.expr import Read
from polyfuse.ir.program import Access, Statement
from polyfuse.schedule.model import BLOCK_MARK
from polyfuse.schedule.movement.kernel_tree import diag, prefix_map, root


def copy_statement(name: str, box: isl.Map, offset: isl.MultiAff, x: str, buf: str, dtype, out: bool = False):
    """The extension map, the copy statement ``name[p, e]: buf[e - off(p)] = x[e]`` for ``e`` in ``box(p)``
    (``out``: the copy-out ``x[e] = buf[e - off(p)]``) and its local index map ``e - off(p)``."""
    dom = box.wrap().flatten().set_tuple_name(name)
    ext = box.domain_map().reverse().flatten_range().set_tuple_name(isl.dim_type.out, name)
    read = box.range_map().flatten_domain().set_tuple_name(isl.dim_type.in_, name)
    to_p = box.domain_map().flatten_domain().set_tuple_name(isl.dim_type.in_, name)
    off = isl.PwMultiAff.from_multi_aff(offset).pullback_pw_multi_aff(isl.PwMultiAff.from_map(to_p))
    local = isl.PwMultiAff.from_map(read).sub(off).intersect_domain(dom)
    write = isl.Map.from_pw_multi_aff(local.set_tuple_id(isl.dim_type.out, isl.Id(buf)))
    read = read.intersect_domain(dom)
    accesses = (Access(x, "write", read), Access(buf, "read", write)) if out else (Access(buf, "write", write), Access(x, "read", read))
    st = Statement(name, dom, accesses, 0, "=", Read(1, dtype), 0, name)
    return isl.UnionMap.from_map(ext), st, local


def lanes(local: isl.PwMultiAff, shape: Sequence[int], sizes: Sequence[int]) -> list[isl.PwAff]:
    """The box index a copy maps to threads: ``local`` (``e - off(p)``, within ``shape``) itself, or, when
    a row of the box is narrower than the block (``shape[-1] < B_x``, dividing it), ``f = B_x / shape[-1]``
    consecutive rows folded into one of ``B_x`` lanes, ``(l_{r-2} div f, (l_{r-2} mod f) * shape[-1] +
    l_{r-1})``, so that every ``threadIdx.x`` works and a warp still covers whole row segments."""
    parts = [local.get_pw_aff(d) for d in range(local.dim(isl.dim_type.out))]
    bx, width = sizes[-1], shape[-1]
    if len(parts) < 2 or width >= bx or bx % width:
        return parts
    f = isl.Val.int_from_si(local.get_ctx(), bx // width)
    outer, inner = parts[-2], parts[-1]
    row = outer.mod_val(f).scale_val(isl.Val.int_from_si(local.get_ctx(), width)).add(inner)
    return [*parts[:-2], outer.scale_down_val(f).floor(), row]


def shared_copy_tree(ext: isl.UnionMap, parts: Sequence[isl.PwAff], n: int, sizes: Sequence[int]) -> isl.ScheduleNode:
    """The root of the tree to graft for a shared copy: extension -> ``block`` mark -> thread band of ``n``
    coincident members (block sizes ``sizes``, outermost first) -> sequential band, over the box index
    ``parts`` (:func:`lanes`)."""
    graft = isl.ScheduleNode.from_extension(ext).child(0)
    graft = graft.insert_partial_schedule(_seq_band(parts, n, sizes))
    graft = graft.insert_partial_schedule(_thread_band(parts, n, sizes))
    for m in range(n):
        graft = graft.band_member_set_coincident(m, 1)
    graft = graft.insert_mark(isl.Id(BLOCK_MARK))
    return root(graft)


def copy_threads(dom: isl.Set, depth: int, parts: Sequence[isl.PwAff], n: int, sizes: Sequence[int]) -> isl.UnionMap:
    """copy instance -> (its prefix ``p``, its thread coordinates): who runs each copy instance."""
    threads = prefix_map(dom, depth)
    for pa in _thread_members(parts, n, sizes):
        threads = threads.flat_range_product(isl.Map.from_pw_aff(pa))
    return isl.UnionMap.from_map(threads)


def register_copy(name: str, fmap: isl.Map, reg: str, x: str, dtype, into_register: bool) -> tuple[Statement, isl.ScheduleNode]:
    """The statement ``name[q]`` moving ``x[fmap(q)]`` into (or out of) the scalar ``reg``, and the
    extension node placing it (graft its root before or after the compute)."""
    dom = fmap.domain().set_tuple_name(name)
    ext = diag(isl.Map.from_domain_and_range(fmap.domain(), dom))
    elem = fmap.set_tuple_name(isl.dim_type.in_, name)
    scalar = isl.Map.from_domain_and_range(dom, isl.Set.universe(isl.Space.set_alloc(dom.get_ctx(), 0, 0)).set_tuple_name(reg))
    scalar = scalar.align_params(dom.get_space())
    if into_register:
        accesses = (Access(reg, "write", scalar), Access(x, "read", elem))
    else:
        accesses = (Access(x, "write", elem), Access(reg, "read", scalar))
    st = Statement(name, dom, accesses, 0, "=", Read(1, dtype), 0, name)
    return st, isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)


def _member(pa: isl.PwAff) -> isl.MultiUnionPwAff:
    return isl.MultiUnionPwAff.from_union_pw_aff(isl.UnionPwAff.from_pw_aff(pa))


def _product(parts: Sequence[isl.MultiUnionPwAff]) -> isl.MultiUnionPwAff:
    out = parts[0]
    for p in parts[1:]:
        out = out.flat_range_product(p)
    return out


def _thread_members(parts: Sequence[isl.PwAff], n: int, sizes: Sequence[int]) -> list[isl.PwAff]:
    """``(l_d) mod B_m`` on the last ``n`` box dims (padded with 0 in front), or ``l_d`` itself where it
    always lies in ``[0, B_m)``."""
    r = len(parts)
    zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(parts[0].get_domain_space())).intersect_domain(parts[0].domain())
    out = []
    for m in range(n):
        d = r - n + m
        if d < 0:
            out.append(zero)
        elif _within(parts[d], sizes[m]):
            out.append(parts[d])
        else:
            out.append(parts[d].mod_val(isl.Val.int_from_si(parts[0].get_ctx(), sizes[m])))
    return out


def _within(pa: isl.PwAff, size: int) -> bool:
    """Whether ``0 <= pa < size`` on all of its domain: then ``pa mod size`` is ``pa`` and ``floor(pa /
    size)`` is 0, and the copy bands say so without the modulo (isl 0.2x's AST generation derived a wrong
    fixed value from a folded ``(-127 o0) mod 256`` lane: a fuzzer case whose copy-out never ran)."""
    top = isl.PwAff.val_on_domain(pa.domain(), isl.Val.int_from_si(pa.get_ctx(), size - 1))
    return pa.domain().is_subset(pa.nonneg_set().intersect(top.sub(pa).nonneg_set()))


def _thread_band(parts: Sequence[isl.PwAff], n: int, sizes: Sequence[int]) -> isl.MultiUnionPwAff:
    return _product([_member(pa) for pa in _thread_members(parts, n, sizes)])


def _seq_band(parts: Sequence[isl.PwAff], n: int, sizes: Sequence[int]) -> isl.MultiUnionPwAff:
    """The leading box dims, then ``floor(l_d / B_m)`` of the thread-mapped ones."""
    r = len(parts)
    out = []
    for d in range(r):
        pa = parts[d]
        m = d - (r - n)
        if m >= 0:
            if _within(pa, sizes[m]):
                pa = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(pa.get_domain_space())).intersect_domain(pa.domain())
            else:
                pa = pa.scale_down_val(isl.Val.int_from_si(pa.get_ctx(), sizes[m])).floor()
        out.append(_member(pa))
    return _product(out)
