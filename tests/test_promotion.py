"""Explicit data movement (``schedule/movement/promotion.py``, ``shared.py``): shared-memory and register promotion
as copy statements in the schedule tree (copy-in and copy-out), barriers from dependences, and the
generated CUDA checked by nvcc and by the CPU emulation of ``test_codegen_cuda.py`` (block threads run
concurrently between barriers)."""

from __future__ import annotations

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
from polyfuse.schedule import schedule
from tests.test_codegen_cuda import _inputs, _unit, build_emulator, emulate

BIG = {"N": 2048, "M": 2048, "K": 2048}


def _barriers(code: str) -> int:
    """The barrier statements printed in the kernels (not the prelude's helpers)."""
    return len(re.findall(r"__syncthreads\(\);  /\* sync_", code))


def _shared(sched) -> dict[str, tuple[int, ...]]:
    return {b.array: b.shape for b in sched.promotion.buffers if b.space == "shared"} if sched.promotion else {}


def test_gemm_2048_promotes_a_and_b_tiles_to_shared_memory() -> None:
    sched = schedule(ex.gemm, target="cuda", params=BIG, tile=(32, 32))  # (an explicit tile: no register micro-tile)
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
    code = generate_cuda(schedule(ex.gemm, target="cuda", params=BIG, tile=(32, 32))).text
    assert "__shared__ float A_shared_k0" in code and "__shared__ float B_shared_k0" in code
    assert "/* copy_A_shared_k0 */" in code and "/* copy_B_shared_k0 */" in code
    assert _barriers(code) == 2
    # the barrier after the copies comes before the compute reading the buffers
    assert code.index("copy_B_shared_k0 */") < code.index("/* sync_k0_0 */") < code.index("/* S1 */")
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
    assert all(k.microtile is None for k in sched.kernels)  # (its operand tiles need 16 KiB for two steps)
    sched = schedule(ex.gemm, target="cuda", params=BIG, shared_memory=16384)  # two steps in flight, not three
    (micro,) = [k.microtile for k in sched.kernels if k.microtile is not None]
    assert micro.stages == 2 and all(k.shared_bytes <= 16384 for k in sched.kernels)


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
    assert _barriers(code) >= 1


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


# ----- written arrays: copy-out, coalescing, cross-thread reuse ------------------------------------------

N, M = pf.params("N M")


@pf.program
def transpose(A: pf.f32[N, M], B: pf.f32[M, N]):
    for i in range(N):
        for j in range(M):
            B[j, i] = A[i, j]


@pf.program
def transpose_scale(A: pf.f32[N, M], B: pf.f32[M, N], C: pf.f32[N, M]):
    """A transpose fused with an elementwise op (C goes to a register, B through shared memory)."""
    for i in range(N):
        for j in range(M):
            C[i, j] = A[i, j] * 2.0
            B[j, i] = C[i, j] + 1.0


@pf.program
def transpose_read(A: pf.f32[M, N], B: pf.f32[N, M]):
    """The transposed access is a read: A is staged (copy-in only) for coalesced global reads."""
    for i in range(N):
        for j in range(M):
            B[i, j] = A[j, i] * 3.0


@pf.program
def transpose_add(A: pf.f32[N, M], B: pf.f32[M, N]):
    """A transposed read-modify-write: copy-in of what is read, copy-out of what is written."""
    for i in range(N):
        for j in range(M):
            B[j, i] += A[i, j]


@pf.program
def odd_rows(A: pf.f32[2 * N + 2, M]):
    """Cross-thread reuse of a written array: row 2i+2 is read by threads i and i+1; only odd rows are
    written."""
    for i in range(N):
        for j in range(M):
            A[2 * i + 1, j] = 0.5 * (A[2 * i, j] + A[2 * i + 2, j])


def _tx_before(code: str, marker: str) -> str:
    """The iterator mapped to threadIdx.x by the last ``block`` mark printed before the line with ``marker``."""
    head = code[: code.index(marker)]
    return re.findall(r"(c\d+) -> threadIdx\.x \*/", head)[-1]


def _follows(index: str, tx: str) -> bool:
    """Whether the index expression text moves by one with ``tx`` (``tx`` not scaled nor divided)."""
    return re.search(rf"(?<![*/] )\b{tx}\b(?! /)", index) is not None and re.search(rf"\d+ \* {tx}\b", index) is None


def _line(code: str, marker: str) -> str:
    return next(ln for ln in code.splitlines() if marker in ln)


def _statement(sched, prefix: str):
    (name,) = [n for n in sched.promotion.statements if n.startswith(prefix)]
    return sched.promotion.statements[name]


def test_transpose_stages_the_written_tile_and_copies_it_out_coalesced() -> None:
    sched = schedule(transpose, target="cuda")
    (kernel,) = sched.kernels
    assert _shared(sched) == {"B": (kernel.block[0], kernel.block[1] + 1)}  # 32 x 16 tile of B, padded row
    code = generate_cuda(sched).text
    assert "copy_B_shared" not in code  # nothing of B is read: no copy-in
    s0, copy = _line(code, "/* S0 */"), _line(code, "/* copyout_B_shared_k0 */")
    tx = _tx_before(code, "/* S0 */")
    assert re.match(rf"\s*B_shared_k0\[{tx}\]\[c\d+\] = A\[", s0), s0  # compute: transposed, into the buffer
    tx = _tx_before(code, "/* copyout_B_shared_k0 */")
    assert _follows(copy.split("] = B_shared_k0")[0].rsplit(" * N + ", 1)[1], tx), copy  # coalesced global writes
    assert _barriers(code) == 1  # compute -> copy-out only: no copy-in, no later tile in the block
    assert code.index("/* S0 */") < code.index("/* sync_k0_0 */") < code.index("/* copyout_B_shared_k0 */")
    assert sched.traffic({"N": 100, "M": 60}).total_bytes == 2 * 100 * 60 * 4  # the model sees the compute tree


def test_transpose_fused_with_elementwise_op() -> None:
    sched = schedule(transpose_scale, target="cuda")
    assert set(_shared(sched)) == {"B"}
    assert {b.array for b in sched.promotion.buffers if b.space == "register"} == {"C"}
    code = generate_cuda(sched).text
    assert code.index("/* S1 */") < code.index("/* sync_k0_0 */") < code.index("/* copyout_B_shared_k0 */")
    assert "C_reg_k0 = C[" not in code  # C is written before it is read in each thread: no load


def test_uncoalesced_read_is_staged_without_copy_out() -> None:
    sched = schedule(transpose_read, target="cuda")
    assert set(_shared(sched)) == {"A"}
    code = generate_cuda(sched).text
    assert "copyout" not in code and "/* copy_A_shared_k0 */" in code
    tx = _tx_before(code, "/* copy_A_shared_k0 */")
    copy = _line(code, "/* copy_A_shared_k0 */")
    assert _follows(copy.rsplit(" * N + ", 1)[1], tx), copy
    assert _barriers(code) == 1


def test_read_modify_write_copies_in_and_out() -> None:
    sched = schedule(transpose_add, target="cuda")
    code = generate_cuda(sched).text
    order = [code.index(m) for m in ("/* copy_B_shared_k0 */", "/* sync_k0_0 */", "/* S0 */", "/* sync_k0_1 */", "/* copyout_B_shared_k0 */")]
    assert order == sorted(order)
    assert _barriers(code) == 2


def test_cross_thread_reuse_of_a_written_array_copies_exactly_what_is_read_and_written() -> None:
    sched = schedule(odd_rows, target="cuda")
    assert set(_shared(sched)) == {"A"}
    copy_in, copy_out = _statement(sched, "copy_A"), _statement(sched, "copyout_A")
    even = isl.Set("[N, M] -> { A[r, c] : r mod 2 = 0 }")
    odd = isl.Set("[N, M] -> { A[r, c] : r mod 2 = 1 }")
    read = copy_in.accesses[1].relation.range()
    written = copy_out.accesses[0].relation.range()
    assert copy_in.accesses[1].array == "A" and copy_out.accesses[0].array == "A"
    assert read.is_subset(even) and written.is_subset(odd)  # the box's other rows are never clobbered
    assert written.is_equal(odd_rows.statement("S0").write.relation.range())
    code = generate_cuda(sched).text
    assert _barriers(code) == 2


def test_jacobi_2d_writes_stay_global() -> None:
    sched = schedule(ex.jacobi_2d, target="cuda", params={"N": 1000, "T": 10})
    assert "copyout" not in generate_cuda(sched).text  # coalesced and not shared across threads


WRITTEN = [transpose, transpose_scale, transpose_read, transpose_add, odd_rows]


def test_nvcc_compiles_copy_out_and_register_windows(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    variants = [(f"{p.name}_{k}", generate_cuda(schedule(p, target="cuda", **kw)).text)
                for p in WRITTEN for k, kw in enumerate(({}, {"params": {"N": 1000, "M": 700}, "tile": (8, 16)}))]
    variants.append(("jacobi", generate_cuda(schedule(ex.jacobi_2d, target="cuda", params={"N": 1000, "T": 10})).text))
    staged = len(variants)  # the register windows below need no barrier
    variants += [(f"window_{p.name}", generate_cuda(schedule(p, target="cuda", **kw)).text) for p, kw, _, _ in WINDOWS]
    variants.append(("window_heat_3d", generate_cuda(_heat_3d()).text))
    src = tmp_path / "all.cu"
    src.write_text(_unit(variants))
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "all.ptx"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    ptx = (tmp_path / "all.ptx").read_text()
    assert ptx.count("bar.sync") >= staged
    for tag, _ in variants:
        assert f".entry {tag}_" in ptx, f"no kernel of {tag} in the PTX"


def test_emulation_of_copy_out_matches_reference(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    sizes = {"N": 37, "M": 45}  # not multiples of the tile sizes
    variants = []
    for prog in WRITTEN:
        for k, kw in enumerate(({}, {"params": sizes, "tile": (8, 16)})):
            sched = schedule(prog, target="cuda", **kw)
            assert _shared(sched), (prog.name, sched.explain())
            variants.append((f"{prog.name}_{k}", prog, generate_cuda(sched)))
    dll = build_emulator([(tag, code) for tag, _, code in variants], tmp_path)
    for tag, prog, code in variants:
        expected = _inputs(prog, sizes)
        pf.reference(prog)(**expected)
        got = _inputs(prog, sizes)
        emulate(dll, tag, code, got, sizes)
        for name in prog.arguments:
            if prog.arrays[name].role != "input":
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, err_msg=f"{tag}: {name}")


# ----- register windows: per-thread reuse along the thread's innermost sequential loop --------------------

K = pf.params("K")


@pf.program(assume="N >= 3 and M >= 3 and K >= 3")
def laplace_3d(A: pf.f32[N, M, K], B: pf.f32[N, M, K]):
    """A 7-point Laplacian: i, j map to threads, k runs inside each thread (A[.., k-1..k+1] is its window)."""
    for i in range(1, N - 1):
        for j in range(1, M - 1):
            for k in range(1, K - 1):
                B[i, j, k] = (A[i, j, k - 1] + A[i, j, k + 1] + A[i - 1, j, k] + A[i + 1, j, k]
                              + A[i, j - 1, k] + A[i, j + 1, k] - 6.0 * A[i, j, k])


@pf.program(assume="M >= 3")
def row_blur(A: pf.f32[N, M], B: pf.f32[N, M]):
    """A 3-point stencil along rows; with ``tile=(32,)`` only i maps to threads and j stays in the thread."""
    for i in range(N):
        for j in range(1, M - 1):
            B[i, j] = A[i, j - 1] + 2.0 * A[i, j] + A[i, j + 1]


@pf.program(assume="M >= 3")
def skip_two(A: pf.f32[N, M], B: pf.f32[N, M]):
    """Reuse distance 2 (offsets 0 and 2), and a value read twice in one iteration."""
    for i in range(N):
        for j in range(M - 2):
            B[i, j] = A[i, j] * A[i, j] - A[i, j + 2]


@pf.program(assume="M >= 2")
def chained_reads(A: pf.f32[N, M], B: pf.f32[N, M]):
    """Two statements of one iteration share the window (T is contracted to a register)."""
    T = pf.empty((N, M), pf.f32)
    for i in range(N):
        for j in range(M - 1):
            T[i, j] = A[i, j] + A[i, j + 1]
            B[i, j] = T[i, j] * A[i, j + 1]


@pf.program
def square_rows(A: pf.f32[N, M], B: pf.f32[N, M]):
    """No reuse across iterations, one value read twice in each: a window of one register."""
    for i in range(N):
        for j in range(M):
            B[i, j] = A[i, j] * A[i, j] + 1.0


# (program, schedule options, registers of the window, global loads of A left in the loop body)
WINDOWS = [
    (laplace_3d, {}, 3, 5),  # the 4 neighbours in i and j stay global loads
    (row_blur, {"tile": (32,)}, 3, 1),
    (skip_two, {"tile": (32,)}, 3, 1),
    (chained_reads, {"tile": (32,)}, 2, 1),
    (square_rows, {"tile": (32,)}, 1, 1),
]


def _loop_body(code: str, marker: str) -> list[str]:
    """The lines of the innermost ``for`` loop holding the line with ``marker`` (its body only)."""
    lines = code.splitlines()
    at = next(k for k, ln in enumerate(lines) if marker in ln)
    start = max(k for k in range(at) if lines[k].lstrip().startswith("for ("))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(k for k in range(start + 1, len(lines)) if lines[k].strip() == "}" and len(lines[k]) - len(lines[k].lstrip()) == indent)
    return lines[start + 1:end]


@pytest.mark.parametrize("prog,kw,slots,loads", WINDOWS, ids=[w[0].name for w in WINDOWS])
def test_register_window_loads_each_element_once_per_iteration(prog, kw, slots, loads) -> None:
    sched = schedule(prog, target="cuda", **kw)
    regs = sorted(b.name for b in sched.promotion.buffers if b.space == "register" and b.array == "A")
    assert len(regs) == slots and not _shared(sched), sched.explain()
    code = generate_cuda(sched).text
    body = _loop_body(code, "/* wload_A_")
    assert sum(ln.count("A[") for ln in body) == loads, "\n".join(body)
    assert sum("/* wload_A_" in ln for ln in body) == 1  # one new element of the window per iteration
    rotations = [ln.strip() for ln in body if "/* wrot_" in ln]  # after the compute, oldest slot first
    assert rotations == [f"{regs[j]} = {regs[j + 1]};  /* wrot_{regs[j]} */" for j in range(slots - 1)]
    assert max(k for k, ln in enumerate(body) if "/* S" in ln) < min([k for k, ln in enumerate(body) if "/* wrot_" in ln], default=len(body))
    assert code.count("/* winit_") == slots - 1  # the first slots are loaded once, before the loop
    assert f"register window {regs[0]}..{regs[-1]}" in sched.explain()
    assert sched.traffic({"N": 40, "M": 50, "K": 30}).total_bytes > 0  # the compute tree is untouched


def test_heat_3d_keeps_the_k_window_in_registers() -> None:
    sched = _heat_3d()
    regs = {(b.kernel, b.array) for b in sched.promotion.buffers if b.space == "register"}
    assert regs == {(sched.kernels[0].name, "A"), (sched.kernels[1].name, "B")}
    body = _loop_body(generate_cuda(sched).text, "/* wload_A_")
    assert sum(ln.count("A[") for ln in body) == 5  # was 10 (A[i][j][k] 4 times, k-1, k+1, 4 neighbours)


def test_register_window_leaves_staged_arrays_to_shared_memory() -> None:
    sched = schedule(laplace_3d, target="cuda", params={"N": 37, "M": 45, "K": 70}, tile=(8, 16))
    assert "A" in _shared(sched)
    assert not [b for b in sched.promotion.buffers if b.space == "register" and b.array == "A"]


_HEAT: list = []


def _heat_3d():
    """heat-3d without sizes (schedule once: it takes seconds): k runs inside the thread."""
    if not _HEAT:
        _HEAT.append(schedule(pf.from_c(str(Path(__file__).parent / "kernels" / "heat-3d.c")), target="cuda"))
    return _HEAT[0]


def test_emulation_of_register_windows_matches_reference(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    sizes = {"N": 37, "M": 45, "K": 70}  # not multiples of the tiles; K spans three hoisted k tiles
    variants = [(f"{p.name}_{k}", p, generate_cuda(schedule(p, target="cuda", **kw)), sizes)
                for k, (p, kw, _, _) in enumerate(WINDOWS)]
    variants.append(("heat", _heat_3d().program, generate_cuda(_heat_3d()), {"n": 13}))  # 20 time steps (a macro)
    dll = build_emulator([(tag, code) for tag, _, code, _ in variants], tmp_path)
    for tag, prog, code, sz in variants:
        sz = {p: v for p, v in sz.items() if p in prog.params}
        expected = _inputs(prog, sz)
        pf.reference(prog)(**expected)
        got = _inputs(prog, sz)
        emulate(dll, tag, code, got, sz)
        for name in prog.arguments:
            if name in prog.arrays and prog.arrays[name].role != "input":
                tol = 1e-5 if prog.arrays[name].dtype.name == "f32" else 1e-12
                np.testing.assert_allclose(got[name], expected[name], rtol=tol, atol=tol, err_msg=f"{tag}: {name}")
