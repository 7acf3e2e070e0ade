"""Streaming bands (C): kernels whose tiles would reuse nothing that the cache does not keep anyway.

An elementwise chain (``exp(a + 1)``, bias + GELU + residual) touches each element of its big arrays once,
walking them contiguously along the innermost loop; the only arrays it reads more than once are small
(a bias row, layernorm's gain) and stay in cache in any loop order. Tiling such a band saves no traffic,
and it costs bandwidth: a ``256 x 128`` tile walks 512 contiguous bytes of each row, then jumps a whole
row ahead, which breaks the hardware prefetcher's streams (measured on ``exp(a + 1)`` at 4096², 2
threads: 3.7 ms tiled against 2.9 ms untiled, a plain copy 2.4-2.8 ms). :func:`streams` recognises such a
band, and the mapper leaves it untiled: the OpenMP loop is its outermost parallel member, each thread
gets one contiguous block of rows.

The test is conservative, as the rest of the tiling pass is: every band member follows one iterator of
every statement (no skew or shift), the band covers every loop of each statement, every access is
contiguous or invariant along the innermost member, and the arrays read again across an outer member
(invariant along it) fit together in half a cache tile. A stencil's neighbour reads do not count as
reuse here: their reuse distance is a row or two, which the cache holds untiled.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.cost.traffic import itemsize
from polyfuse.ir.program import Program
from polyfuse.schedule.tiling.microtile import access_coefficients, member_iterators, stride_along


def streams(prog: Program, node: isl.ScheduleNode, sizes: Mapping[str, int], cache_bytes: int) -> bool:
    """Whether the band at ``node`` streams (module docstring), at the concrete ``sizes``."""
    if node.band_n_member() < 2:
        return False  # one loop is not tiled anyway
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    reused: set[str] = set()
    for name in names:
        stmt = prog.statement(name)
        its = member_iterators(node, stmt)
        if its is None or len(its) != stmt.depth:
            return False
        inner = its[-1]
        for acc in stmt.accesses:
            if not prog.arrays[acc.array].shape:
                continue  # a local scalar: a register
            coeffs = access_coefficients(acc.relation)
            if coeffs is None or stride_along(coeffs, inner) == "other":
                return False
            if any(stride_along(coeffs, d) == "zero" for d in its[:-1]):
                reused.add(acc.array)
    footprint = 0
    for a in reused:
        arr = prog.arrays[a]
        try:
            elements = 1
            for n in arr.concrete_shape(sizes):
                elements *= n
        except KeyError:
            return False
        footprint += elements * itemsize(prog, a)
    return footprint <= cache_bytes // 2
