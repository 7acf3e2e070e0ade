"""CUDA code generation without a GPU: nvcc compiles every generated kernel, the host plan runs with a fake
launcher, and every variant runs in the CUDA simulator (:mod:`polyfuse.runtime.cuda_sim`: the exact text,
races, out-of-bounds indices and barriers checked) and is compared against the reference interpreter.

Schedules come from ``polyfuse.schedule.schedule`` when the scheduler is present, else from
:func:`hand_schedule`, which builds kernel/grid/block marks by hand as ``schedule/model.py`` specifies.
"""

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
from polyfuse.codegen.cuda import PRELUDE, generate_cuda
from polyfuse.codegen.host_plan import HostPlan, run_host_plan
from polyfuse.ir.program import Program
from polyfuse.runtime import cuda_sim
from polyfuse.schedule.bands import statement_filters
from polyfuse.schedule.model import Kernel, Schedule

try:
    from polyfuse.schedule import schedule as pf_schedule
except ImportError:  # the scheduler is not there yet: hand-built schedules only
    pf_schedule = None

FUSIONS = ("none", "min", "max", "smart")
TILES = ("auto", None)


def _band(prog: Program, stmts, lo: int, hi: int) -> isl.MultiUnionPwAff:
    parts = []
    for d in range(lo, hi):
        upa = None
        for s in stmts:
            st = prog.statement(s)
            aff = isl.PwAff.from_aff(isl.Aff.var_on_domain(isl.LocalSpace.from_space(st.domain.get_space()), isl.dim_type.set, d))
            piece = aff.intersect_domain(st.domain).to_union_pw_aff()
            upa = piece if upa is None else upa.union_add(piece)
        parts.append(isl.MultiUnionPwAff.from_union_pw_aff(upa))
    out = parts[0]
    for p in parts[1:]:
        out = out.flat_range_product(p)
    return out


def hand_schedule(prog: Program, groups, host_depth: int = 0, tile: int | None = 32, nmap: int = 2) -> Schedule:
    """One kernel per group of statements (in order), after ``host_depth`` host loops shared by all.

    Each kernel maps its first ``nmap`` common loops: tiled, the tile loops to blocks and the point loops to
    threads; untiled, the loops to blocks (one thread per block). Legality is not checked: the groups must
    be chosen so that the mapped loops are parallel.
    """
    node = isl.Schedule.from_domain(prog.domains).get_root().child(0)
    if host_depth:
        node = node.insert_partial_schedule(_band(prog, [s.name for s in prog.statements], 0, host_depth)).child(0)
    if len(groups) > 1:
        node = node.insert_sequence(statement_filters(prog, groups))
    kernels = []
    for gi, g in enumerate(groups):
        if len(groups) > 1:
            node = node.child(gi).child(0)
        nm = min(nmap, min(prog.statement(s).depth for s in g) - host_depth)
        k = Kernel(f"{prog.name}_g{gi}", tuple(g), (1,) * nm, (1,) * nm if tile else ())
        if nm:
            node = node.insert_partial_schedule(_band(prog, g, host_depth, host_depth + nm))
            if len(g) > 1:
                node = node.child(0).insert_sequence(statement_filters(prog, [(s,) for s in g])).parent()
            if tile:
                mv = isl.MultiVal.zero(node.band_get_space())
                for m in range(nm):
                    mv = mv.set_val(m, isl.Val(tile))
                node = node.band_tile(mv).insert_mark(isl.Id("grid")).child(0).child(0)
                node = node.insert_mark(isl.Id("block")).parent().parent()
            else:
                node = node.insert_mark(isl.Id("grid"))
        node = node.insert_mark(isl.Id("kernel", user=k))
        kernels.append(k)
        if len(groups) > 1:
            node = node.parent().parent()
    return Schedule(prog, node.get_schedule(), "cuda", "hand", tuple(kernels))


# Hand schedules: (groups, host depth, mapped loops) chosen so that the mapped loops are parallel.
HAND = {
    "add_exp": ([("S0", "S1")], 0, 2),
    "gemm": ([("S0", "S1")], 0, 2),
    "gemm_acc": ([("S0", "S1", "S2")], 0, 2),
    "two_mm": ([("S0", "S1"), ("S2", "S3")], 0, 2),
    "atax": ([("S0",), ("S1", "S2", "S3", "S4")], 0, 0),
    "bicg": ([("S0",), ("S1", "S2", "S3")], 0, 0),
    "jacobi_1d": ([("S0",), ("S1",)], 1, 1),
    "jacobi_2d": ([("S0",), ("S1",)], 1, 2),
    "seidel_2d": ([("S0",)], 0, 0),
    "lu": ([("S0", "S1", "S2")], 0, 0),
    "cholesky": ([("S0", "S1", "S2", "S3")], 0, 0),
    "floyd_warshall": ([("S0",)], 1, 2),
    "triangular": ([("S0", "S1")], 0, 1),
    "stencil_if": ([("S0", "S1")], 0, 1),
    "row_sum": ([("S0", "S1", "S2")], 0, 1),
    "modulo": ([("S0",), ("S1",)], 0, 1),
    "minmax": ([("S0", "S1"), ("S2",)], 0, 1),
    "time_axpy": ([("S0",)], 1, 1),
}


def schedules(prog: Program) -> list[tuple[str, Schedule]]:
    """Every schedule variant the tests cover for ``prog``."""
    if pf_schedule is not None:
        return [(f"{f}-{t}", pf_schedule(prog, target="cuda", fusion=f, tile=t)) for f in FUSIONS for t in TILES]
    groups, host, nmap = HAND[prog.name]
    return [(f"hand-{t}", hand_schedule(prog, groups, host, t, nmap)) for t in (32, None)]


# ----- nvcc ---------------------------------------------------------------------------------------------


def _unit(variants: list[tuple[str, str]]) -> str:
    """One translation unit holding many generated programs: one prelude, kernels renamed per variant."""
    parts = [PRELUDE]
    for tag, text in variants:
        body = text.replace(PRELUDE, "")
        body = re.sub(r"__global__ void (__launch_bounds__\([^)]*\) )?", lambda m: f"__global__ void {m.group(1) or ''}{tag}_", body)
        parts.append(f"/* ===== {tag} ===== */\n" + body)
    return "\n".join(parts)


@pytest.fixture(scope="module")
def generated() -> dict[str, list[tuple[str, object]]]:
    """Generated CUDA of every program under every schedule variant (computed once per module)."""
    return {p.name: [(tag, generate_cuda(s)) for tag, s in schedules(p)] for p in ex.ALL}


def test_every_program_compiles_with_nvcc(generated, tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    variants = [(f"{name}_{tag.replace('-', '_')}", code.text) for name, codes in generated.items() for tag, code in codes]
    src = tmp_path / "all.cu"
    src.write_text(_unit(variants))
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "all.ptx"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    ptx = (tmp_path / "all.ptx").read_text()
    for tag, _ in variants:
        assert f".entry {tag}_" in ptx, f"no kernel of {tag} in the PTX"


def test_generated_text_is_cuda(generated) -> None:
    code = generated["add_exp"][0][1]
    assert code.target == "cuda"
    assert 'extern "C" __global__ void add_exp_k0(' in code.text
    assert "__restrict__" in code.text and "long long N" in code.text
    assert "blockIdx.x" in code.text and "threadIdx.x" in code.text
    assert isinstance(code.launch, HostPlan)


def test_intrinsics_match_precision(generated) -> None:
    f32 = generated["add_exp"][0][1].text
    assert "expf(" in f32 and "__expf" not in f32
    f64 = generated["cholesky"][0][1].text
    assert "sqrt(" in f64 and "sqrtf(" not in f64


# ----- host plans with a fake launcher -------------------------------------------------------------


def _record(plan: HostPlan, sizes: dict[str, int]) -> list[tuple[str, tuple[int, ...], tuple[int, ...], dict]]:
    seen: list = []
    run_host_plan(plan, lambda la, g, b, env: seen.append((la.kernel, g, b, dict(env))), sizes)
    return seen


def _cuda_schedule(prog: Program, fusion: str, tile="auto") -> Schedule:
    if pf_schedule is not None:
        return pf_schedule(prog, target="cuda", fusion=fusion, tile=tile)
    groups, host, nmap = HAND[prog.name]
    return hand_schedule(prog, groups, host, 32 if tile else None, nmap)


def test_add_exp_fused_is_one_launch() -> None:
    plan = generate_cuda(_cuda_schedule(ex.add_exp, "max")).launch
    launches = _record(plan, {"N": 100, "M": 70})
    assert len(launches) == 1
    _, grid, block, _ = launches[0]
    threads = np.prod(grid) * np.prod(block)
    assert threads >= 100 * 70


def test_jacobi_2d_time_loop_on_host() -> None:
    plan = generate_cuda(_cuda_schedule(ex.jacobi_2d, "smart")).launch
    launches = _record(plan, {"N": 40, "T": 3})
    assert len(launches) <= 2 * 3 and len(launches) >= 3
    assert [env.get("c0") for *_, env in launches] == sorted(env.get("c0") for *_, env in launches)
    if pf_schedule is None:
        assert [k for k, *_ in launches] == ["jacobi_2d_k0", "jacobi_2d_k1"] * 3


def test_gemm_acc_has_a_2d_grid() -> None:
    sched = _cuda_schedule(ex.gemm_acc, "smart")
    plan = generate_cuda(sched).launch
    init, update = plan.launches()  # C = 0, then the micro-tiled contraction
    assert len(init.grid) == 2 and len(update.grid) == 2 and update.block == ("16", "16")
    micro = sched.kernels[1].microtile
    (_, grid, block, _), (_, grid2, _, _) = _record(plan, {"N": 64, "M": 96, "K": 8})
    assert grid[0] * block[0] >= 96 and grid[1] * block[1] >= 64
    assert grid2[0] * micro.block_lanes >= 96 and grid2[1] * micro.block_rows >= 64


def test_empty_kernels_are_not_launched() -> None:
    plan = generate_cuda(_cuda_schedule(ex.jacobi_2d, "smart")).launch
    assert _record(plan, {"N": 40, "T": 0}) == []


# ----- the generated kernels run in the CUDA simulator -------------------------------------------------

def build_emulator(variants: list[tuple[str, object]], tmp: Path | None = None) -> dict[str, cuda_sim.SimulatedCuda]:
    """Every variant's kernels in one simulator library (:func:`polyfuse.runtime.cuda_sim.load_many`, one
    g++ run): ``{tag: simulated program}``. ``tmp`` is unused (the library goes to polyfuse's cache)."""
    return {tag: sim for (tag, _), sim in zip(variants, cuda_sim.load_many([(f"{tag}_", code) for tag, code in variants]).values())}


def emulate(sims: dict[str, cuda_sim.SimulatedCuda], tag: str, code, values: dict, sizes: dict) -> None:
    """Run one variant's host plan in the simulator; ``values`` (arrays by name, scalars) are updated in
    place. A race, an out-of-bounds index or a misplaced barrier raises :class:`pf.SimulationError`."""
    sim = sims[tag]
    host = {name: v for name, v in values.items() if name in sim.arrays}
    scalars = {a.name: values[a.name] for la in code.launch.launches() for a in la.args if a.kind == "scalar"}
    sim.run(host, scalars, sizes)


SIZES = {"N": 37, "M": 29, "K": 13, "T": 3}


def _inputs(prog: Program, sizes: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            out[name] = (rng.random(a.concrete_shape(sizes)) + 0.5).astype(a.dtype.numpy)
        else:
            out[name] = prog.scalars[name].numpy(1.5)
    if prog.name in ("lu", "cholesky"):  # diagonally dominant, symmetric positive definite
        n = sizes["N"]
        a = out["A"]
        out["A"] = (a @ a.T + n * np.eye(n)).astype(a.dtype)
    return out


@pytest.mark.parametrize("prog", ex.ALL, ids=lambda p: p.name)
def test_cpu_emulation_matches_reference(prog: Program, generated, tmp_path: Path) -> None:
    if not cuda_sim.available():
        pytest.skip("g++ is not on PATH")
    sizes = {p: SIZES[p] for p in prog.params}
    expected = _inputs(prog, sizes)
    pf.reference(prog)(**expected, **{p: v for p, v in sizes.items() if p == "T"})
    variants = [(tag.replace("-", "_"), code) for tag, code in generated[prog.name]]
    dll = build_emulator(variants, tmp_path)
    for tag, code in variants:
        got = _inputs(prog, sizes)
        emulate(dll, tag, code, got, sizes)
        for name in prog.arguments:
            if name in prog.arrays and prog.arrays[name].role != "input":
                tol = 1e-4 if prog.arrays[name].dtype.name == "f32" else 1e-9
                np.testing.assert_allclose(got[name], expected[name], rtol=tol, atol=tol, err_msg=f"{prog.name} {tag}: {name}")


def test_load_without_gpu_is_runtime_unavailable(generated) -> None:
    from polyfuse.runtime import cuda as cuda_runtime

    if cuda_runtime.available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(pf.RuntimeUnavailable, match="no pycuda|no CUDA device"):
        cuda_runtime.load(generated["add_exp"][0][1])
