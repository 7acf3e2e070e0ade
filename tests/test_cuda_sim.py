"""The CUDA simulator (``target="cuda-sim"``, :mod:`polyfuse.runtime.cuda_sim`): generated CUDA runs on
the CPU and equals the reference at odd sizes, and each class of bug the simulator exists for is caught
in a deliberately broken copy of real generated code: a removed barrier, a write conflict between
blocks, an out-of-bounds index, a barrier only some threads reach, a shared buffer read before any
thread wrote it, and a shuffle whose exchange is removed (a wrong result, not a report)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as ex
from polyfuse.runtime import cuda_sim

pytestmark = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")


def _gemm_code(n: int = 37, m: int = 29, k: int = 40) -> pf.Code:
    """gemm through the generic mapping with shared-memory promotion (an explicit tile: no register
    micro-tile; ``test_cuda_micro.py`` breaks those)."""
    return pf.codegen(pf.schedule(ex.gemm, target="cuda", params={"N": n, "M": m, "K": k}, tile=(32, 32)))


def _gemm_run(code: pf.Code, n: int = 37, m: int = 29, k: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    a = rng.random((n, k), np.float32)
    b = rng.random((k, m), np.float32)
    c = rng.random((n, m), np.float32)
    want = c.copy()
    pf.reference(ex.gemm)(A=a, B=b, C=want, alpha=np.float32(1.5), beta=np.float32(0.5))
    values = {"N": n, "M": m, "K": k, "A": a, "B": b, "C": c, "alpha": np.float32(1.5), "beta": np.float32(0.5)}
    cuda_sim.load(code)(*(values[s.name] for s in code.signature))
    return c, want


def _softmax(rows: int, cols: int) -> pf.Program:
    g = pf.Graph("sm")
    x = g.input("x", (rows, cols), pf.f32)
    return g.build(y=pf.ops.softmax(x))


def _elementwise() -> tuple[pf.Program, pf.Code]:
    g = pf.Graph("ew")
    x = g.input("x", (300,), pf.f32)
    prog = g.build(y=pf.ops.exp(x))
    return prog, pf.codegen(pf.schedule(prog, target="cuda", params={}))


def _broken(code: pf.Code, old: str, new: str, count: int = 1) -> pf.Code:
    assert old in code.text, code.text
    return dataclasses.replace(code, text=code.text.replace(old, new, count))


@pytest.mark.parametrize("n, m, k", [(1, 1, 1), (7, 5, 3), (37, 29, 40), (33, 65, 64)])
def test_compile_for_the_simulator_equals_the_reference(n: int, m: int, k: int) -> None:
    exe = pf.compile(ex.gemm, target="cuda-sim")
    rng = np.random.default_rng(0)
    a, b, c = rng.random((n, k), np.float32), rng.random((k, m), np.float32), rng.random((n, m), np.float32)
    want = c.copy()
    pf.reference(ex.gemm)(A=a, B=b, C=want, alpha=np.float32(2), beta=np.float32(3))
    exe(A=a, B=b, C=c, alpha=np.float32(2), beta=np.float32(3))
    np.testing.assert_allclose(c, want, rtol=1e-5)
    assert exe.target == "cuda-sim" and "__global__" in exe.code.text


@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 33), (37, 1000), (3, 129)])
def test_block_reductions_shuffle_and_equal_the_reference(rows: int, cols: int) -> None:
    prog = _softmax(rows, cols)
    exe = pf.compile(prog, target="cuda-sim")
    x = np.random.default_rng(2).standard_normal((rows, cols)).astype(np.float32)
    got = exe(x=x)
    want = np.zeros_like(x)
    pf.reference(prog)(x=x, y=want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    if cols >= 33:
        assert "pf_block_max_f32" in exe.code.text


def test_a_shuffle_without_its_exchange_gives_a_wrong_row_sum() -> None:
    """The simulator really exchanges lanes' values: with the exchange replaced by the lane's own value,
    the combined max of a row is wrong."""
    prog = _softmax(3, 1000)
    code = pf.codegen(pf.schedule(prog, target="cuda", params={}))
    x = np.random.default_rng(3).standard_normal((3, 1000)).astype(np.float32)
    want = np.zeros_like(x)
    pf.reference(prog)(x=x, y=want)
    for text, equal in ((code.text, True), (code.text.replace("__shfl_xor_sync(0xffffffffu, v, o)", "v"), False)):
        y = np.zeros_like(x)
        cuda_sim.load(dataclasses.replace(code, text=text))(x, y)
        assert np.allclose(y, want, rtol=1e-5) == equal


def test_a_removed_barrier_is_a_race_on_shared_memory() -> None:
    code = _gemm_code()
    c, want = _gemm_run(code)
    np.testing.assert_allclose(c, want, rtol=1e-5)
    barrier = re.search(r"__syncthreads\(\);  /\* sync_k0_0 \*/", code.text)
    assert barrier, code.text
    broken = _broken(code, barrier.group(0), "/* barrier removed */")
    with pytest.raises(pf.SimulationError) as e:
        _gemm_run(broken)
    assert re.search(r"gemm_k0: block \(\d+,\d+,0\) thread \(\d+,\d+,0\) (reads|writes) __shared__ A_shared_k0\[0\]\[\d+\], which "
                     r"block \(\d+,\d+,0\) thread \(\d+,\d+,0\) (reads|writes) in the same barrier interval of its block", str(e.value)), str(e.value)


@pytest.mark.parametrize("skipped, message", [
    (("sync_k0_1",), r"block \(0,0,0\) thread \(5,0,0\) waits at the __syncthreads\(\) of line \d+ while block \(0,0,0\) thread \(0,0,0\) "
                    r"waits at line \d+ \(divergent barriers\)"),
    (("sync_k0_0", "sync_k0_1"), r"block \(0,0,0\) thread \(0,0,0\): __syncthreads\(\) \(line \d+\) is reached by 160 of the block's 928 threads; "
                                 r"768 have exited"),
])
def test_a_barrier_some_threads_skip_is_reported_first(skipped: tuple[str, ...], message: str) -> None:
    code = _gemm_code()
    for mark in skipped:
        code = _broken(code, f"__syncthreads();  /* {mark} */", "if (threadIdx.x < 5) __syncthreads();")
    with pytest.raises(pf.SimulationError) as e:
        _gemm_run(code)
    assert re.match(r"gemm_k0: " + message, e.value.issues[0]), e.value.issues[0]


def test_shared_memory_read_before_any_thread_wrote_it_is_reported() -> None:
    code = _gemm_code()
    copy = re.search(r"A_shared_k0\[[^;]*\] = A\[[^;]*;", code.text)
    assert copy, code.text
    with pytest.raises(pf.SimulationError, match=r"reads __shared__ A_shared_k0\[0\]\[0\], which no thread of its block has written"):
        _gemm_run(_broken(code, copy.group(0), ";"))


def test_a_write_conflict_between_blocks_names_the_element_and_both_threads() -> None:
    prog, code = _elementwise()
    store = re.search(r"\by\[([^\]]+)\] = ", code.text)
    broken = _broken(code, store.group(0), "if (threadIdx.x == 0) y[7] = ")  # (thread 0 of every block)
    x = np.linspace(0, 1, 300, dtype=np.float32)
    with pytest.raises(pf.SimulationError) as e:
        cuda_sim.load(broken)(x, np.zeros(300, np.float32))
    assert e.value.issues[0] == ("ew_k0: block (1,0,0) thread (0,0,0) writes y[7], which block (0,0,0) thread (0,0,0) writes "
                                 "in another block of the same launch (a data race)"), e.value.issues
    assert e.value.count == 9  # (blocks 1 to 9)


def test_an_out_of_bounds_index_is_reported_and_not_performed() -> None:
    prog, code = _elementwise()
    store = re.search(r"\by\[([^\]]+)\] = ", code.text)
    broken = _broken(code, store.group(0), f"y[({store.group(1)}) + 1] = ")
    x = np.linspace(0, 1, 301, dtype=np.float32)
    y = np.zeros(301, np.float32)
    with pytest.raises(pf.SimulationError) as e:
        cuda_sim.load(broken)(x[:300], y[:300])
    assert e.value.count == 1
    assert re.search(r"block \(\d+,0,0\) thread \(\d+,0,0\) accesses y\[300\] \(flat\) out of bounds \(shape \[300\]\)", str(e.value)), str(e.value)
    assert y[300] == 0  # (the simulator's buffer is a copy, and the access went to a scratch element)


def test_a_cross_block_read_of_another_blocks_write_is_a_race() -> None:
    """The first thread of each block reads the element the last thread of the block before writes."""
    prog, code = _elementwise()
    store = re.search(r"\by\[([^\]]+)\] = ([^;]*);", code.text)
    idx = store.group(1)
    broken = _broken(code, store.group(0), f"y[{idx}] = {store.group(2)}; if (threadIdx.x == 0 && ({idx}) > 0) y[{idx}] += y[({idx}) - 1];")
    with pytest.raises(pf.SimulationError) as e:
        cuda_sim.load(broken)(np.zeros(300, np.float32), np.zeros(300, np.float32))
    assert e.value.issues[0] == ("ew_k0: block (1,0,0) thread (0,0,0) reads y[31], which block (0,0,0) thread (31,0,0) writes "
                                 "in another block of the same launch (a data race)"), e.value.issues


def test_the_cli_runs_and_checks_on_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    from polyfuse.cli.main import main

    assert main(["run", "examples/kernels.py::gemm", "--target", "cuda-sim", "--check", "--repeat", "1",
                 "--size", "N=9", "--size", "M=7", "--size", "K=5"]) == 0
    out = capsys.readouterr().out
    assert "target cuda-sim" in out and "check: PASS" in out and "simulated on the CPU" in out


def test_tuning_on_the_simulator_is_refused() -> None:
    with pytest.raises(pf.PolyfuseError, match="simulator's times say nothing"):
        pf.compile(ex.gemm, target="cuda-sim", tune=2)
