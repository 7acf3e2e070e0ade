"""Several iterations a thread for CUDA element-wise kernels (``schedule/mapping/element_share.py``): which
kernels take it, what ``explain()`` says, the printed loop, and the kernels in the simulator against the
reference at sizes that leave partial tiles (the constants shrunk so that small sizes qualify)."""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.workloads import BY_NAME
from examples import kernels as ex
from polyfuse.runtime import cuda_sim
from polyfuse.schedule.mapping import element_share

needs_sim = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")
R, D = pf.params("R D")


@pf.program
def scale_then_shift(x: pf.f32[R, D], y: pf.f32[R, D], z: pf.f32[R, D]):
    """Two element-wise statements with a flow dependence between them (y), fused into one kernel."""
    for i in range(R):
        for j in range(D):
            y[i, j] = x[i, j] * 2.0
    for i in range(R):
        for j in range(D):
            z[i, j] = y[i, j] + x[i, j]


def test_large_element_wise_kernels_give_each_thread_four_elements() -> None:
    for name in ("add_exp", "chain4"):
        sched = pf.schedule(BY_NAME[name].program(), target="cuda", params={"R": 4096, "D": 4096})
        (k,) = sched.kernels
        assert k.thread_share == 4 and k.block == (256, 1) and k.grid == (4, 4096), k
        assert "each thread runs 4 iterations of the innermost mapped loop, 256 apart" in sched.explain()
        text = pf.codegen(sched).text
        assert "for (long long c4 = 0; c4 <= 3; c4 += 1) {" in text and "(256 * c4)" in text


def test_small_kernels_and_kernels_with_loops_keep_one_iteration_a_thread() -> None:
    small = pf.schedule(BY_NAME["add_exp"].program(), target="cuda", params={"R": 256, "D": 512})
    assert all(k.thread_share == 0 for k in small.kernels)  # 128 blocks of 1024: too few for the GPU
    symbolic = pf.schedule(BY_NAME["add_exp"].program(), target="cuda")
    assert all(k.thread_share == 0 for k in symbolic.kernels)
    user = pf.schedule(BY_NAME["add_exp"].program(), target="cuda", params={"R": 4096, "D": 4096}, tile=(1, 1024))
    assert all(k.thread_share == 0 for k in user.kernels)  # the user's tiles are kept as given
    generic = pf.schedule(ex.gemm, target="cuda", params={"N": 4096, "M": 4096, "K": 64}, tile=(1, 1024))
    assert all(k.thread_share == 0 for k in generic.kernels)  # statements with a loop below the mapped band


@needs_sim
@pytest.mark.parametrize("prog", [BY_NAME["add_exp"].program(), BY_NAME["chain4"].program(), scale_then_shift],
                         ids=["add_exp", "chain4", "scale_then_shift"])
@pytest.mark.parametrize("r, d", [(3, 256), (5, 300), (2, 129)])
def test_shared_iterations_equal_the_reference_in_the_simulator(prog: pf.Program, r: int, d: int, monkeypatch) -> None:
    """32 threads of 4 iterations (128 a tile) and no minimum of blocks: full tiles, a partial last tile
    (300 = 2 x 128 + 44) and a tile with one iteration past a whole one (129)."""
    monkeypatch.setattr(element_share, "THREADS", 32)
    monkeypatch.setattr(element_share, "SHARE", 4)
    monkeypatch.setattr(element_share, "MIN_BLOCKS", 1)
    sizes = {"R": r, "D": d}
    sched = pf.schedule(prog, target="cuda", params=sizes)
    assert any(k.thread_share == 4 and k.block[0] == 32 for k in sched.kernels), sched.explain()
    rng = np.random.default_rng(3)
    args = {n: rng.standard_normal(prog.arrays[n].concrete_shape(sizes)).astype(np.float32) for n in prog.arguments}
    want = {n: v.copy() for n, v in args.items()}
    pf.reference(prog)(**want)
    pf.compile(prog, target="cuda-sim", params=sizes)(**args)
    for n, v in args.items():
        np.testing.assert_allclose(v, want[n], rtol=1e-5, atol=1e-5, err_msg=f"{prog.name} {n} at {sizes}")
