"""The memory-traffic model (``polyfuse/cost``): exact against an enumeration of the schedule, and the
acceptance numbers of the traffic issue (fused chains at the compulsory floor, gemm tiling, stencils)."""

from collections import defaultdict

import islpy as isl
import pytest

import polyfuse as pf
from examples import kernels as K
from polyfuse.cost.counting import count_points
from polyfuse.cost.footprint import fixed_params, kernel_regions
from polyfuse.cost.machine import cache_sizes
from polyfuse.cost.traffic import format_traffic, itemsize

N, M = pf.params("N M")


@pf.program(assume="N >= 3 and M >= 3")
def box3x3(A: pf.f32[N, M], B: pf.f32[N, M]):
    """A 3x3 box stencil (one sweep)."""
    for i in range(1, N - 1):
        for j in range(1, M - 1):
            B[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1] + A[i, j - 1] + A[i, j]
                       + A[i, j + 1] + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) * 0.111


T = pf.params("T")


@pf.program(assume="N >= 1")
def refresh(B: pf.f32[N, M], v: pf.f32[M]):
    """Every row of a step adds ``v`` (a broadcast operand within the step); then the step sets ``v`` from the last row, reversed."""
    for t in range(T):
        for i in range(N):
            for j in range(M):
                B[i, j] = B[i, j] + v[j]
        for j in range(M):
            v[j] = B[N - 1, M - 1 - j] * 0.5


# -- the oracle: enumerate the schedule ---------------------------------------------------------------


def _points(umap: isl.UnionMap, fixed: isl.Set) -> dict[tuple[str, tuple[int, ...]], tuple[int, ...]]:
    """``(statement, instance) -> image`` for a single-valued union map, by enumerating its points."""
    out = {}
    maps: list[isl.Map] = []
    umap.intersect_params(fixed).foreach_map(maps.append)
    for m in maps:
        n_in, n_out = m.dim(isl.dim_type.in_), m.dim(isl.dim_type.out)
        name = m.get_tuple_name(isl.dim_type.in_)
        w = m.wrap()
        w = w.project_out(isl.dim_type.param, 0, w.dim(isl.dim_type.param))

        def add(p, name=name, n_in=n_in, n_out=n_out):
            c = [int(p.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(n_in + n_out)]
            out[(name, tuple(c[:n_in]))] = tuple(c[n_in:])

        w.foreach_point(add)
    return out


def enumerated_traffic(sched, params) -> dict[tuple[str, str], list[int]]:
    """``(kernel, array) -> [elements read, elements written]``: every instance of each kernel grouped by
    its tile, replayed in schedule order; a read moves an element when the tile has not written it yet,
    and each distinct element read or written counts once per tile."""
    prog = sched.program
    fixed = fixed_params(prog, params)
    order = _points(sched.tree.get_map().intersect_domain(prog.domains), fixed)
    accesses = [(s.name, a, _points(isl.UnionMap.from_map(a.relation), fixed)) for s in prog.statements for a in s.accesses]
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for region in kernel_regions(sched.tree, sched.kernels):
        tiles = _points(region.tile_map, fixed)
        events = defaultdict(list)  # tile -> [(time, phase, array, element, is_write)]
        for (stmt, inst), tile in tiles.items():
            for name, a, image in accesses:
                if name != stmt or a.array in sched.contracted:
                    continue
                elem = image[(stmt, inst)]
                if a.kind in ("read", "update"):
                    events[tile].append((order[(stmt, inst)], 0, a.array, elem, False))
                if a.kind in ("write", "update"):
                    events[tile].append((order[(stmt, inst)], 1, a.array, elem, True))
        reads: dict[tuple[int, ...], set] = {}
        written_arrays = set()
        for tile, evs in events.items():
            written, read, wrote = set(), set(), set()
            for _t, _ph, array, elem, is_write in sorted(evs):
                if is_write:
                    written.add((array, elem))
                    wrote.add((array, elem))
                elif (array, elem) not in written:
                    read.add((array, elem))
            reads[tile] = read
            written_arrays |= {array for array, _ in wrote}
            for array, _ in wrote:
                out[(region.kernel.name, array)][1] += 1
        for array in {array for read in reads.values() for array, _ in read}:
            per_tile = {tile: {e for a, e in read if a == array} for tile, read in reads.items()}
            per_tile = {tile: elements for tile, elements in per_tile.items() if elements}  # (tiles that read it)
            out[(region.kernel.name, array)][0] += _moved(per_tile, region.tile_dims, array in written_arrays,
                                                          itemsize(prog, array))
    return out


def _moved(per_tile: dict[tuple[int, ...], set], tile_dims: int, written: bool, size: int) -> int:
    """Elements of one array a kernel reads, summed over its tiles; but a read-only array that every tile
    of a launch (the tiles sharing the prefix before the kernel's ``tile_dims`` tile loops) reads alike,
    and whose elements fit in half of a core's L2, moves once per launch (``footprint._broadcast_count``)."""
    total = sum(len(s) for s in per_tile.values())
    if written or tile_dims == 0:
        return total
    launches: dict[tuple[int, ...], list[set]] = defaultdict(list)
    for tile, elements in per_tile.items():
        launches[tile[:len(tile) - tile_dims]].append(elements)
    if any(s != sets[0] for sets in launches.values() for s in sets):
        return total
    if len(set().union(*(sets[0] for sets in launches.values()))) * size > cache_sizes()[1] // 2:
        return total
    return sum(len(sets[0]) for sets in launches.values())


SMALL = {"N": 7, "M": 6, "K": 5, "T": 3}

CASES = [(prog, target, tile) for prog in K.ALL + [box3x3, refresh] for target, tile in (("c", (3, 4, 2)), ("cuda", (2, 4)))]


@pytest.mark.parametrize("prog,target,tile", CASES, ids=[f"{p.name}-{t}" for p, t, _ in CASES])
def test_model_equals_enumeration(prog, target, tile):
    """Exact footprints: the model's bytes equal the enumerated distinct addresses per tile, for every
    kernel and array of the corpus (CUDA with shared_memory=0: the tree keeps no extension nodes, so the
    oracle can read the flat schedule order)."""
    params = {p: SMALL[p] for p in prog.params}
    tile = tile[: max(s.domain.dim(isl.dim_type.set) for s in prog.statements)]  # no more sizes than loops
    sched = pf.schedule(prog, target=target, tile=tile, params=params, shared_memory=0 if target == "cuda" else 49152)
    report = sched.traffic()
    expected = enumerated_traffic(sched, params)
    got = {}
    for k in report.per_kernel.values():
        for a in k.per_array.values():
            size = itemsize(prog, a.array)
            got[(k.name, a.array)] = [a.read_bytes // size, a.write_bytes // size]
    nonzero = {key: v for key, v in expected.items() if any(v)}
    assert {key: v for key, v in got.items() if any(v)} == nonzero


def test_fused_chain_is_compulsory_and_unfused_is_sum_of_stages():
    params = {"N": 256, "M": 192}
    for target in ("c", "cuda"):
        fused = pf.schedule(K.add_exp, target=target, fusion="smart", params=params)
        assert len(fused.kernels) == 1 and fused.contracted == {"B"}
        r = fused.traffic()
        assert r.total_bytes == r.compulsory_bytes == 2 * 256 * 192 * 4
        unfused = pf.schedule(K.add_exp, target=target, fusion="none", params=params)
        u = unfused.traffic()
        assert len(u.per_kernel) == 2
        # the intermediate is written by the first stage and read back by the second
        assert u.per_array["B"].write_bytes == u.per_array["B"].read_bytes == 256 * 192 * 4
        assert u.total_bytes == sum(k.total_bytes for k in u.per_kernel.values()) == 2 * r.total_bytes


def test_gemm_chosen_tiles_beat_untiled_by_16x():
    """Untiled: one thread per block (tile=(1, 1)), so every thread reads its row of A and column of B
    from global memory: (2K + 2) elements per C element (the +2: C read once and written once)."""
    n = 2048
    params = {"N": n, "M": n, "K": n}
    untiled = pf.schedule(K.gemm, target="cuda", tile=(1, 1), params=params).traffic()
    assert untiled.total_bytes == n * n * (2 * n + 2) * 4
    sched = pf.schedule(K.gemm, target="cuda", params=params, shared_memory=16000)  # (the tile search: no micro-tile)
    (kernel,) = sched.kernels
    threads = 1
    for b in kernel.block:
        threads *= b
    assert threads <= 1024 and kernel.tile_sizes[-1] % 32 == 0
    tiled = sched.traffic()
    ty, tx = kernel.tile_sizes
    assert tiled.total_bytes == n * n * (n // tx + n // ty + 2) * 4
    # the register micro-tile: C *= beta on its own (C read and written once), then 128 x 64 tiles (A read
    # once per 64 columns, B once per 128 rows)
    micro = pf.schedule(K.gemm, target="cuda", params=params).traffic()
    assert micro.total_bytes == n * n * (2 + n // 64 + n // 128 + 2) * 4
    assert tiled.total_bytes * 16 <= untiled.total_bytes
    assert any("tile search" in note for note in sched.notes)


def test_a_broadcast_operand_moves_once_per_launch():
    """``v`` is read alike by every row tile of a step: it moves once per step, not once per tile, and not
    once for all steps (the step rewrites it)."""
    sizes = {"N": 64, "M": 48, "T": 5}
    report = pf.schedule(refresh, target="c", tile=(8, 64), params=sizes).traffic()  # (tiles of whole rows)
    (adds,) = [k for k in report.per_kernel.values() if "S0" in k.statements]
    assert adds.tiles > sizes["T"]  # several tiles per step
    assert adds.per_array["v"].read_bytes == sizes["T"] * sizes["M"] * 4


def test_3x3_stencil_near_compulsory():
    params = {"N": 2048, "M": 2048}
    r = pf.schedule(box3x3, target="cuda", params=params).traffic()
    assert r.compulsory_bytes == (2048 * 2048 + 2046 * 2046) * 4
    assert r.total_bytes <= 1.3 * r.compulsory_bytes


def test_smart_fusion_explains_bytes():
    sched = pf.schedule(K.add_exp, target="cuda", fusion="smart")
    text = sched.explain()
    assert "fusion='smart' by traffic" in text and "representative sizes" in text
    assert len(sched.kernels) == 1


def test_contracted_arrays_move_nothing_and_format():
    sched = pf.schedule(K.row_sum, target="c", params={"N": 16, "M": 16})
    r = sched.traffic()
    assert "acc" in sched.contracted and "acc" not in r.per_array
    text = format_traffic(r)
    assert "compulsory" in text and "kernel0" in text


def test_traffic_needs_sizes():
    with pytest.raises(pf.PolyfuseError, match="concrete sizes"):
        pf.schedule(K.add_exp, target="c").traffic()
    r = pf.schedule(K.add_exp, target="c").traffic(params={"N": 8, "M": 8})
    assert r.total_bytes == r.compulsory_bytes


def test_count_points_slicing_is_exact():
    s = isl.Set("{ [t, i, j] : 0 <= t < 300 and 0 <= i <= t and 0 <= j < 200 }")
    assert count_points(s) == sum((t + 1) * 200 for t in range(300))
    box = isl.Set("{ [a, b, c] : 0 <= a < 500 and 0 <= b < 100 and 3a <= c < 3a + 7 and c < 1200 }")
    assert count_points(box) == sum(len([c for c in range(3 * a, 3 * a + 7) if c < 1200]) * 100 for a in range(500))
