"""The generated CUDA on a real GPU, for what the simulator checks on the CPU: the 30 PolyBench-style C
kernels (specialised and with symbolic sizes, at sizes that leave partial blocks and tiles), the benchmark
workloads, the register micro-tiles at odd sizes and the block reductions, each against the reference.

The same programs run through the simulator in CI (``test_cuda_races.py``, ``test_cuda_workloads.py``,
``test_cuda_micro.py``, ``test_block_reductions.py``); here the hardware's own scheduling of warps, its
``cp.async`` and its atomics are the judge. Every test needs pycuda and a CUDA device and is skipped
without them (``scripts/gpu-session.sh`` runs them on the GPU machine).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.polybench import SIZES as PB_SIZES
from benchmarks.workloads import WORKLOADS
from examples import kernels as ex
from polyfuse.runtime import cuda as cuda_runtime
from tests.kernels import BY_NAME, inputs

needs_gpu = pytest.mark.skipif(not cuda_runtime.available(), reason=f"CUDA runtime unusable: {cuda_runtime._device_status() or 'ok'}")
pytestmark = [pytest.mark.gpu, needs_gpu]


def _run_code(code: pf.Code, values: dict) -> None:
    cuda_runtime.load(code)(*(values[a.name] for a in code.signature))


# ----- the PolyBench-style kernels ----------------------------------------------------------------------
def _c_program(name: str) -> pf.Program:
    k = BY_NAME[name]
    return pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)


@pytest.mark.parametrize("n", [37, 129])
@pytest.mark.parametrize("symbolic", [False, True], ids=["sized", "symbolic"])
@pytest.mark.parametrize("name", sorted(PB_SIZES))
def test_polybench_kernel_on_the_gpu_matches_the_reference(name: str, symbolic: bool, n: int) -> None:
    prog = _c_program(name)
    if name == "doitgen":
        n = n // 2
    sizes = {p: 3 if p.upper() in ("TSTEPS", "TMAX") else n for p in prog.params}
    kernel = dataclasses.replace(BY_NAME[name], sizes=MappingProxyType({p.upper(): v for p, v in sizes.items()}))
    got = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in inputs(kernel).items() if k in prog.arguments}
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in got.items()}
    pf.reference(prog)(**want, **sizes)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=None if symbolic else sizes))
    _run_code(code, {**got, **sizes})
    for k, v in want.items():
        if isinstance(v, np.ndarray):
            tol = 1e-4 if v.dtype == np.float32 else 1e-6
            np.testing.assert_allclose(got[k], v, rtol=tol, atol=tol, err_msg=f"{name} {k} at {sizes}")


# ----- the benchmark workloads ----------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["test", "quick"])
@pytest.mark.parametrize("sized", [True, False], ids=["sized", "symbolic"])
@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_workload_on_the_gpu_matches_numpy(w, sized: bool, which: str) -> None:
    prog = w.program()
    sizes = dict(getattr(w, which))
    values = w.inputs(prog, sizes)
    expected = w.expected(prog, values, sizes)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes if sized or not prog.params else None))
    _run_code(code, {**sizes, **values})
    for name, e in expected.items():
        scale = float(np.abs(e).max()) if e.size else 0.0
        np.testing.assert_allclose(values[name], e, rtol=max(w.rtol, 1e-3), atol=1e-3 * max(1.0, scale), err_msg=f"{w.name}: {name}")


# ----- micro-tiles and block reductions -------------------------------------------------------------------
@pytest.mark.parametrize("symbolic", [False, True], ids=["sized", "symbolic"])
@pytest.mark.parametrize("prog", [ex.gemm, ex.gemm_acc], ids=lambda p: p.name)
@pytest.mark.parametrize("n, m, k", [(1, 1, 1), (7, 5, 3), (129, 67, 65), (257, 130, 300), (1024, 1024, 1024), (1536, 1410, 101)])
def test_micro_tiles_on_the_gpu_match_the_reference(prog: pf.Program, n: int, m: int, k: int, symbolic: bool) -> None:
    sizes = {"N": n, "M": m, "K": k}
    rng = np.random.default_rng(7)
    args = {}
    for name in prog.arguments:
        if name in prog.arrays:
            args[name] = rng.standard_normal(prog.arrays[name].concrete_shape(sizes)).astype(np.float32)
        else:
            args[name] = prog.scalars[name].numpy(1.25)
    want = {name: v.astype(np.float64) if isinstance(v, np.ndarray) else float(v) for name, v in args.items()}
    if prog is ex.gemm:
        want["C"] = want["alpha"] * want["A"] @ want["B"] + want["beta"] * want["C"]
    else:
        want["C"] = want["A"] @ want["B"]
    code = pf.codegen(pf.schedule(prog, target="cuda", params=None if symbolic else sizes))
    _run_code(code, {**args, **sizes})
    np.testing.assert_allclose(args["C"], want["C"], rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want["C"]).max())))


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("n", [1, 37, 1000, 1 << 20])
def test_whole_array_reductions_on_the_gpu(op: str, n: int) -> None:
    g = pf.Graph("r")
    prog = g.build(y=getattr(pf.ops, op)(g.input("x", (pf.params("N"),))))
    x = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
    y = np.zeros((), np.float32)
    code = pf.codegen(pf.schedule(prog, target="cuda"))
    _run_code(code, {"N": n, "x": x, "y": y})
    want = getattr(np, op)(x.astype(np.float64))
    bound = n * np.finfo(np.float32).eps * float(np.abs(x).sum()) + 1e-30 if op == "sum" else 0.0
    assert abs(float(y) - want) <= bound, (op, n, float(y), want)


# ----- several elements a thread (element-wise kernels) ---------------------------------------------------
@pytest.mark.parametrize("name", ["add_exp", "chain4", "bias_gelu_residual"])
@pytest.mark.parametrize("r, d", [(4096, 4096), (600, 4100)])
def test_element_wise_kernels_at_full_size_on_the_gpu(name: str, r: int, d: int) -> None:
    """At sizes where each thread takes 4 elements (``element_share.py``): whole tiles, and rows of 4100
    (four whole tiles of 1024 and a partial one)."""
    w = next(x for x in WORKLOADS if x.name == name)
    prog = w.program()
    sizes = {"R": r, "D": d}
    values = w.inputs(prog, sizes)
    expected = w.expected(prog, values, sizes)
    sched = pf.schedule(prog, target="cuda", params=sizes)
    assert name == "bias_gelu_residual" or any(k.thread_share == 4 for k in sched.kernels), sched.explain()
    _run_code(pf.codegen(sched), {**sizes, **values})
    for out, e in expected.items():
        np.testing.assert_allclose(values[out], e, rtol=max(w.rtol, 1e-3), atol=1e-3 * max(1.0, float(np.abs(e).max())), err_msg=name)
