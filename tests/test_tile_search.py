"""Tile-size selection by the traffic model (``polyfuse/cost/search.py``)."""

import polyfuse as pf
from examples import kernels as K
from polyfuse.cost.search import Limits, TileSearch

BIG = {"N": 1024, "M": 1024, "K": 1024}


def _threads(kernel) -> int:
    out = 1
    for b in kernel.block:
        out *= b
    return out


def test_without_params_keeps_the_fixed_defaults():
    assert pf.schedule(K.gemm, target="cuda").kernels[0].tile_sizes == (16, 32)
    assert pf.schedule(K.gemm, target="c").kernels[0].tile_sizes == (32, 32, 32)


def test_cuda_search_respects_device_limits():
    sched = pf.schedule(K.gemm, target="cuda", params=BIG)
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


def test_c_search_fits_the_cache_budget():
    sched = pf.schedule(K.gemm, target="c", params={"N": 256, "M": 256, "K": 256}, cache_bytes=32768)
    (k,) = sched.kernels
    ti, tj, tk = k.tile_sizes
    # per tile: A and B read, C read and written back (sizes divide 256: no partial tiles)
    assert (ti * tk + tk * tj + 2 * ti * tj) * 4 <= 32768
    assert 256 // ti >= 16  # the parallel (outermost) tile loop has work for 16 threads


def test_1d_kernels_get_warp_multiples():
    sched = pf.schedule(K.add_exp, target="cuda", params={"N": 4096, "M": 4096})
    (k,) = sched.kernels
    assert k.tile_sizes[-1] % 32 == 0 and _threads(k) <= 1024
    r = sched.traffic()
    assert r.total_bytes == r.compulsory_bytes
