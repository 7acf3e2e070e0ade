"""Cooperative rows (``schedule/mapping/rows.py``): row reductions fused with their consumers run one row per
thread block, the row loops shared cyclically by the block's threads, reductions combined block-wide; rows
that several phases pass over are staged in shared memory (``schedule/mapping/row_staging.py``).

Generated CUDA is compiled by nvcc (one call for every variant) and run by the CPU emulation of
``test_codegen_cuda.py`` (each block's threads as real threads, warp shuffles through a barrier).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as ex
from polyfuse.codegen.cuda import generate_cuda
from polyfuse.schedule.mapping.rows import block_size, row_unroll
from polyfuse.schedule.model import CYCLIC_MARK
from tests.test_codegen_cuda import _unit, build_emulator, emulate

R, C = pf.params("R C")
N, M = pf.params("N M")
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
STAGED = (softmax, layernorm, centered)


def bounded(prog: pf.Program, bound: str = "C <= 128") -> pf.Program:
    """``prog`` with the row length bounded in its context: staged in shared memory without concrete sizes."""
    ctx = prog.context & isl.Set(f"[{', '.join(prog.params)}] -> {{ : {bound} }}")
    stmts = tuple(dataclasses.replace(s, domain=s.domain.intersect_params(ctx)) for s in prog.statements)
    return dataclasses.replace(prog, name=prog.name + "_bounded", context=ctx, statements=stmts)


@pf.program(assume="M <= 128")
def reversed_scale(A: pf.f32[N, M], B: pf.f32[N, M]):
    """The sum walks the row backwards: its thread of ``j`` reads what another thread copied in."""
    for i in range(N):
        acc = 0.0
        for j in range(M):
            acc += A[i, M - 1 - j]
        for j in range(M):
            B[i, j] = A[i, j] / acc


@pf.program(assume="M >= 2 and M <= 128")
def tail_scale(A: pf.f32[N, M], B: pf.f32[N, M]):
    """The sum starts at ``j = 1``: its ``j`` still runs on thread ``j mod blockDim.x``, as the copy's does."""
    for i in range(N):
        acc = 0.0
        for j in range(1, M):
            acc += A[i, j]
        for j in range(M):
            B[i, j] = A[i, j] / acc


def _cyclic(sched) -> bool:
    return f'mark: "{CYCLIC_MARK}"' in str(sched.tree.get_root())


@pytest.mark.parametrize("build", (softmax, layernorm), ids=lambda b: b.__name__)
def test_one_kernel_one_row_per_block(build) -> None:
    sched = pf.schedule(build(), target="cuda", params=BIG)
    (kernel,) = sched.kernels
    assert kernel.grid == (4096,) and kernel.block == (128,)  # 8 elements of the 1024 a thread
    text = pf.codegen(sched).text
    assert "const long long c0 = (long long) blockIdx.x;" in text
    # 128 threads: a constant stride; the loop unrolled over a thread's whole share of the row (8)
    assert "#pragma unroll 8\n    for (long long c1 = (long long) threadIdx.x; c1 <= 1023; c1 += 128LL)" in text
    assert "pf_c1_step" not in text  # every thread runs 8: no guarded form
    assert "__launch_bounds__(128)" in text
    assert "pf_block_sum_f32(" in text
    if build is softmax:
        assert "pf_block_max_f32(" in text
        assert "if (threadIdx.x != 0) t0_softmax_max = (-INFINITY);" in text
    assert kernel.shared_bytes >= 32 * 4  # the block reductions' per-warp scratch
    (launch,) = sched_launches(sched)
    assert launch.block == ("128",)


def sched_launches(sched):
    return pf.codegen(sched).launch.launches()


def test_reduction_consumers_are_cooperative() -> None:
    for build in (centered, row_max_scale):
        sched = pf.schedule(build(), target="cuda", params=BIG)
        assert len(sched.kernels) == 1 and _cyclic(sched), build.__name__


def test_block_size_follows_the_row() -> None:
    # about 8 elements a thread (the H100 sweep in rows.ROW_SHARE), from 32 threads to 256
    assert block_size(None) == 256 and block_size(77) == 32 and block_size(200) == 32
    assert [block_size(n) for n in (512, 1024, 2048, 4096, 16384)] == [64, 128, 256, 256, 256]
    sched = pf.schedule(softmax(), target="cuda", params=ODD)
    assert sched.kernels[0].block == (32,) and sched.kernels[0].grid == (5,)


def test_row_loops_unroll_a_threads_whole_share() -> None:
    # a thread's share of a known row, up to 8; unknown rows take the printer's default (4)
    assert row_unroll(1024, 128) == 8 and row_unroll(1000, 128) == 8 and row_unroll(77, 32) == 3
    assert row_unroll(4096, 256) == 8 and row_unroll(None, 256) == 0
    # shares that differ by one (1000 over 128 threads: 8 or 7): every load of a share in flight behind a guard
    guarded = ("#pragma unroll\n    for (int pf_c1_step = 0; pf_c1_step < 8; pf_c1_step++) {  /* a thread's share of c1: at most 8 */\n"
               "      const long long c1 = (long long) threadIdx.x + 128LL * pf_c1_step;\n      if (c1 <= 999) {")
    for sizes, threads, loop in (({"R": 8192, "C": 1000}, 128, guarded),
                                 ({"R": 5, "C": 77}, 32, "for (int pf_c1_step = 0; pf_c1_step < 3; pf_c1_step++)"),
                                 ({"R": 64, "C": 4096}, 256, "#pragma unroll 8\n    for (long long c1 = (long long) threadIdx.x; c1 <= 4095; c1 += 256LL)"),
                                 (None, 256, "#pragma unroll 4\n    for (long long c1 = (long long) threadIdx.x; c1 < C; c1 += 256LL)")):
        sched = pf.schedule(softmax(), target="cuda", params=sizes)
        assert sched.kernels[0].block == (threads,), sizes
        text = pf.codegen(sched).text
        assert f"__launch_bounds__({threads})" in text and loop in text, (sizes, text[-2500:])


def test_other_kernels_keep_their_mapping() -> None:
    for prog in (ex.add_exp, ex.gemm, ex.gemm_acc, ex.jacobi_2d, ex.two_mm):
        for fusion in ("min", "smart"):
            assert not _cyclic(pf.schedule(prog, target="cuda", fusion=fusion)), (prog.name, fusion)
    # one mapped member: its inner j loop holds both the accumulation and its consumer (against source order)
    assert not _cyclic(pf.schedule(ex.gemm_acc, target="cuda", tile=(8,), params={p: 50 for p in ex.gemm_acc.params}))
    short = pf.schedule(softmax(), target="cuda", params={"R": 4096, "C": 16})  # rows too short
    assert not _cyclic(short)


def _kernel(text: str) -> str:
    return text[text.index("/* kernel"):]


def _loads_stores(text: str, array: str) -> tuple[int, int]:
    """(reads, writes) of the global ``array`` in ``text``."""
    hits = [m.end() for m in re.finditer(rf"(?<![\w.]){array}\[", text)]
    writes = 0
    for end in hits:
        depth, k = 1, end
        while depth:
            depth += {"[": 1, "]": -1}.get(text[k], 0)
            k += 1
        writes += bool(re.match(r" (=|\+=|-=|\*=) ", text[k:]))
    return len(hits) - writes, writes


@pytest.mark.parametrize("build", (softmax, layernorm), ids=lambda b: b.__name__)
def test_rows_are_read_once(build) -> None:
    sched = pf.schedule(build(), target="cuda", params=BIG)
    (kernel,) = sched.kernels
    text = _kernel(pf.codegen(sched).text)
    assert _loads_stores(text, "x") == (1, 0)  # the copy-in
    assert _loads_stores(text, "y") == (0, 1)  # the copy-out (softmax) or the one store (layernorm)
    assert "__syncthreads();  /*" not in text  # each thread copies the elements it uses
    staged = {b.array: b for b in sched.promotion.buffers}
    assert set(staged) == ({"x", "y"} if build is softmax else {"x"})
    assert all(b.space == "shared" and b.shape == (1024,) for b in staged.values())
    scratch = 32 * 4 * (2 if build is softmax else 1)  # one per-warp scratch per block-reduction helper
    assert kernel.shared_bytes == scratch + 4096 * len(staged)
    assert "__shared__ float x_shared_k0[1024];" in text
    assert "x_shared_k0[c1] = x[(c0) * C + c1];" in text  # coalesced: consecutive threads, consecutive c1


def test_rows_that_do_not_fit_stay_global() -> None:
    for params, budget in (({"R": 64, "C": 65536}, 48 * 1024), (BIG, 4096)):
        sched = pf.schedule(softmax(), target="cuda", params=params, shared_memory=budget)
        text = _kernel(pf.codegen(sched).text)
        assert _cyclic(sched) and sched.promotion is None and "__shared__ float" not in text
        assert _loads_stores(text, "x") == (2, 0)


def test_barriers_come_from_the_dependences() -> None:
    sched = pf.schedule(reversed_scale, target="cuda")
    text = _kernel(pf.codegen(sched).text)
    assert [b.array for b in sched.promotion.buffers] == ["A"] and sched.kernels[0].shared_bytes == 128 + 128 * 4
    copy, sync, loop = (text.index(t) for t in ("/* copy_A_shared_k0 */", "__syncthreads();", "acc += A_shared_k0[((M - c1) - 1)]"))
    assert copy < sync < loop and text.count("__syncthreads();") == 1
    text = _kernel(pf.codegen(pf.schedule(tail_scale, target="cuda")).text)
    assert "for (long long c1 = 1 + pf_floormod((long long) threadIdx.x - (1), 256LL); c1 < M;" in text
    assert "__syncthreads();" not in text and "A_shared_k0[c1] = A[(c0) * M + c1];" in text


def test_per_row_writes_run_in_one_thread() -> None:
    text = pf.codegen(pf.schedule(ex.row_sum, target="cuda")).text
    assert "if (threadIdx.x == 0) s[c0] = acc;  /* S2 */" in text
    assert "    acc = 0.0f;  /* S0 */" in text  # a register: every thread


def test_row_traffic_is_compulsory() -> None:
    report = pf.schedule(softmax(), target="cuda", params=BIG).traffic()
    assert report.total_bytes == report.compulsory_bytes == 2 * 4096 * 1024 * 4


def test_layernorm_traffic_is_compulsory() -> None:
    """Every block (a row) reads all of gamma and beta: from the L2 the blocks share after the first, so
    the model counts them once (``footprint._broadcast_count``), and x is read and y written once."""
    report = pf.schedule(layernorm(), target="cuda", params=BIG).traffic()
    assert report.total_bytes == report.compulsory_bytes == (2 * 4096 * 1024 + 2 * 1024) * 4
    assert report.per_kernel["kernel0"].tiles == 4096


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
    for prog in (*(bounded(b()) for b in STAGED), reversed_scale, tail_scale):  # staged without sizes
        out.append((f"{prog.name}_symbolic", prog, generate_cuda(pf.schedule(prog, target="cuda")), None))
    out.append(("row_sum_symbolic", ex.row_sum, generate_cuda(pf.schedule(ex.row_sum, target="cuda")), None))
    return out


def test_variants_are_staged(variants) -> None:
    staged = {tag for tag, _, code, _ in variants if "_shared_k0[" in code.text}
    assert staged == {f"{b.__name__}_odd" for b in ROW_PROGRAMS} | {f"{b.__name__}_bounded_symbolic" for b in STAGED} | {
        "reversed_scale_symbolic", "tail_scale_symbolic"}


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
