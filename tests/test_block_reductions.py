"""CUDA reductions into one element (``schedule/mapping/block_reductions.py``): a sum, max or min over a
whole array is shared by the threads of the launch (per-thread registers, a block reduction, one
``atomicAdd`` per block for sums) instead of running on one thread; results equal the reference in the
CUDA simulator at odd sizes, a float sum within a bound from its length, and ``reassociate=False`` keeps
a float sum in source order on one thread, bit for bit."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.runtime import cuda_sim

N, M = pf.params("N M")
pytestmark = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")


def _reduction(op: str, dtype, shape) -> pf.Program:
    g = pf.Graph("r")
    x = g.input("x", shape, dtype)
    return g.build(y=getattr(pf.ops, op)(x))


def _run(prog: pf.Program, code: pf.Code, x: np.ndarray, sizes: dict) -> tuple[np.ndarray, np.ndarray]:
    y = np.zeros((), x.dtype)
    values = {**sizes, "x": x, "y": y}
    cuda_sim.load(code)(*(values[a.name] for a in code.signature))
    want = np.zeros((), x.dtype)
    pf.reference(prog)(x=x, y=want, **sizes)
    return y, want


def _tolerance(x: np.ndarray) -> float:
    """A float sum of ``n`` terms reassociated: within about ``n`` roundings of the sum of magnitudes."""
    return float(x.size * np.finfo(x.dtype).eps * np.abs(x.astype(np.float64)).sum()) + 1e-30


@pytest.mark.parametrize("op, dtype", [("sum", pf.f32), ("sum", pf.f64), ("sum", pf.i32), ("max", pf.f32), ("min", pf.f64)])
@pytest.mark.parametrize("n", [1, 7, 37, 129, 1000])
def test_a_whole_array_reduction_is_shared_by_the_threads(op: str, dtype, n: int) -> None:
    prog = _reduction(op, dtype, (N,))
    sched = pf.schedule(prog, target="cuda")  # symbolic: the parallel layout at every size
    kernel = sched.kernels[-1]
    assert kernel.block[0] >= 32 and "parallel reduction" in sched.explain()
    assert kernel.grid[0] > 1 if op == "sum" else kernel.grid == (1,)
    x = (np.random.default_rng(n).standard_normal(n) * 8).astype(dtype.numpy)
    got, want = _run(prog, pf.codegen(sched), x, {"N": n})
    if op == "sum" and dtype.is_float:
        assert abs(float(got) - float(want)) <= _tolerance(x)
    else:
        assert got == want  # max, min and integer sums are exact in any order


@pytest.mark.parametrize("n, m", [(1, 1), (7, 3), (37, 129)])
def test_a_matrix_sum_to_one_element(n: int, m: int) -> None:
    prog = _reduction("sum", pf.f32, (N, M))
    code = pf.codegen(pf.schedule(prog, target="cuda"))
    assert "atomicAdd(y + 0, y_acc)" in code.text
    x = np.random.default_rng(1).random((n, m)).astype(np.float32)
    got, want = _run(prog, code, x, {"N": n, "M": m})
    assert abs(float(got) - float(want)) <= _tolerance(x)


def test_large_sums_use_many_blocks_and_move_only_compulsory_bytes() -> None:
    prog = _reduction("sum", pf.f32, (1 << 20,))
    sched = pf.schedule(prog, target="cuda", params={})
    kernel = sched.kernels[-1]
    assert math.prod(kernel.grid) * math.prod(kernel.block) >= 132 * 256  # every SM of an H100 busy
    report = sched.traffic()
    assert report.total_bytes - report.compulsory_bytes <= 8  # (y's element read and written again)
    assert sched.kernels[0].block == (1,)  # the initialisation: one element, one thread


def test_small_sums_at_known_sizes_stay_on_one_thread() -> None:
    sched = pf.schedule(_reduction("sum", pf.f32, (N,)), target="cuda", params={"N": 100})
    assert sched.kernels[-1].block == (1,)


def test_without_reassociation_a_float_sum_keeps_its_order_bit_for_bit() -> None:
    prog = _reduction("sum", pf.f32, (N,))
    sched = pf.schedule(prog, target="cuda", reassociate=False)
    assert all(k.block in ((1,), ()) and not k.reduction for k in sched.kernels)
    x = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    got, want = _run(prog, pf.codegen(sched), x, {"N": 1000})
    assert got.tobytes() == want.tobytes()
    assert pf.schedule(_reduction("max", pf.f32, (N,)), target="cuda", reassociate=False).kernels[-1].reduction  # exact


@pf.program(assume="M >= 4")
def into_element(A: pf.f64[N], y: pf.f64[4, M]):
    for i in range(N):
        y[2, 3] += A[i]


def test_a_sum_into_an_element_of_a_matrix_adds_at_that_element() -> None:
    """(The element's address is ``y + ((2) * M + 3)``: a fuzzed program found it printed unparenthesised.)"""
    code = pf.codegen(pf.schedule(into_element, target="cuda"))
    assert "atomicAdd(y + ((2) * M + 3), y_acc)" in code.text
    a = np.arange(1000.0)
    y = np.ones((4, 7))
    cuda_sim.load(code)(1000, 7, a, y)
    assert y[2, 3] == 1 + a.sum() and (y.sum() - y[2, 3]) == 27


def test_a_reduction_that_reads_its_own_array_elsewhere_stays_sequential() -> None:
    @pf.program
    def prefix(A: pf.f32[N]):
        for i in range(1, N):
            A[0] += A[i]

    sched = pf.schedule(prefix, target="cuda")
    assert not any(k.reduction for k in sched.kernels)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_reduction_kernels_compile_with_nvcc(tmp_path: Path) -> None:
    for op, dtype in (("sum", pf.f32), ("sum", pf.f64), ("sum", pf.i32), ("max", pf.f32), ("min", pf.i32)):
        text = pf.codegen(pf.schedule(_reduction(op, dtype, (N,)), target="cuda")).text
        src = tmp_path / f"{op}_{dtype.name}.cu"
        src.write_text(text)
        out = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", str(src.with_suffix(".ptx")), str(src)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("op", ["max", "min"])
def test_integer_max_and_min_start_from_the_types_extremes(op: str) -> None:
    """(``pf.ops.max`` of an i32 tensor used to start from a float infinity and fail to build.)"""
    x = np.array([-2**31, 5, 2**31 - 1, -7], np.int32)
    prog = _reduction(op, pf.i32, (4,))
    got = np.zeros((), np.int32)
    pf.reference(prog)(x=x, y=got)
    assert got == getattr(np, op)(x)
    assert pf.compile(prog, target="c")(x=x) == getattr(np, op)(x)


@pytest.mark.parametrize("name", ["durbin", "gramschmidt"])
def test_inner_products_below_a_host_loop_are_shared_by_the_threads(name: str) -> None:
    """durbin's ``sum += r[k-i-1] * y[i]`` and gramschmidt's ``nrm += A[i][k] * A[i][k]``: one launch per
    iteration of the outer loop, each shared by the launch's threads; the simulation equals the reference."""
    from tests.test_codegen_cuda import build_emulator
    from tests.test_cuda_races import _check, _program, _sizes

    prog = _program(name)
    sched = pf.schedule(prog, target="cuda")
    (kernel,) = [k for k in sched.kernels if k.reduction]
    assert kernel.grid[0] > 1 and kernel.block[0] >= 32
    assert [k for k in pf.schedule(prog, target="cuda", params=_sizes(prog, 4000)).kernels if k.reduction]
    code = pf.codegen(sched)
    assert _check(build_emulator([("v", code)]), "v", name, prog, code, _sizes(prog, 37)) == ""
