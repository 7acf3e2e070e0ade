"""Strided innermost walks: what a fusion can cost that the traffic model does not see.

The traffic model (``cost/traffic.py``) counts the cache lines a tile brings in; it does not see the order
the innermost loop visits them in. Fusing a statement into a kernel whose loop order suits another
statement can turn a contiguous walk into a strided one: deriche's final ``imgOut[i][j] = c2 * (y1[i][j] +
y2[i][j])``, fused into the column pass (innermost loop down a column), touches a new cache line for every
element, cannot be vectorised, and measured 15 % slower for the whole program on one thread than with the
statement in a row-major nest of its own, although the model rated the fused kernel cheaper in bytes.

:func:`strided_walks` counts, per kernel, the statement instances times accesses whose address moves by
more than one element (or along a non-last dimension) when the innermost loop of the statement advances;
``fusion="smart"`` rates a schedule with fewer such walks better before it compares bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.cost.footprint import fixed_params
from polyfuse.cost.machine import cache_sizes
from polyfuse.cost.traffic import array_bytes
from polyfuse.ir.program import Program
from polyfuse.schedule.mapping.kernels import box_volume
from polyfuse.schedule.model import Schedule
from polyfuse.schedule.tiling.accesses import access_coefficients, single_multi_aff, stride_along


def strided_walks(prog: Program, sched: Schedule, sizes: Mapping[str, int], l1_bytes: int | None = None) -> dict[str, int]:
    """Per kernel name of ``sched``: statement instances (at ``sizes``) times accesses that stride through
    an array larger than L1 (``l1_bytes``, default this machine's) along the statement's innermost loop
    (see the module docstring). A strided walk over an array L1 holds whole costs no more than a contiguous
    one: the small MLP of the tests, its weights in L1, stays fused."""
    fixed = fixed_params(prog, sizes)
    l1 = l1_bytes if l1_bytes is not None else cache_sizes()[0]
    sized = {a: array_bytes(prog, a, sizes) for a, arr in prog.arrays.items() if arr.shape}
    big = {a for a, b in sized.items() if b is None or b > l1}  # (a missing size: taken as large)
    per_statement: dict[str, isl.Map] = {}
    sched.tree.get_map().foreach_map(lambda m: per_statement.__setitem__(m.get_tuple_name(isl.dim_type.in_), m))
    out: dict[str, int] = {}
    for kernel in sched.kernels:
        total = 0
        for name in kernel.statements:
            stmt = prog.statement(name)
            if name not in per_statement:
                continue
            inner = _innermost_iterator(per_statement[name].intersect_domain(stmt.domain))
            if inner is None:
                continue
            strided = 0
            for acc in stmt.accesses:
                if acc.array not in big or acc.array in sched.contracted:
                    continue
                coeffs = access_coefficients(acc.relation)
                if coeffs is not None and stride_along(coeffs, inner) == "other":
                    strided += 1
            if strided:
                volume = box_volume(stmt.domain.intersect_params(fixed))
                total += strided * (volume or 0)
        out[kernel.name] = total
    return out


def _innermost_iterator(schedule: isl.Map) -> int | None:
    """The iterator of the statement that the last non-constant dimension of its ``schedule`` follows
    (plus or minus one times it, plus a constant); ``None`` for anything else (a skew, a tile's modulo)."""
    if schedule.is_empty():
        return None
    ma = single_multi_aff(schedule)
    if ma is None:
        return None
    for d in range(ma.dim(isl.dim_type.out) - 1, -1, -1):
        aff = ma.get_at(d)
        coeffs = [aff.get_coefficient_val(isl.dim_type.in_, k) for k in range(aff.dim(isl.dim_type.in_))]
        used = [k for k, c in enumerate(coeffs) if not c.is_zero()]
        if not used and not aff.dim(isl.dim_type.div):
            continue  # a constant dimension (a sequence position)
        if aff.dim(isl.dim_type.div) or len(used) != 1 or not coeffs[used[0]].abs().is_one():
            return None
        return used[0]
    return None


