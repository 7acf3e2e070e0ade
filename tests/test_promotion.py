"""Explicit data movement (``schedule/promotion.py``): shared-memory and register promotion as copy
statements in the schedule tree, barriers from dependences, and the generated CUDA checked by nvcc and by
the CPU emulation of ``test_codegen_cuda.py`` (block threads run concurrently between barriers)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as ex
from polyfuse.codegen.cuda import generate_cuda
from polyfuse.schedule import schedule
from tests.test_codegen_cuda import _inputs, build_emulator, emulate

BIG = {"N": 2048, "M": 2048, "K": 2048}


def _shared(sched) -> dict[str, tuple[int, ...]]:
    return {b.array: b.shape for b in sched.promotion.buffers if b.space == "shared"} if sched.promotion else {}


def test_gemm_2048_promotes_a_and_b_tiles_to_shared_memory() -> None:
    sched = schedule(ex.gemm, target="cuda", params=BIG)
    (kernel,) = sched.kernels
    shared = _shared(sched)
    assert set(shared) == {"A", "B"}
    ty, tx = kernel.block[1], kernel.block[0]
    assert shared["A"][0] == ty and shared["B"][1] == tx  # A's tile rows follow threadIdx.y, B's columns .x
    assert shared["A"][1] == shared["B"][0]  # the k tile
    assert 0 < kernel.shared_bytes <= 48 * 1024
    assert kernel.shared_bytes == sum(b.nbytes for b in sched.promotion.buffers if b.space == "shared")
    registers = {b.array for b in sched.promotion.buffers if b.space == "register"}
    assert registers == {"C"}
    text = sched.explain()
    assert "promoted A to shared" in text and "promoted C to register" in text


def test_gemm_cuda_has_copies_and_barriers() -> None:
    code = generate_cuda(schedule(ex.gemm, target="cuda", params=BIG)).text
    assert "__shared__ float A_shared_k0" in code and "__shared__ float B_shared_k0" in code
    assert "/* copy_A_shared_k0 */" in code and "/* copy_B_shared_k0 */" in code
    assert code.count("__syncthreads();") == 2
    # the barrier after the copies comes before the compute reading the buffers
    assert code.index("copy_B_shared_k0 */") < code.index("__syncthreads();") < code.index("/* S1 */")
    # coalesced copies: the innermost array index follows threadIdx.x
    tx = re.search(r"(c\d+) -> threadIdx\.x", code).group(1)
    for name in ("A", "B"):
        line = next(ln for ln in code.splitlines() if f"/* copy_{name}_shared_k0 */" in ln)
        assert re.search(rf"\+ {tx}\)*\];", line), line  # ... * ld + (... + threadIdx.x)]
    # the accumulator lives in a register: loaded before the k loop, stored after
    assert "C_reg_k0 = C[" in code and "C_reg_k0 +=" in code and "= C_reg_k0;" in code


def test_shared_memory_budget_is_respected() -> None:
    sched = schedule(ex.gemm, target="cuda", params=BIG, shared_memory=4096)
    assert all(k.shared_bytes <= 4096 for k in sched.kernels)
    assert len(_shared(sched)) <= 1


def test_c_target_is_unchanged() -> None:
    assert schedule(ex.gemm, target="c").promotion is None


def test_no_promotion_without_cross_thread_reuse() -> None:
    sched = schedule(ex.add_exp, target="cuda")
    assert not _shared(sched)


def test_jacobi_2d_promotes_the_neighbourhood() -> None:
    sched = schedule(ex.jacobi_2d, target="cuda", params={"N": 1000, "T": 10})
    shared = {b.array: b for b in sched.promotion.buffers if b.space == "shared"}
    assert shared, sched.explain()
    k = next(iter(shared.values()))
    tile = next(kk for kk in sched.kernels if kk.name == k.kernel)
    assert k.shape == (tile.block[1] + 2, tile.block[0] + 2)  # the halo
    code = generate_cuda(sched).text
    assert code.count("__syncthreads();") >= 1


def test_nvcc_compiles_promoted_gemm(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    src = tmp_path / "gemm.cu"
    src.write_text(generate_cuda(schedule(ex.gemm, target="cuda", params=BIG)).text)
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "gemm.ptx"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    assert ".shared" in (tmp_path / "gemm.ptx").read_text()


CASES = [
    (ex.gemm, {"N": 37, "M": 45, "K": 29}),
    (ex.gemm, {"N": 64, "M": 64, "K": 70}),
    (ex.two_mm, {"N": 37, "M": 45, "K": 29}),
    (ex.jacobi_2d, {"N": 41, "T": 3}),
    (ex.gemm_acc, {"N": 37, "M": 45, "K": 29}),
]


@pytest.mark.parametrize("with_params", [False, True], ids=["symbolic", "concrete"])
@pytest.mark.parametrize("prog,sizes", CASES, ids=[f"{p.name}-{'x'.join(map(str, s.values()))}" for p, s in CASES])
def test_emulation_matches_reference(prog, sizes, with_params, tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    sched = schedule(prog, target="cuda", params=sizes if with_params else None, tile=(8, 16) if with_params else "auto")
    code = generate_cuda(sched)
    expected = _inputs(prog, sizes)
    pf.reference(prog)(**expected, **{p: v for p, v in sizes.items() if p == "T"})
    dll = build_emulator([("v", code)], tmp_path)
    got = _inputs(prog, sizes)
    emulate(dll, "v", code, got, sizes)
    for name in prog.arguments:
        if name in prog.arrays and prog.arrays[name].role != "input":
            tol = 1e-4 if prog.arrays[name].dtype.name == "f32" else 1e-9
            np.testing.assert_allclose(got[name], expected[name], rtol=tol, atol=tol, err_msg=f"{prog.name}: {name}")
