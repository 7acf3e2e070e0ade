"""Tile-size selection by the traffic model (``polyfuse/cost/search.py``), and the sector bytes that make
the CUDA search coalescing-aware (``polyfuse/cost/coalescing.py``)."""

import importlib
import re

import islpy as isl

import polyfuse as pf
from examples import kernels as K
from polyfuse.cost.coalescing import access_steps, warp_sectors
from polyfuse.cost.footprint import fixed_params
from polyfuse.cost.search import Limits, TileSearch

BIG = {"N": 1024, "M": 1024, "K": 1024}


def _threads(kernel) -> int:
    out = 1
    for b in kernel.block:
        out *= b
    return out


def test_without_params_keeps_the_fixed_defaults():
    assert pf.schedule(K.gemm, target="cuda").kernels[0].tile_sizes == (16, 32)
    assert pf.schedule(K.jacobi_2d, target="c").kernels[-1].tile_sizes == (32, 32)
    # a contraction gets its register micro-tile with cache tiles from the machine's caches, searched or not
    (mm,) = [k for k in pf.schedule(K.gemm, target="c").kernels if "S1" in k.statements]
    assert len(mm.tile_sizes) == 3 and mm.tile_sizes[0] % 6 == 0


GENERIC = 16000
"""Shared memory a block may use that leaves gemm to the tile search: its register micro-tile
(``tiling/cuda_microtile.py``, no search) needs 16 KiB for two steps of its operand tiles."""


def test_cuda_search_respects_device_limits():
    sched = pf.schedule(K.gemm, target="cuda", params=BIG, shared_memory=GENERIC)
    (k,) = sched.kernels
    assert _threads(k) <= 1024 and k.tile_sizes[-1] % 32 == 0
    grid = 1
    for g in k.grid:
        grid *= g
    assert grid >= 132
    # a tight shared-memory budget forces smaller staged tiles
    small = pf.schedule(K.gemm, target="cuda", params=BIG, shared_memory=2048)
    (ks,) = small.kernels
    assert ks.tile_sizes != k.tile_sizes
    assert small.traffic().total_bytes >= sched.traffic().total_bytes


def test_search_minimises_traffic_among_feasible_shapes():
    search = TileSearch(K.gemm, "cuda", BIG, Limits())
    chosen = pf.schedule(K.gemm, target="cuda", params=BIG).traffic().total_bytes
    for shape in [(16, 32), (8, 64), (1, 256), (4, 32)]:
        other = pf.schedule(K.gemm, target="cuda", params=BIG, tile=shape).traffic().total_bytes
        assert chosen <= other
    assert search.limits.max_threads == 1024


def test_c_search_fits_the_cache_budget(monkeypatch):
    # an elementwise nest: the tile search decides (contractions get register micro-tiles, row reductions
    # run row by row; see test_microtile.py and test_rowwise.py), at a size whose neighbour rows fit neither
    # L1 nor half of L2 (here a 64 KiB one; smaller stencils stream untiled: test_streaming.py)
    kernels = importlib.import_module("polyfuse.schedule.mapping.kernels")
    monkeypatch.setattr(kernels, "cache_sizes", lambda: (32 << 10, 64 << 10))
    sched = pf.schedule(K.jacobi_2d, target="c", params={"N": 8192, "T": 2}, cache_bytes=16384)
    for k in sched.kernels:
        ti, tj = k.tile_sizes
        assert (ti * tj * 2 + 2 * (ti + tj)) * 4 <= 2 * 16384  # read and written tile (with halo) near the budget
        assert -(-8190 // ti) * -(-8190 // tj) >= 16  # enough tiles in parallel
    sched = pf.schedule(K.gemm, target="c", params={"N": 256, "M": 256, "K": 256}, cache_bytes=32768)
    k = sched.kernels[-1]
    ti, tj, tk = k.tile_sizes
    # micro-tiled gemm: the k x j panel of B that the row groups sweep fits the budget
    assert tk * tj * 4 <= 32768
    assert -(-256 // ti) * -(-256 // tj) >= 8  # the parallel tile loops (rows x lanes, collapsed) have work for 8 threads


def test_1d_kernels_get_warp_multiples():
    sched = pf.schedule(K.add_exp, target="cuda", params={"N": 4096, "M": 4096})
    (k,) = sched.kernels
    assert k.tile_sizes[-1] % 32 == 0 and _threads(k) <= 1024
    r = sched.traffic()
    assert r.total_bytes == r.compulsory_bytes
    # coalescing rows: sector bytes = bytes, the widest row (1 x 1024) wins as before; at this size each of its
    # threads then takes 4 elements of a row (``mapping/element_share.py``): 256 threads over tiles of 1024
    assert "chose 1x1024" in sched.explain()
    assert k.tile_sizes == (1, 1024) and k.block == (256, 1) and k.thread_share == 4


# -- coalescing: sector bytes ----------------------------------------------------------------------------

N, M = pf.params("N M")


@pf.program
def transpose(A: pf.f32[N, M], B: pf.f32[M, N]):
    for i in range(N):
        for j in range(M):
            B[j, i] = A[i, j]


@pf.program
def walks(A: pf.f32[M, N], v: pf.f32[N], C: pf.f32[N, M]):
    for i in range(N):
        for j in range(M):
            C[i, j] = A[j, i] + v[i]


def _brute_sectors(prog, access, sizes, i0: int, lanes: int) -> int:
    """Distinct 32-byte sectors of the elements ``access`` touches for S0[i0, 0..lanes-1] (one warp with
    threadIdx.x on j), from the access relation's points and the row-major layout."""
    shape = prog.arrays[access.array].concrete_shape(sizes)
    warp = isl.Set(f"{{ S0[i, j] : i = {i0} and 0 <= j < {lanes} }}")
    rel = access.relation.intersect_params(fixed_params(prog, sizes))
    image = rel.intersect_domain(warp.align_params(rel.get_space().domain())).range()
    sectors = set()

    def add(p):
        addr = 0
        for d, e in enumerate(shape):
            addr = addr * e + p.get_coordinate_val(isl.dim_type.set, d).to_python()
        sectors.add(addr * 4 // 32)

    image.foreach_point(add)
    return len(sectors)


def test_sector_counts_are_exact_on_small_cases():
    sizes = {"N": 64, "M": 48}
    time = isl.UnionMap("{ S0[i, j] -> [i, j] }")  # threadIdx.x on j, threadIdx.y on i
    steps = {s.array: s for s in access_steps(walks, time, 1, 0, fixed_params(walks, sizes), sizes)}
    assert (steps["C"].x, steps["A"].x, steps["v"].x) == (1, 64, 0)  # row, transposed, broadcast
    assert steps["A"].transposed and not steps["C"].transposed and not steps["v"].transposed
    expected = {"C": 4, "A": 32, "v": 1}
    st = walks.statement("S0")
    for acc in st.accesses:
        got, _ = warp_sectors(steps[acc.array].x, 32, 4)
        assert got == expected[acc.array] == _brute_sectors(walks, acc, sizes, 3, 32)
    # a warp over two rows of 16 threads (threadIdx.x extent 16, rows i and i + 1): C touches 2 x 2
    # sectors; A's two rows hit A[j, i] and A[j, i + 1], neighbours in one sector: 16
    assert warp_sectors(steps["C"].x, 16, 4, steps["C"].y, 2)[0] == 4
    assert warp_sectors(steps["A"].x, 16, 4, steps["A"].y, 2)[0] == 16


def _copy_out_follows_x(text: str) -> bool:
    """A copy-out of B whose innermost global index moves with threadIdx.x (c3 here: c2 -> threadIdx.y)."""
    for line in text.splitlines():
        if "copyout_B" in line and "B[" in line:
            inner = line.split("B[", 1)[1].split("] =", 1)[0].rsplit("* N +", 1)[-1]
            return "c3" in inner
    return False


def test_transpose_gets_a_staged_2d_tile():
    for sizes in ({"N": 2048, "M": 2048}, {"N": 37, "M": 45}):
        sched = pf.schedule(transpose, target="cuda", params=sizes)
        (k,) = sched.kernels
        assert len(k.tile_sizes) == 2 and min(k.tile_sizes) >= 8 and k.tile_sizes[-1] % 32 == 0
        note = next(n for n in sched.notes if "tile search" in n)
        assert "B staged in shared memory" in note
        text = pf.codegen(sched).text
        assert re.search(r"__shared__ float B_shared_k0\[\d+\]\[\d+\]", text)
        assert _copy_out_follows_x(text)
        assert sched.traffic().total_bytes == sizes["N"] * sizes["M"] * 8  # still exact bytes
    assert k.tile_sizes == (8, 32)  # 37x45: 10 blocks (one per 256 instances of work), B's rows one sector


def test_transpose_1d_tile_costs_eight_times_its_bytes():
    sizes = {"N": 2048, "M": 2048}
    sched = pf.schedule(transpose, target="cuda", params=sizes)
    assert sched.kernels[0].tile_sizes == (32, 32)
    note = next(n for n in sched.notes if "tile search" in n)
    assert "by bytes alone it would be 1x1024" in note and "8x its bytes" in note
    search = TileSearch(transpose, "cuda", sizes, Limits())
    pf.schedule(transpose, target="cuda", params=sizes, tile_search=search)
    (ranked,) = search.ranked.values()
    one_row = next(c for c in ranked if c.sizes == (1, 1024))
    assert one_row.sector_bytes == 4 * 2048 * 2048 + 32 * 2048 * 2048  # A coalesced, B 32 B per element
    assert ranked[0].sector_bytes == ranked[0].traffic_bytes


def test_gemm_keeps_its_tile_and_coalesced_sectors():
    sched = pf.schedule(K.gemm, target="cuda", params=BIG, shared_memory=GENERIC)
    assert sched.kernels[0].tile_sizes == (32, 32)
    note = next(n for n in sched.notes if "tile search" in n)
    assert "by bytes alone" not in note
    assert re.search(r"chose 32x32: (\d+) B, \1 B in sectors", note)
