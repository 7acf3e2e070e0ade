"""Tile sizes and rectangular tiling of permutable bands.

``tile`` (the argument of ``pf.schedule``) is ``"auto"``, ``None``, a tuple of sizes (outermost band member
first), or a dict from statement name to such a tuple. The defaults: on C every member of a kernel's
outermost permutable band is tiled by 32; on CUDA the (up to) two outermost parallel members are
strip-mined for the thread mapping, by 256 for a single one and by 16 x 32 (outer x inner) for two.
CUDA always strip-mines the mapped members (a thread block needs a size), so ``tile=None`` there means
the default block sizes.

:func:`tile_band` enforces, for each tiled member ``i`` with size ``s``::

    i = s*it + ii   with   0 <= ii < s

where ``it = floor(i/s)`` is the member of the outer *tile* band and ``ii = i mod s`` the member of the
inner *point* band (isl's ``tile_scale_tile_loops=0``, ``tile_shift_point_loops=1``). Both bands keep the
permutable and coincident flags of the original band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.errors import PolyfuseError
from polyfuse.schedule.bands import isl_options

C_TILE = 32
CUDA_TILE_1D = (256,)
CUDA_TILE_2D = (16, 32)
MAX_THREADS = 1024


def validate_tile(tile, statements: Sequence[str]) -> None:
    """Raise :class:`PolyfuseError` unless ``tile`` is a tile specification ``pf.schedule`` accepts."""
    if tile is None or tile == "auto":
        return
    if isinstance(tile, Mapping):
        unknown = sorted(set(tile) - set(statements))
        if unknown:
            raise PolyfuseError(f"tile sizes given for unknown statements: {', '.join(map(str, unknown))}")
        for sizes in tile.values():
            _sizes(sizes)
        return
    _sizes(tile)


def _sizes(sizes) -> tuple[int, ...]:
    if isinstance(sizes, int):
        sizes = (sizes,)
    if not isinstance(sizes, (tuple, list)) or not sizes or not all(isinstance(s, int) and s >= 1 for s in sizes):
        raise PolyfuseError(f"tile sizes must be 'auto', None, a tuple of positive ints or a dict of them, not {sizes!r}")
    return tuple(sizes)


def sizes_for(tile, target: str, statements: Sequence[str], n_members: int, n_parallel: int) -> tuple[int, ...]:
    """The tile sizes for a kernel band of ``n_members`` members whose first ``n_parallel`` are parallel.

    On CUDA the result has one size per mapped member (at most three, at most 1024 threads in all); on C
    one per tiled member (empty: no tiling).
    """
    chosen = tile
    if isinstance(tile, Mapping):
        chosen = next((tile[s] for s in statements if s in tile), "auto")
    if target == "cuda":
        n_map = min(n_parallel, 3)
        if chosen is None or chosen == "auto":
            sizes = CUDA_TILE_1D if n_map == 1 else CUDA_TILE_2D
            return sizes[: n_map]
        sizes = _sizes(chosen)[: n_map]
        threads = 1
        for s in sizes:
            threads *= s
        if threads > MAX_THREADS:
            raise PolyfuseError(f"tile sizes {sizes} give {threads} threads per block; CUDA allows at most {MAX_THREADS}")
        return sizes
    if chosen is None:
        return ()
    if chosen == "auto":
        return (C_TILE,) * n_members
    return _sizes(chosen)[:n_members]


def tile_band(node: isl.ScheduleNode, sizes: Sequence[int]) -> isl.ScheduleNode:
    """Tile the first ``len(sizes)`` members of the band at ``node`` (the band is split after them first).

    Returns the tile band; its only child is the point band. Enforces ``i = s*it + ii, 0 <= ii < s``.
    """
    if not sizes:
        return node
    if node.band_n_member() > len(sizes):
        node = node.band_split(len(sizes))
    ctx = node.get_ctx()
    vals = isl.ValList.alloc(ctx, len(sizes))
    for s in sizes:
        vals = vals.add(isl.Val.int_from_si(ctx, s))
    mv = isl.MultiVal.from_val_list(node.band_get_space(), vals)
    with isl_options(tile_scale_tile_loops=0, tile_shift_point_loops=1):
        return node.band_tile(mv)
