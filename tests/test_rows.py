"""Cooperative rows (``schedule/rows.py``): row reductions fused with their consumers run one row per
thread block, the row loops shared cyclically by the block's threads, reductions combined block-wide.

Generated CUDA is compiled by nvcc (one call for every variant) and run by the CPU emulation of
``test_codegen_cuda.py`` (each block's threads as real threads, warp shuffles through a barrier).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as ex
from polyfuse.codegen.cuda import generate_cuda
from polyfuse.schedule.model import CYCLIC_MARK
from polyfuse.schedule.rows import block_size
from tests.test_codegen_cuda import _unit, build_emulator, emulate

R, C = pf.params("R C")
BIG = {"R": 4096, "C": 1024}
ODD = {"R": 5, "C": 77}  # rows not a multiple of the block size


def softmax() -> pf.Program:
    g = pf.Graph("softmax")
    return g.build(y=pf.ops.softmax(g.input("x", (R, C))))


def layernorm() -> pf.Program:
    g = pf.Graph("layernorm")
    x, gamma, beta = g.input("x", (R, C)), g.input("gamma", (C,)), g.input("beta", (C,))
    return g.build(y=pf.ops.layernorm(x, gamma, beta, 1e-5))


def centered() -> pf.Program:
    """A row mean followed by an elementwise consumer."""
    g = pf.Graph("centered")
    x = g.input("x", (R, C))
    return g.build(y=(x - pf.ops.mean(x, axis=-1, keepdims=True)) * 2.0)


def row_max_scale() -> pf.Program:
    g = pf.Graph("row_max_scale")
    x = g.input("x", (R, C))
    return g.build(y=x / pf.ops.max(x, axis=-1, keepdims=True))


def attention() -> pf.Program:
    from benchmarks.workloads import BY_NAME

    return BY_NAME["attention"].program()


ROW_PROGRAMS = (softmax, layernorm, centered, row_max_scale)


def _cyclic(sched) -> bool:
    return f'mark: "{CYCLIC_MARK}"' in str(sched.tree.get_root())


@pytest.mark.parametrize("build", (softmax, layernorm), ids=lambda b: b.__name__)
def test_one_kernel_one_row_per_block(build) -> None:
    sched = pf.schedule(build(), target="cuda", params=BIG)
    (kernel,) = sched.kernels
    assert kernel.grid == (4096,) and kernel.block == (256,)
    text = pf.codegen(sched).text
    assert "const long long c0 = (long long) blockIdx.x;" in text
    assert "for (long long c1 = (long long) threadIdx.x; c1 <= 1023; c1 += (long long) blockDim.x)" in text
    assert "pf_block_sum_f32(" in text
    if build is softmax:
        assert "pf_block_max_f32(" in text
        assert "if (threadIdx.x != 0) t0_softmax_max = (-INFINITY);" in text
    assert kernel.shared_bytes >= 32 * 4  # the block reductions' per-warp scratch
    (launch,) = sched_launches(sched)
    assert launch.block == ("256",)


def sched_launches(sched):
    return pf.codegen(sched).launch.launches()


def test_reduction_consumers_are_cooperative() -> None:
    for build in (centered, row_max_scale):
        sched = pf.schedule(build(), target="cuda", params=BIG)
        assert len(sched.kernels) == 1 and _cyclic(sched), build.__name__


def test_block_size_follows_the_row() -> None:
    assert block_size(None) == 256 and block_size(1024) == 256 and block_size(77) == 32 and block_size(200) == 64
    sched = pf.schedule(softmax(), target="cuda", params=ODD)
    assert sched.kernels[0].block == (32,) and sched.kernels[0].grid == (5,)


def test_other_kernels_keep_their_mapping() -> None:
    for prog in (ex.add_exp, ex.gemm, ex.gemm_acc, ex.jacobi_2d, ex.two_mm):
        for fusion in ("min", "smart"):
            assert not _cyclic(pf.schedule(prog, target="cuda", fusion=fusion)), (prog.name, fusion)
    # one mapped member: its inner j loop holds both the accumulation and its consumer (against source order)
    assert not _cyclic(pf.schedule(ex.gemm_acc, target="cuda", tile=(8,), params={p: 50 for p in ex.gemm_acc.params}))
    short = pf.schedule(softmax(), target="cuda", params={"R": 4096, "C": 16})  # rows too short
    assert not _cyclic(short)


def test_row_traffic_is_compulsory() -> None:
    report = pf.schedule(softmax(), target="cuda", params=BIG).traffic()
    assert report.total_bytes == report.compulsory_bytes == 2 * 4096 * 1024 * 4


# ----- compile and run --------------------------------------------------------------------------------


def _variants() -> list[tuple[str, pf.Program, object, dict | None]]:
    """(tag, program, generated code, the sizes it was scheduled at or None) for every program, scheduled
    at odd concrete sizes and without sizes (block of 256 threads, more than the rows run here)."""
    out = []
    for build in (*ROW_PROGRAMS, attention):
        prog = build()
        sizes = {p: ODD.get(p, 7) for p in prog.params}
        for tag, params in (("odd", sizes), ("symbolic", None)):
            out.append((f"{prog.name}_{tag}", prog, generate_cuda(pf.schedule(prog, target="cuda", params=params)), params))
    out.append(("row_sum_symbolic", ex.row_sum, generate_cuda(pf.schedule(ex.row_sum, target="cuda")), None))
    return out


@pytest.fixture(scope="module")
def variants():
    return _variants()


def test_rows_compile_with_nvcc(variants, tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    src = tmp_path / "rows.cu"
    src.write_text(_unit([(tag, code.text) for tag, _, code, _ in variants]))
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "rows.ptx"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    ptx = (tmp_path / "rows.ptx").read_text()
    for tag, *_ in variants:
        assert f".entry {tag}_" in ptx


def _inputs(prog: pf.Program, sizes: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name in prog.arguments:
        a = prog.arrays[name]
        out[name] = (rng.uniform(-2, 2, a.concrete_shape(sizes)) + (3.0 if prog.name == "row_max_scale" else 0)).astype(a.dtype.numpy)
    return out


@pytest.mark.parametrize("sizes", ({"R": 5, "C": 77}, {"R": 3, "C": 20}), ids=("C77", "C20"))
def test_emulation_matches_reference(variants, sizes, tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    dll = build_emulator([(tag, code) for tag, _, code, _ in variants], tmp_path)
    run = {"R": sizes["R"], "C": sizes["C"], "N": sizes["R"], "M": sizes["C"], "H": 2, "S": 9, "E": 5}
    for tag, prog, code, fixed in variants:
        if fixed is not None and sizes["C"] != ODD["C"]:
            continue  # scheduled at other sizes
        at = dict(fixed) if fixed is not None else {p: run[p] for p in prog.params}
        expected = _inputs(prog, at)
        pf.reference(prog)(**expected)
        got = _inputs(prog, at)
        emulate(dll, tag, code, got, at)
        for name in prog.arguments:
            if prog.arrays[name].role != "input":
                np.testing.assert_allclose(got[name], expected[name], rtol=2e-5, atol=2e-5, err_msg=f"{tag}: {name}")
