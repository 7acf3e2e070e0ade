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
every statement (no skew or shift) or holds it at a constant (fdtd-2d's boundary row ``ey[0][j]``, fused
into the first row of ``hz``'s update), the innermost member is an iterator, no band lies below (so the
statement's other loops are host loops around the kernel: a stencil's time loop), every access is
contiguous or invariant along the innermost member, and the arrays read again across an outer member
(invariant along it) fit together in half a cache tile. A stencil's neighbour reads do not count as
reuse here: their reuse distance is a row or two, which the cache holds untiled. fdtd-2d at LARGE, 1
thread: tiled 1.31 s, streaming 1.18 s, gcc -O3 on the source 0.94 s.

**Large stencils.** Where the slabs a stencil re-reads do not fit in L1 but fit in half of L2, and its
arrays are larger than the L2 caches of the cores running it together (so every step streams them from L3
or memory whatever the tiles), the band streams too: the hardware prefetcher's long contiguous streams
are then worth more than a tile's L1 reuse, which L2 mostly provides anyway. Measured on 2 threads at
PolyBench's LARGE size (2-core EPYC, 1 MiB L2 per core, paired rounds): heat-3d (3 planes of 113 KiB,
27 MiB of arrays) 0.87 s untiled against 1.96 s in 16 x 32 x 32 tiles; fdtd-2d 0.67 s against 1.07 s;
jacobi-2d 0.95 s against 1.10 s. At MEDIUM, where the arrays fit in L2, the tiles stay (heat-3d at
N=40 above).
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.cost.traffic import array_bytes
from polyfuse.ir.program import Program
from polyfuse.schedule.tiling.accesses import access_coefficients, stride_along
from polyfuse.schedule.tiling.microtile import member_walk


def streams(prog: Program, node: isl.ScheduleNode, sizes: Mapping[str, int], cache_bytes: int, l1_bytes: int,
            l2_bytes: int = 0, cores: int = 1) -> bool:
    """Whether the band at ``node`` streams (module docstring), at the concrete ``sizes``; ``cache_bytes``
    is the cache tile's budget, ``l1_bytes`` the L1 data cache of one core, ``l2_bytes`` its L2 (0:
    unknown) and ``cores`` how many cores share the band's work."""
    if node.band_n_member() < 2 or _band_below(node):
        return False  # one loop is not tiled anyway; a band below: the statements have inner loops
    names: list[str] = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    reused: set[str] = set()
    walks: dict[str, list[int | None]] = {}
    for name in names:
        stmt = prog.statement(name)
        walk = walks[name] = member_walk(node, stmt)
        if walk is None or walk[-1] is None:
            return False
        its = [k for k in walk if k is not None]
        inner = its[-1]
        for acc in stmt.accesses:
            if not prog.arrays[acc.array].shape:
                continue  # a local scalar: a register
            coeffs = access_coefficients(acc.relation)
            if coeffs is None or stride_along(coeffs, inner) == "other":
                return False
            if any(stride_along(coeffs, d) == "zero" for d in its[:-1]):
                reused.add(acc.array)
    footprints = [array_bytes(prog, a, sizes) for a in reused]
    if None in footprints or sum(footprints) > cache_bytes // 2:
        return False
    window = _neighbour_window(prog, walks, sizes)
    if window is None:
        return False
    if window <= l1_bytes:
        return True
    if window > l2_bytes // 2:
        return False
    touched = {acc.array for n in names for acc in prog.statement(n).accesses}
    return sum(array_bytes(prog, a, sizes) or 0 for a in touched) > l2_bytes * cores  # (module docstring: large stencils)


def _neighbour_window(prog: Program, walks: Mapping[str, list[int | None]], sizes: Mapping[str, int]) -> int | None:
    """Bytes of the slabs (rows, for a 2-d array) the band keeps re-reading across its outer member: 0 when
    no array is accessed at two offsets along it (an elementwise band re-reads nothing); for a stencil, the
    span of each array's offsets (``A[i-1..i+1]``: 3 slabs) times its slab, summed over the arrays. Untiled,
    those slabs must stay in L1 between one outer iteration and the next (heat-3d at N=40: 51 KiB of
    planes, 1.49x gcc tiled against 1.28x untiled; jacobi-2d at N=250: 8 KiB of rows, 0.75x tiled against
    0.99x untiled). ``None`` when an access moves with the outer member in a way this does not model."""
    offsets: dict[str, set[int]] = {}
    slab: dict[str, int] = {}
    for name, walk in walks.items():
        stmt = prog.statement(name)
        outer = walk[0]
        if outer is None:
            continue  # held at a constant there (a boundary row): no re-reading across the member
        for acc in stmt.accesses:
            arr = prog.arrays[acc.array]
            coeffs = access_coefficients(acc.relation)
            if not arr.shape or coeffs is None:
                continue
            moving = [d for d, (its, _params, _const) in enumerate(coeffs) if its[outer]]
            if not moving:
                continue
            if len(moving) != 1 or coeffs[moving[0]][1] or coeffs[moving[0]][0][outer] != 1:
                return None
            d = moving[0]
            row = array_bytes(prog, acc.array, sizes, from_dim=d + 1)
            if row is None:
                return None
            offsets.setdefault(acc.array, set()).add(coeffs[d][2])
            slab[acc.array] = row
    if all(len(o) < 2 for o in offsets.values()):
        return 0
    return sum((max(o) - min(o) + 1) * slab[a] for a, o in offsets.items())


def _band_below(node: isl.ScheduleNode) -> bool:
    """Whether some band lies below ``node`` (``node`` itself excluded)."""
    found: list[bool] = []

    def visit(n: isl.ScheduleNode) -> bool:
        if n.get_type() == isl.schedule_node_type.band:
            found.append(True)
        return not found

    for k in range(node.n_children()):
        node.child(k).foreach_descendant_top_down(visit)
    return bool(found)

