"""CUDA register micro-tiles for contractions (``schedule/tiling/cuda_microtile.py``,
``codegen/cuda_micro.py``): the plan and its static evidence (ptxas), the modelled traffic, and the
generated kernels in the simulator (races, bounds, ``cp.async`` landing only at its wait) against the
reference at sizes that leave remainders everywhere."""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil

import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as ex
from polyfuse.runtime import cuda_sim
from polyfuse.schedule.tiling import cuda_microtile

N, M, K, B = pf.params("N M K B")
BIG = {"N": 2048, "M": 2048, "K": 2048}
needs_sim = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pf.program
def a_bt(A: pf.f32[N, K], Bt: pf.f32[M, K], C: pf.f32[N, M]):
    """C = A @ Bt.T: the lane operand is contiguous along k (a padded k x lanes tile, one element per copy)."""
    for i in range(N):
        for j in range(M):
            C[i, j] = 0.0
            for k in range(K):
                C[i, j] += A[i, k] * Bt[j, k]


@pf.program
def at_b(At: pf.f64[K, N], Bm: pf.f64[K, M], C: pf.f64[N, M]):
    """C += At.T @ B in doubles: the rows operand is contiguous along the rows (2 doubles per copy)."""
    for i in range(N):
        for j in range(M):
            for k in range(K):
                C[i, j] += (At[k, i] + 1.0) * Bm[k, j]


@pf.program
def bmm(X: pf.f32[B, N, K], Y: pf.f32[B, K, M], Z: pf.f32[B, N, M]):
    """A batched matmul: the batch on blockIdx.z."""
    for b in range(B):
        for i in range(N):
            for j in range(M):
                Z[b, i, j] = 0.0
                for k in range(K):
                    Z[b, i, j] += X[b, i, k] * Y[b, k, j]


@pf.program
def syrk_like(A: pf.f32[N, K], C: pf.f32[N, N]):
    """A triangular contraction: not rectangular, so it keeps the generic mapping."""
    for i in range(N):
        for j in range(i + 1):
            for k in range(K):
                C[i, j] += A[i, k] * A[j, k]


def _force_plan(monkeypatch, **fields) -> None:
    """Every micro-tile plan sized for the GPU gets ``fields`` (as the acceptance benchmark's sweep does)."""
    km = importlib.import_module("polyfuse.schedule.mapping.kernels")
    original = km.sized_for_the_gpu
    monkeypatch.setattr(km, "sized_for_the_gpu", lambda plan, *a, **kw: dataclasses.replace(original(plan, *a, **kw), **fields))


def _micro(sched: pf.Schedule):
    (kernel,) = [k for k in sched.kernels if k.microtile is not None]
    return kernel


def _run(prog: pf.Program, sizes: dict, symbolic: bool, code: pf.Code | None = None, **options) -> None:
    """``prog`` on the simulator (sized or symbolic) against the reference, on random inputs."""
    rng = np.random.default_rng(7)
    args = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            args[name] = rng.standard_normal(a.concrete_shape(sizes)).astype(a.dtype.numpy)
        else:
            args[name] = prog.scalars[name].numpy(1.25)
    want = {n: v.copy() if isinstance(v, np.ndarray) else v for n, v in args.items()}
    pf.reference(prog)(**want)
    if code is None:
        exe = pf.compile(prog, target="cuda-sim", params=None if symbolic else sizes, **options)
        exe(**args)
    else:
        values = dict(args, **sizes)
        cuda_sim.load(code)(*(values[s.name] for s in code.signature))
    for n, v in args.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_allclose(v, want[n], rtol=1e-4, atol=1e-4, err_msg=f"{prog.name} {n} at {sizes}")


def test_gemm_plan_is_an_8x4_register_tile_per_thread_with_three_stages() -> None:
    for prog in (ex.gemm, ex.gemm_acc):
        sched = pf.schedule(prog, target="cuda", params=BIG)
        kernel = _micro(sched)
        plan = kernel.microtile
        assert (plan.thread_rows, plan.thread_lanes, plan.block_rows, plan.block_lanes) == (8, 4, 128, 64)
        assert plan.stages == 3 and kernel.block == (16, 16) and kernel.grid == (32, 16)
        assert plan.k_stage == 16 and plan.min_blocks == 0 and not plan.k_major
        # A stored rows x k as it lies in memory, B k x lanes (the faster layout on an H200, session 24)
        assert kernel.shared_bytes == plan.stages * (128 * 16 + 16 * 64) * 4
        assert "register micro-tile: 128 x 64 outputs per block, 8 x 4 per thread" in sched.explain()
    # 1024^2 outputs in 128 x 64 tiles would leave SMs idle (128 blocks < 132): 64 x 64 tiles, 4 x 4 a thread
    kernel = _micro(pf.schedule(ex.gemm, target="cuda", params={"N": 1024, "M": 1024, "K": 1024}))
    assert (kernel.microtile.block_rows, kernel.microtile.thread_rows, kernel.microtile.thread_lanes) == (64, 4, 4)
    assert kernel.grid == (16, 16)


def test_modelled_traffic_is_a_sixteenth_of_untiled_in_both_forms() -> None:
    for prog in (ex.gemm, ex.gemm_acc):  # C[i, j] += ... and the scalar accumulator
        tiled = pf.schedule(prog, target="cuda", params=BIG).traffic().total_bytes
        untiled = pf.schedule(prog, target="cuda", tile=(1, 1), params=BIG).traffic().total_bytes
        assert tiled * 16 <= untiled, (prog.name, tiled, untiled)


@needs_nvcc
def test_gemm_has_no_spills_and_the_occupancy_its_tile_allows_on_sm_90(monkeypatch) -> None:
    """8 x 4 accumulators a thread (2048^3) take 105 registers with A's tile stored rows x k, two blocks an
    SM (25 %: measured faster than every 50 % variant, ``cuda_microtile.TALL``); 4 x 4 (1024^3) fit 64
    registers and four blocks (50 %). Both forms of the gemm, the ``C[i, j] +=`` and the scalar
    accumulator; the k-major layout still compiles to 64 registers without a spill under its bound."""
    mid = {"N": 1024, "M": 1024, "K": 1024}
    for prog in (ex.gemm, ex.gemm_acc):
        for sizes, occupancy in ((BIG, 0.25), (mid, 0.5)):
            code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes))
            assert "pf_copy_async16(" in code.text and "__launch_bounds__(256)" in code.text
            (k,) = [r for r in code.resources(sizes).kernels if r.kernel.endswith("_k1")]
            assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack == 0, k
            assert k.registers <= 65536 // (int(occupancy * 2048)) and k.occupancy >= occupancy, (sizes, k)
    _force_plan(monkeypatch, k_major=True, **cuda_microtile.TALL_K_MAJOR)
    code = pf.codegen(pf.schedule(ex.gemm_acc, target="cuda", params=BIG))
    (k,) = [r for r in code.resources(BIG).kernels if r.kernel.endswith("_k1")]
    assert "__launch_bounds__(256, 4)" in code.text and "transposed on the copy" in code.text
    assert k.spill_stores == 0 and k.registers <= 64 and k.occupancy >= 0.5, k


@needs_nvcc
def test_without_reassociation_each_sum_starts_from_its_element_and_nothing_spills() -> None:
    code = pf.codegen(pf.schedule(ex.gemm_acc, target="cuda", params=BIG, reassociate=False))
    assert "pf_acc[pf_r][pf_c] = (" in code.text
    assert "__launch_bounds__(256) " in code.text  # (no register cap: under 64 this form spilled)
    (k,) = [r for r in code.resources(BIG).kernels if r.kernel.endswith("_k1")]
    assert k.spill_stores == 0 and k.spill_loads == 0


def test_few_blocks_take_smaller_tiles_and_doubles_narrower_thread_tiles() -> None:
    few = _micro(pf.schedule(ex.gemm, target="cuda", params={"N": 512, "M": 512, "K": 2048}))  # 64 tiles of 64 x 64
    assert (few.microtile.block_rows, few.microtile.thread_rows, few.microtile.thread_lanes) == (32, 2, 2)
    assert few.grid == (16, 16) and few.block == (16, 16)
    doubles = _micro(pf.schedule(at_b, target="cuda", params={"N": 1024, "M": 1024, "K": 64})).microtile
    assert (doubles.thread_rows, doubles.thread_lanes, doubles.threads) == (4, 2, (32, 16))  # 8 accumulators of 8 bytes


def test_shapes_outside_the_micro_tile_keep_the_generic_mapping() -> None:
    sched = pf.schedule(syrk_like, target="cuda", params={"N": 300, "K": 200})
    assert all(k.microtile is None for k in sched.kernels)
    explicit = pf.schedule(ex.gemm, target="cuda", params=BIG, tile=(32, 32))  # the user's tiles are kept
    assert all(k.microtile is None for k in explicit.kernels) and len(explicit.kernels) == 1


@needs_sim
@pytest.mark.parametrize("prog", [ex.gemm, ex.gemm_acc, a_bt, at_b], ids=lambda p: p.name)
@pytest.mark.parametrize("n, m, k", [(1, 1, 1), (7, 5, 3), (37, 41, 29), (129, 67, 65)])
def test_micro_tiles_equal_the_reference_in_the_simulator(prog: pf.Program, n: int, m: int, k: int) -> None:
    sizes = {"N": n, "M": m, "K": k}
    assert _micro(pf.schedule(prog, target="cuda", params=sizes)) is not None
    _run(prog, sizes, symbolic=False)
    _run(prog, sizes, symbolic=True)


@needs_sim
def test_a_batched_matmul_and_an_empty_reduction_in_the_simulator() -> None:
    sizes = {"B": 3, "N": 37, "M": 70, "K": 17}
    assert len(_micro(pf.schedule(bmm, target="cuda", params=sizes)).grid) == 3
    _run(bmm, sizes, symbolic=False)
    _run(bmm, sizes, symbolic=True)
    _run(ex.gemm, {"N": 40, "M": 33, "K": 0}, symbolic=True)  # no term: C only scaled


@needs_sim
def test_without_reassociation_in_the_simulator() -> None:
    _run(ex.gemm_acc, {"N": 37, "M": 70, "K": 33}, symbolic=False, reassociate=False)


# ----- the simulator catches a broken pipeline -----------------------------------------------------------

def _gemm_code(sizes: dict) -> pf.Code:
    return pf.codegen(pf.schedule(ex.gemm, target="cuda", params=sizes))


def _broken(code: pf.Code, old: str, new: str) -> pf.Code:
    assert old in code.text
    return dataclasses.replace(code, text=code.text.replace(old, new))


@needs_sim
def test_a_read_of_a_stage_before_its_copies_land_is_reported() -> None:
    sizes = {"N": 37, "M": 41, "K": 50}
    code = _gemm_code(sizes)
    _run(ex.gemm, sizes, False, code)
    early = _broken(code, "pf_copy_wait<1>();", "pf_copy_wait<2>();")  # step pf_s may still be in flight
    with pytest.raises(pf.SimulationError, match=r"__shared__ pf_[AB]_\w+\[\d\]\[\d+\]\[\d+\], which (no thread of its block has written|"
                                                 r"block .* in the same barrier interval of its block \(a data race\))"):
        _run(ex.gemm, sizes, False, early)
    never = _broken(code, "pf_copy_wait<1>();", ";")
    with pytest.raises(pf.SimulationError, match=r"which no thread of its block has written"):
        _run(ex.gemm, sizes, False, never)


@needs_sim
def test_a_removed_barrier_between_the_steps_is_a_race() -> None:
    sizes = {"N": 37, "M": 41, "K": 50}
    code = _gemm_code(sizes)
    barrier = re.search(r"__syncthreads\(\);  /\* everyone's have[^\n]*", code.text).group(0)
    with pytest.raises(pf.SimulationError, match=r"(reads|writes) __shared__ pf_[AB]_\w+\[\d\]\[\d+\]\[\d+\], which block .* "
                                                 r"in the same barrier interval of its block \(a data race\)"):
        _run(ex.gemm, sizes, False, _broken(code, barrier, ";"))


@needs_sim
def test_a_misaligned_vector_copy_is_reported() -> None:
    sizes = {"N": 37, "M": 41, "K": 48}
    code = _gemm_code(sizes)
    broken = _broken(code, "pf_at % 4 == 0 && pf_aligned16(B)", "1")  # (B's rows of 41 floats: most are not aligned)
    with pytest.raises(pf.SimulationError, match=r"16-byte cp.async to pf_B_\w+ from B\[\d+\] is out of bounds or misaligned"):
        _run(ex.gemm, sizes, False, broken)


def test_fragments_are_read_sixteen_bytes_at_a_time_along_each_threads_run(monkeypatch) -> None:
    """Each thread's rows and lanes are contiguous, so its fragments load with 16-byte shared loads: A's
    tile (rows x k, as A lies in memory) four values of k of one row at a time, B's (k x lanes) the
    thread's four lanes of one k. With ``k_major`` A and the lane operand of A @ Bt.T are transposed on
    their copies instead and load a run of rows (lanes) of one k."""
    text = _gemm_code(BIG).text
    assert "pf_load16(pf_A_rows1[pf_cs][pf_ty * 8 + pf_f][pf_kq], &pf_a1[pf_f][0]);" in text
    assert "pf_load16(pf_B_lane2[pf_cs][pf_kq + pf_u][pf_tx * 4 + pf_f], &pf_b2[pf_u][pf_f]);" in text
    assert "float pf_A_rows1[3][128][16];  /* A: i x k of 3 steps */" in text
    assert "const int pf_j = pf_j0 + pf_tx * 4 + pf_c;" in text
    _force_plan(monkeypatch, k_major=True, **cuda_microtile.TALL_K_MAJOR)
    text = _gemm_code(BIG).text
    assert "pf_load16(pf_A_rows1[pf_cs][pf_kk][pf_ty * 8 + pf_f], &pf_a1[pf_f]);" in text
    assert "float pf_A_rows1[3][8][132];  /* A: k x i of 3 steps, transposed on the copy */" in text
    transposed = pf.codegen(pf.schedule(a_bt, target="cuda", params=BIG)).text
    assert "pf_load16(pf_Bt_lane2[pf_cs][pf_kk][pf_tx * 4 + pf_f], &pf_b2[pf_f]);" in transposed


@needs_sim
def test_a_misaligned_fragment_load_is_reported() -> None:
    sizes = {"N": 37, "M": 41, "K": 48}
    symbolic = pf.codegen(pf.schedule(ex.gemm, target="cuda"))  # (64 x 64 tiles: at 37 x 41 the plan takes 32 x 32)
    broken = _broken(symbolic, "[pf_kq + pf_u][pf_tx * 4 + pf_f]", "[pf_kq + pf_u][pf_tx * 4 + pf_f + 1]")
    with pytest.raises(pf.SimulationError, match=r"a 16-byte load from pf_B_\w+ at element \d+ is out of bounds or misaligned"):
        _run(ex.gemm, sizes, False, broken)


@needs_sim
@pytest.mark.parametrize("prog", [ex.gemm, ex.gemm_acc], ids=lambda p: p.name)
def test_the_tall_tile_in_the_simulator(prog: pf.Program, monkeypatch) -> None:
    """The 128 x 64 plan (8 x 4 a thread) that large sizes take, forced at small odd sizes (as if the GPU had
    one multiprocessor): remainders in every direction, against the reference."""
    km = importlib.import_module("polyfuse.schedule.mapping.kernels")
    original = km.sized_for_the_gpu
    monkeypatch.setattr(km, "sized_for_the_gpu", lambda plan, extents, sizes, limit: original(plan, extents, sizes, limit, sms=1))
    for n, m, k in ((129, 67, 65), (7, 5, 3)):
        sizes = {"N": n, "M": m, "K": k}
        assert _micro(pf.schedule(prog, target="cuda", params=sizes)).microtile.thread_rows == 8
        _run(prog, sizes, symbolic=False)


@needs_sim
@pytest.mark.parametrize("prog", [ex.gemm_acc, a_bt], ids=lambda p: p.name)
def test_k_major_tiles_in_the_simulator(prog: pf.Program, monkeypatch) -> None:
    """The k-major layout (reads contiguous along k transposed on their copies; not the default, kept for
    the sweeps) at odd sizes, against the reference."""
    _force_plan(monkeypatch, k_major=True, **cuda_microtile.TALL_K_MAJOR)
    for n, m, k in ((129, 67, 65), (37, 41, 29)):
        sizes = {"N": n, "M": m, "K": k}
        assert _micro(pf.schedule(prog, target="cuda", params=sizes)).microtile.k_major
        _run(prog, sizes, symbolic=False)
