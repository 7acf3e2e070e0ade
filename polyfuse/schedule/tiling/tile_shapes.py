"""The sizes of a contraction's tiles on the C target: the register tile (``MR`` rows times ``NR`` vectors
of lanes, from the machine's vector registers and width) and the cache tiles around it (``Mc`` rows,
``Nc`` lanes, ``Kc`` steps of the reduction, from its L2). ``tiling/microtile.py`` decides which bands are
contractions and builds their tiles with these sizes; the sizes live here so that each measured rule sits
beside the measurement that set it, and so that tests can change the machine in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyfuse.cost.machine import cache_sizes, full_width_vector_units, vector_bytes, vector_registers

if TYPE_CHECKING:
    from polyfuse.schedule.tiling.microtile import Contraction

MR = 6
"""Rows of a register tile with 16 vector registers (AVX2): with two vectors of lanes per row, 12
accumulators plus two operand vectors and one broadcast fit."""
MR_WIDE = 8
"""Rows with 32 vector registers (AVX-512): 16 accumulators, 19 registers in all; and a filter count or
matrix size that is a multiple of 8 leaves no remainder rows."""


NR_VECTORS = 2
"""Vectors of lanes per row of a register tile, unless :func:`lane_vectors` finds that three (or, at full
width, four) fit the lanes better."""
MR_FULL_WIDTH = 6
"""Rows with 32 registers where 512-bit vectors run at full width (Intel, AMD's server Zen 5): with four vectors of lanes per
row, 24 accumulators, four operand vectors and a broadcast; each ``k`` step loads four vectors and six
broadcasts for 24 multiply-adds, where 8 x 2 loads ten for 16. Measured on a 2-core Emerald Rapids, f32,
2 threads, paired rounds against 8 x 2 with ``Kc`` 256: matmul 1024³ 0.88, 2048³ 0.79, the MLP 0.79 of
the time (with ``Kc`` 512: :func:`reduction_tile`); 4 x 6 took 1.55-1.73 times as long, 8 x 3 0.97-1.0."""


def register_rows(nr: int = NR_VECTORS) -> int:
    """``MR`` for this machine's vector registers (``cost/machine.py``) and ``nr`` vectors of lanes per row:
    six rows of four vectors (the full-width tile: :func:`full_width_tile`), else eight (with 32
    registers: 16 or 24 accumulators; conv2d 3x3 64 -> 64 at 56², three vectors, took 0.79-0.81 of the
    time with eight rows as with six where 512-bit vectors run at full width)."""
    if vector_registers() < 32:
        return MR
    return MR_FULL_WIDTH if nr >= 4 else MR_WIDE


def reduction_tile(itemsize: int, wide: bool | None = None, cache_bytes: int | None = None) -> int:
    """``Kc``: the reduction's cache tile, 256 elements of ``k`` (128 for doubles); for the full-width tile
    (``wide``; default: where 512-bit vectors run at full width, :func:`full_width_tile` says which
    contractions take it) four times as many where one core's L2 holds 2 MiB or more, else twice as many.
    Its ``Kc x 4`` panel of vectors (256 KiB at ``Kc`` 1024 in f32, 512 in f64) is read from L2 per lane
    strip, and the row operand's ``Mc x Kc`` block (512 x 1024 floats: 2 MiB) stays in L2 and L3 while the
    strips pass. Measured on the 2-core Emerald Rapids (2 MiB of L2), 2 threads, paired rounds: ``Kc`` 512
    took 0.92-0.95 of the time of 256 (f32 matmul and MLP), 128 took 1.16; ``Kc`` 1024 then took 0.96 of the
    time of 512 at 1024³ and 2048³ and 0.92 on the MLP, and f64 ``Kc`` 512 0.95-0.96 of 256 on PolyBench's
    gemm, 2mm and 3mm at LARGE. 768 (Nc 336: no whole number of strips) took 1.69, 2048 (the row block
    twice L2) 3.9. With a cache tile budget ``cache_bytes`` (``pf.schedule``'s, 256 KiB by default), the
    longer ``Kc`` is halved until a panel of the narrowest lane tile (16 lanes) fits it."""
    kc = 256 if itemsize <= 4 else 128
    if not (full_width_vector_units() if wide is None else wide):
        return kc
    wide_kc = 4 * kc if cache_sizes()[1] >= 2 << 20 else 2 * kc
    while cache_bytes and wide_kc > kc and wide_kc * 16 * itemsize > cache_bytes:
        wide_kc //= 2
    return wide_kc


def full_width_tile(lanes_move: bool, gathered: bool, even: bool) -> bool:
    """Whether a contraction takes the full-width register tile (six rows of four vectors, the doubled
    ``Kc``) on this machine: 512-bit vectors at full width, and a rectangular contraction whose lane
    operand is packed. Lanes that move with the row (syrk) and lane operands gathered per strip keep the
    narrower tile: their panels are read from L1 by every row group, and a ``Kc x 4`` one does not fit
    there (PolyBench syrk LARGE, f64, 2 threads: 170 ms with the full-width tile, 82 with it at ``Kc``
    128, 64 with 8 x 2)."""
    return full_width_vector_units() and not lanes_move and not gathered and even


def lane_vectors(lanes: int, itemsize: int, wide: bool | None = None) -> int:
    """``NR``: vectors of lanes per row of the register tile, for a lane loop of ``lanes`` iterations per
    cache tile (0: unknown).

    Two, unless three leave fewer lanes to the remainder strips (one vector, half of one, one lane at a
    time, each with fewer multiply-adds per operand load) and the registers hold ``MR x 3`` accumulators
    (32 vector registers: 24 accumulators, three lane operands and a broadcast). A convolution's output
    rows of 56 floats with 16-lane vectors: two vectors cover 32 lanes and leave 24 (one vector and a
    half), three cover 48 and leave 8 (measured on a 2-core Zen 5, conv2d 3x3 64 -> 64 channels at 56²:
    0.66 -> 0.59 ms). A lane tile that is a multiple of two vectors (a matmul's 256) keeps two: three
    took 4 % longer at 1024³ and 2048³."""
    vl = vector_bytes() // itemsize
    if vector_registers() < 32 or vl <= 1:
        return NR_VECTORS
    if full_width_vector_units() if wide is None else wide:  # (MR_FULL_WIDTH rows: four vectors, or three or two where they fit better)
        return 4 if lanes <= 0 else min((4, 3, 2), key=lambda nr: (lanes % (nr * vl), -nr))
    if lanes <= 0:
        return NR_VECTORS
    return 3 if lanes % (3 * vl) < lanes % (NR_VECTORS * vl) else NR_VECTORS


ROW_LESS_VECTORS = 4
"""Vectors of lanes of a row-less register tile: one row, so its accumulators alone hide the multiply-add
latency (4 independent chains; 9 registers with their operands and the broadcast)."""


def cache_tile_sizes(found: Contraction, n_members: int, itemsize: int, cache_bytes: int | None = None,
                     rows_extent: int | None = None, row_tiles: int = 8, even_rows: bool = False,
                     all_rows: int | None = None, mr: int | None = None, wide: bool = False) -> tuple[int, ...]:
    """Cache tiles for the band reordered as :attr:`Contraction.order` (``mr``: the register tile's rows,
    of which ``Mc`` is a multiple; default :func:`register_rows`).

    The ``Kc x Nc`` panel of the lane operand that the row groups sweep stays within ``cache_bytes``
    (default: half of this machine's L2, ``cost/machine.py``): ``Kc`` is 256 elements of ``k`` (128 for
    doubles) and ``Nc`` the widest multiple of 16 lanes that fits. ``Mc`` rows share that panel: 192 rows
    with an L2 of 1 MiB or more, else 96 (multiples of both ``MR``), fewer when the rows extent is known
    and small, so that the parallel row-tile loop has at least ``row_tiles`` iterations (the mapper asks
    for as many as the lane tiles, which run in parallel with them, leave short of two per core; a
    row tile should stay long: each lane strip's gathered panel is shared by its rows) (measured on a 2-core Zen 5,
    f32 2048³: Mc 192 takes 42 ms where 96 takes 47). With ``even_rows`` (rows of equal work: no bound moves
    with the row) ``Mc`` is the rows over ``row_tiles`` rounded *up* to ``MR``, so the static schedule's
    threads get nearly equal rows: rounded down, 180 rows in tiles of 40 made five tiles, three for one
    thread and two for the other (PolyBench MEDIUM on 2 threads, A/B: gemm 0.80, 2mm 0.82, covariance
    0.84 of the time). Rows of equal work whose extent ``all_rows`` is known, where nothing above them runs
    in parallel, are cut instead into the fewest equal tiles of at most :data:`EVEN_ROWS_MC` rows (an L2 of
    1 MiB or more). Triangular rows keep more, smaller tiles (fewer, longer ones gave the thread with
    the long rows even more: syrk 1.14, syr2k 1.37). With reductions inside the register tile, no reduction is tiled (one tile
    covers each: a ``k`` tile loop outside them would change the order of each element's terms; they go
    inside only where ``k`` fits one ``Kc`` anyway); other members (batch, further reductions) are tiled
    by 1."""
    l2 = cache_sizes()[1]
    kc = reduction_tile(itemsize, wide, cache_bytes)
    if found.rows is None:  # one row: a lane tile of one strip, the strips running in parallel
        return (1,) * (n_members - 2) + (ROW_LESS_VECTORS * max(1, vector_bytes() // itemsize), kc)
    nc = lane_tile(itemsize, cache_bytes, kc)
    mc = 192 if l2 >= 1 << 20 else 96  # the Mc x Kc block of the row operand stays in L2 (192 KiB at most)
    mr = mr or register_rows()
    if even_rows and all_rows and l2 >= 1 << 20:
        tiles = max(row_tiles if rows_extent else 1, -(-all_rows // EVEN_ROWS_MC))  # (ceiling divisions)
        per_tile = -(-all_rows // tiles)
        mc = max(mr, -(-per_tile // mr) * mr)  # equal tiles, each a whole number of MR-row groups
    elif rows_extent:
        tiles = max(row_tiles, 1)
        if even_rows:  # rows per tile, rounded up to a multiple of MR
            rows = -(-rows_extent // tiles)  # (ceiling divisions)
            per_tile = -(-rows // mr) * mr
        else:  # rounded down
            per_tile = rows_extent // tiles // mr * mr
        mc = max(mr, min(mc, per_tile))
    if found.inner:  # the reductions are not tiled: a k tile loop outside the window would reorder each sum
        return (1,) * (n_members - 3 - len(found.inner)) + (mc, nc)
    return (1,) * (n_members - 3) + (mc, nc, kc)


EVEN_ROWS_MC = 512
"""The most rows in a tile of rows of equal work at known sizes (an L2 of 1 MiB or more): the ``Mc x Kc``
block of the row operand (512 KiB in f32) is half of L2, and each lane strip's gathered panel serves 64
register tiles instead of 24. The rows are cut into the fewest such tiles, all of equal size, so that the
static schedule's threads get equal work (1024 rows in tiles of 192 made six, the last of 64: one thread
had 2304 rows of work, the other 1792). Measured on the 2-core Zen 4, f32, 2 threads, the generated loop
nest written by hand with each ``Mc`` (paired rounds, time relative to ``Mc`` 192): 128, 256, 512 and
1024 rows gave 0.91, 0.87, 0.86 and 0.84 at 1024³, 1.01, 0.94, 0.89 and 0.90 at 2048³."""


def lane_tile(itemsize: int, cache_bytes: int | None = None, kc: int | None = None) -> int:
    """``Nc``: the lanes of a cache tile, the widest multiple of 16 whose ``Kc x Nc`` panel fits
    ``cache_bytes`` (default: half of this machine's L2); ``kc`` default: the narrower tile's ``Kc``."""
    budget = cache_bytes if cache_bytes else cache_sizes()[1] // 2
    kc = kc or reduction_tile(itemsize, False)
    return max(16, min(1024, budget // (kc * itemsize)) // 16 * 16)
