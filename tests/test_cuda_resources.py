"""Static evidence for generated CUDA without a GPU (``codegen/cuda_resources.py``): ``ptxas -v`` per kernel
and the theoretical occupancy it implies, through ``Code.resources()`` and ``polyfuse codegen --resources``."""

from __future__ import annotations

import shutil

import pytest

import polyfuse as pf
from polyfuse.cli.main import main
from polyfuse.codegen.cuda_resources import ARCHITECTURES, occupancy_of
from tests.kernels import BY_NAME

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
GEMM = {"ni": 1000, "nj": 1100, "nk": 1200}


def _gemm_code():
    k = BY_NAME["gemm"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    return pf.codegen(pf.schedule(prog, target="cuda", params=GEMM))


@pytest.mark.parametrize("threads, registers, shared, occupancy, limiter", [
    (256, 64, 0, 0.5, "registers"),  # 2048 registers a warp: 32 warps of 64
    (128, 32, 48 * 1024, 0.25, "shared memory"),  # 49 KiB a block with the reserved 1 KiB: 4 blocks
    (1024, 32, 0, 1.0, "threads per SM"),
    (32, 16, 0, 0.5, "blocks per SM"),  # 32 blocks of one warp
    (64, 46, 0, 42 / 64, "registers"),  # 1536 registers a warp (46 rounded up to 48 per thread): 42 warps
])
def test_occupancy_follows_the_sm_90_limits(threads, registers, shared, occupancy, limiter):
    got, by = occupancy_of(ARCHITECTURES["sm_90"], threads, registers, shared)
    assert got == pytest.approx(occupancy) and by == limiter


@needs_nvcc
def test_gemm_reports_its_registers_shared_tiles_and_launch():
    report = _gemm_code().resources(GEMM)
    scale, k = sorted(report.kernels, key=lambda r: r.kernel)  # C *= beta, then the micro-tiled contraction
    assert k.registers > 0 and k.spill_stores == 0 and k.spill_loads == 0
    assert k.shared == 3 * (64 * 16 + 16 * 64) * 8 and k.barriers >= 1  # 64 x 16 A and 16 x 64 B tiles, 3 steps, double
    assert k.threads == 32 * 16 and k.blocks == 18 * 16 and k.launches == 1  # ceil(1100/64) x ceil(1000/64) tiles, 4 x 2 a thread
    assert k.spill_stores == 0 and k.occupancy >= 0.5
    assert k.occupancy == pytest.approx(occupancy_of(ARCHITECTURES["sm_90"], k.threads, k.registers, k.shared)[0])
    assert scale.shared == 0 and scale.launches == 1
    text = str(report)
    assert "kernel_gemm_k1" in text and "sm_90" in text and "ni=1000" in text


@needs_nvcc
def test_codegen_resources_on_the_command_line(capsys, tmp_path):
    out = tmp_path / "k.cu"
    status = main(["codegen", str(BY_NAME["nussinov"].path), "--target", "cuda", "--resources", "--size", "n=500", "-o", str(out)])
    printed = capsys.readouterr().out
    assert status == 0 and "__global__" in out.read_text()
    assert "CUDA resources (sm_90, ptxas -v; n=500)" in printed and "kernel_nussinov_k0" in printed and "launches" in printed
    assert main(["codegen", str(BY_NAME["nussinov"].path), "--target", "c", "--resources"]) != 0
    assert "--resources reports CUDA kernels" in capsys.readouterr().err


def test_an_unknown_architecture_is_named():
    code = pf.Code("", "cuda", ())
    with pytest.raises(pf.PolyfuseError, match="unknown architecture 'sm_1'"):
        code.resources(arch="sm_1")
