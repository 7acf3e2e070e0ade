"""CUDA sums into a vector (``schedule/mapping/vector_sums.py``, ``codegen/cuda_vector_sums.py``): a sum
along one loop shares that loop among many threads (columns: a grid of blocks and atomics; rows: a warp
per element), and equals the reference in the simulator at sizes with partial blocks and several slices."""

from __future__ import annotations

import math

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.runtime import cuda_sim
from tests.kernels import BY_NAME

N, M = pf.params("N M")
needs_sim = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")


@pf.program
def colsum(A: pf.f32[N, M], x: pf.f32[N], s: pf.f32[M]):
    """s = A.T @ x: the column loop j is parallel, the row loop i a sum."""
    for j in range(M):
        s[j] = 0.0
    for i in range(N):
        for j in range(M):
            s[j] += A[i, j] * x[i]


@pf.program
def colsum_i32(A: pf.i32[N, M], s: pf.i32[M]):
    for j in range(M):
        s[j] = 1
    for i in range(1, N):
        for j in range(M):
            s[j] += A[i, j] % 7


@pf.program
def rowsum(A: pf.f32[N, M], s: pf.f32[N]):
    """A row sum (gemv's shape): a warp per element."""
    for i in range(N):
        s[i] = 0.0
        for j in range(M):
            s[i] += A[i, j]


def _columns(sched: pf.Schedule):
    return [k for k in sched.kernels if k.vector_sum is not None]


def _layouts(sched: pf.Schedule) -> set[str]:
    return {k.vector_sum.layout for k in _columns(sched)}


def test_polybench_column_sums_fill_the_gpu() -> None:
    for name, sizes in (("atax", {"m": 1900, "n": 2100}), ("bicg", {"m": 1900, "n": 2100}), ("mvt", {"n": 2000}),
                        ("gemver", {"n": 2000}), ("covariance", {"m": 1200, "n": 1400})):
        k = BY_NAME[name]
        prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
        sched = pf.schedule(prog, target="cuda", params=sizes)
        planned = _columns(sched)
        assert planned, (name, [(kk.statements, kk.grid) for kk in sched.kernels])
        for kernel in planned:
            assert kernel.block == (32, 8) and math.prod(kernel.grid) >= 132, (name, kernel.grid)
            what = "column reduction: 32 columns x 8 row slices per block" if kernel.vector_sum.layout == "columns" else "row sum: a warp per element"
            assert f"{kernel.name}: {what}" in sched.explain()
        assert _layouts(sched) == ({"columns"} if name == "covariance" else {"rows", "columns"}), name  # (atax: tmp, then y)


def test_only_reassociable_column_sums_are_shared() -> None:
    sizes = {"N": 4000, "M": 64}
    assert _columns(pf.schedule(colsum, target="cuda", params=sizes))
    assert not _columns(pf.schedule(colsum, target="cuda", params=sizes, reassociate=False))  # floats: source order
    assert _columns(pf.schedule(colsum_i32, target="cuda", params=sizes, reassociate=False))  # integers: exact anyway
    assert _layouts(pf.schedule(rowsum, target="cuda", params=sizes)) == {"rows"}


@needs_sim
@pytest.mark.parametrize("prog", [colsum, colsum_i32, rowsum], ids=lambda p: p.name)
@pytest.mark.parametrize("n, m", [(1, 1), (7, 33), (130, 37), (2000, 40)])
def test_column_sums_equal_the_reference_in_the_simulator(prog: pf.Program, n: int, m: int) -> None:
    rng = np.random.default_rng(3)
    for params in ({"N": n, "M": m}, None):
        args = {}
        for name in prog.arguments:
            a = prog.arrays[name]
            shape = a.concrete_shape({"N": n, "M": m})
            args[name] = (rng.integers(-50, 50, shape) if a.dtype.name == "i32" else rng.standard_normal(shape)).astype(a.dtype.numpy)
        want = {k: v.copy() for k, v in args.items()}
        pf.reference(prog)(**want)
        sched = pf.schedule(prog, target="cuda", params=params)
        assert _columns(sched)
        pf.compile(prog, target="cuda-sim", params=params)(**args)  # (s given: written in place)
        np.testing.assert_allclose(args["s"], want["s"], rtol=1e-4, atol=1e-3)


def test_two_sums_over_one_loop_get_a_warp_per_row_each() -> None:
    """gesummv: ``tmp[i] += A[i][j] * x[j]`` and ``y[i] += B[i][j] * x[j]`` share their ``j`` loop in the
    source; each is taken apart into a kernel of its own with a warp per row (was: one kernel, 41 blocks of
    32 threads each walking a whole row)."""
    k = BY_NAME["gesummv"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    sched = pf.schedule(prog, target="cuda", params={"n": 1300})
    rows = [kk for kk in _columns(sched) if kk.vector_sum.layout == "rows"]
    assert sorted(kk.statements for kk in rows) == [("S2",), ("S3",)]
    assert all(math.prod(kk.grid) >= 132 for kk in rows)
    assert "S2 | S3: not fused: S3 runs as a sum into a vector, which takes a kernel of its own" in sched.explain()


@needs_sim
@pytest.mark.parametrize("n", [1, 7, 40])
def test_gesummv_row_sums_equal_the_reference_in_the_simulator(n: int) -> None:
    k = BY_NAME["gesummv"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    rng = np.random.default_rng(n)
    for params in ({"n": n}, None):
        if params is not None:
            assert len([kk for kk in _columns(pf.schedule(prog, target="cuda", params=params)) if kk.vector_sum.layout == "rows"]) == 2
        args = {"n": n, "alpha": 1.5, "beta": -0.5}
        for name in prog.arguments:
            if name in prog.arrays:
                args[name] = rng.standard_normal(prog.arrays[name].concrete_shape({"n": n})).astype(prog.arrays[name].dtype.numpy)
        want = {name: v.copy() if isinstance(v, np.ndarray) else v for name, v in args.items()}
        pf.reference(prog)(**want)
        pf.compile(prog, target="cuda-sim", params=params)(**args)
        np.testing.assert_allclose(args["y"], want["y"], rtol=1e-9, atol=1e-9)
