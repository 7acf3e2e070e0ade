"""The C/OpenMP back end: every corpus program, compiled under every fusion policy and tiling, agrees with the
reference interpreter; plus dtype coverage, the fusion outcome visible in the C text, and readability.

Two layers are tested. ``generate_c`` + ``CFunction`` on hand-built schedules (source order with a kernel mark
per top-level child, and a hand-fused producer/consumer) needs nothing but the printer. ``pf.compile`` runs the
whole pipeline through the scheduler.
"""

from __future__ import annotations

import re

import islpy as isl
import numpy as np
import pytest

import examples.kernels as corpus
import polyfuse as pf
from polyfuse.codegen.c import generate_c
from polyfuse.runtime.args import bind
from polyfuse.runtime.cpu import CFunction
from polyfuse.schedule.model import Kernel, Schedule

SIZES = {"N": 11, "M": 9, "K": 13, "T": 3}
FUSION = ("none", "min", "max", "smart")
TILES = ("auto", None)


# ----- helpers ------------------------------------------------------------------------------------


def make_inputs(prog: pf.Program, sizes: dict[str, int], seed: int = 0) -> dict:
    """Random arguments at ``sizes``; lu and cholesky get symmetric, diagonally dominant matrices."""
    rng = np.random.default_rng(seed)
    own = {n: sizes[n] for n in prog.params}
    kwargs: dict = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            shape = a.concrete_shape(own)
            if a.dtype.is_float:
                x = rng.uniform(-1, 1, shape)
                if prog.name in ("lu", "cholesky"):
                    x = x @ x.T + shape[0] * np.eye(shape[0])
            else:
                x = rng.integers(-50, 50, shape)
            kwargs[name] = np.ascontiguousarray(x, dtype=a.dtype.numpy)
        else:
            kwargs[name] = prog.scalars[name].numpy(1.25 if prog.scalars[name].is_float else 3)
    kwargs.update({n: v for n, v in own.items() if n == "T"})
    return kwargs


def copy_args(kwargs: dict) -> dict:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


def assert_matches_reference(prog: pf.Program, run, sizes: dict[str, int] = SIZES) -> None:
    """Run ``run(**kwargs)`` and the reference on the same random inputs; compare every array argument."""
    args = make_inputs(prog, sizes)
    expected = copy_args(args)
    pf.reference(prog)(**expected)
    run(**args)
    for name in prog.arguments:
        if name in prog.arrays:
            tol = 1e-4 if prog.arrays[name].dtype == pf.f32 else 1e-9
            np.testing.assert_allclose(args[name], expected[name], rtol=tol, atol=tol, err_msg=f"{prog.name}: {name}")


def run_code(sched: Schedule):
    """A callable running ``generate_c(sched)`` directly (no scheduler, no Executable)."""
    code = generate_c(sched)
    fn = CFunction(code)
    prog = sched.program

    def run(**kwargs):
        b = bind(prog, kwargs)
        temps = {n: np.empty(prog.arrays[n].concrete_shape(b.sizes), prog.arrays[n].dtype.numpy) for n in code.temporaries}
        fn(*(b.sizes[a.name] if a.kind == "size" else b.scalars[a.name] if a.kind == "scalar"
             else b.arrays.get(a.name, temps.get(a.name)) for a in code.signature))

    return run


def _filter_statements(node: isl.ScheduleNode) -> tuple[str, ...]:
    sets: list[isl.Set] = []
    node.filter_get_filter().foreach_set(sets.append)
    return tuple(sorted(s.get_tuple_name() for s in sets))


def source_order_schedule(prog: pf.Program) -> Schedule:
    """The source order with a ``kernel`` mark above each top-level child (one kernel per top-level nest)."""
    node = prog.schedule.get_root().child(0)
    kernels: list[Kernel] = []
    if node.get_type() == isl.schedule_node_type.sequence:
        for k in range(node.n_children()):
            kernel = Kernel(f"k{k}", _filter_statements(node.child(k)))
            kernels.append(kernel)
            node = node.child(k).child(0).insert_mark(isl.Id("kernel", user=kernel)).parent().parent()
    else:
        kernel = Kernel("k0", tuple(s.name for s in prog.statements))
        kernels.append(kernel)
        node = node.insert_mark(isl.Id("kernel", user=kernel))
    return Schedule(prog, node.get_schedule(), "c", "none", tuple(kernels))


def fused_add_exp_schedule() -> Schedule:
    """add_exp with both statements in one parallel (i, j) nest and B contracted to a scalar."""
    prog = corpus.add_exp
    s0, s1 = (isl.Schedule.from_domain(isl.UnionSet.from_set(s.domain)) for s in prog.statements)
    band = isl.MultiUnionPwAff("[N, M] -> [{ S0[i, j] -> [(i)]; S1[i, j] -> [(i)] }, { S0[i, j] -> [(j)]; S1[i, j] -> [(j)] }]")
    tree = s0.sequence(s1).insert_partial_schedule(band)
    kernel = Kernel("k0", ("S0", "S1"), parallel_depth=1)
    node = tree.get_root().child(0).insert_mark(isl.Id("parallel")).insert_mark(isl.Id("kernel", user=kernel))
    return Schedule(prog, node.get_schedule(), "c", "max", (kernel,), contracted=frozenset({"B"}))


# ----- the printer alone --------------------------------------------------------------------------


@pytest.mark.parametrize("prog", corpus.ALL, ids=lambda p: p.name)
def test_source_order_matches_reference(prog):
    assert_matches_reference(prog, run_code(source_order_schedule(prog)))


def test_fused_producer_consumer_is_one_parallel_nest_without_b():
    sched = fused_add_exp_schedule()
    code = generate_c(sched)
    assert code.text.count("#pragma omp parallel for") == 1
    assert "B" not in [a.name for a in code.signature] and code.temporaries == ()
    assert not re.search(r"\bB\[", code.text)  # no global buffer: B is a private scalar
    body = code.text[code.text.index("#pragma omp parallel for"):]
    assert re.search(r"for \(int64_t c0 = 0; c0 < N; c0 \+= 1\) \{\n\s+float B;", body)
    assert_matches_reference(corpus.add_exp, run_code(sched))


def test_generated_code_is_readable():
    text = generate_c(source_order_schedule(corpus.gemm_acc)).text
    assert text.startswith("/* polyfuse: program gemm_acc")
    assert " *   kernel k0: S0, S1, S2" in text
    assert "void gemm_acc_kernel(\n    const int64_t " in text
    assert all(f"    const int64_t {p},\n" in text for p in "NMK")
    assert "    const float *restrict A,\n" in text and "    float *restrict C)" in text
    expected_nest = (
        "        for (int64_t c0 = 0; c0 < N; c0 += 1) {\n"
        "            for (int64_t c1 = 0; c1 < M; c1 += 1) {\n"
        "                acc = 0.0f;  /* S0 */\n"
        "                for (int64_t c2 = 0; c2 < K; c2 += 1) {\n"
        "                    acc += A[c0 * K + c2] * B[c2 * M + c1];  /* S1 */\n"
    )
    assert expected_nest in text


def test_floor_division_and_modulo_indices_use_exact_helpers():
    text = generate_c(source_order_schedule(corpus.modulo)).text
    assert "#define polyfuse_floord" in text
    assert_matches_reference(corpus.modulo, run_code(source_order_schedule(corpus.modulo)))


I = pf.params("I")


@pf.program
def typed(x: pf.i32[I], y: pf.i32[I], u: pf.f32[I], v: pf.f64[I], k: pf.i32, s: pf.f32, d: pf.f64):
    """Every dtype, scalar arguments of each, integer floor division/modulo and the float intrinsics."""
    for i in range(I):
        y[i] = pf.max(x[i] // k, x[i] % k) + pf.abs(x[i]) * k + i
    for i in range(I):
        u[i] = pf.where(u[i] > 0.0, pf.sqrt(pf.abs(u[i])) * s, pf.tanh(u[i])) + pf.exp(u[i] * 0.5) + pf.log(pf.abs(u[i]) + 1.0)
    for i in range(I):
        v[i] = pf.pow(pf.abs(v[i]), 1.5) * d + pf.min(v[i], 0.25) + i * 0.5


def test_dtypes_and_scalar_arguments():
    text = generate_c(source_order_schedule(typed)).text
    for spelling in ("const int *restrict x", "const int k", "const float s", "const double d",
                     "pf_floordiv_i32(", "pf_mod_i32(", "tanhf(", "expf(", "logf(", "sqrtf(", "pow(", "fmin("):
        assert spelling in text, spelling
    assert re.search(r"\b0\.5f\b", text)
    assert_matches_reference(typed, run_code(source_order_schedule(typed)), {"I": 17})


# ----- the whole pipeline -------------------------------------------------------------------------


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"tile={t}")
@pytest.mark.parametrize("fusion", FUSION)
@pytest.mark.parametrize("prog", corpus.ALL, ids=lambda p: p.name)
def test_compiled_matches_reference(prog, fusion, tile):
    exe = pf.compile(prog, target="c", fusion=fusion, tile=tile)
    assert_matches_reference(prog, exe)
    assert exe.code.target == "c" and exe.schedule.fusion == fusion


def test_fusion_max_producer_consumer_has_one_parallel_nest_and_no_b_buffer():
    exe = pf.compile(corpus.add_exp, target="c", fusion="max")
    a, c = np.random.default_rng(1).random((2, 33, 17), dtype=np.float32)
    exe(A=a, C=c)
    np.testing.assert_allclose(c, np.exp(a + 1), rtol=1e-5)
    text = exe.code.text
    assert len(exe.schedule.kernels) == 1
    assert text.count("#pragma omp parallel for") == 1
    assert "B" in exe.schedule.contracted and "B" not in [x.name for x in exe.code.signature]
    assert not re.search(r"\bB\[", text)


def test_executable_specialises_per_shape():
    exe = pf.compile(corpus.add_exp, target="c")
    for n, m in ((4, 5), (6, 3), (4, 5)):
        a = np.ones((n, m), np.float32)
        c = np.zeros_like(a)
        exe(A=a, C=c)
        np.testing.assert_allclose(c, np.exp(2.0), rtol=1e-6)
    assert len(exe._specialisations) == 2
    with pytest.raises(pf.ShapeError):
        exe(A=np.ones((4, 5), np.float32), C=np.ones((5, 4), np.float32))


def test_compile_time_params_specialise_eagerly():
    exe = pf.compile(corpus.time_axpy, target="c", params={"N": 8, "T": 4})
    assert exe.schedule.params["N"] == 8
    x, y = np.ones(8), np.zeros(8)
    exe(x=x, y=y, a=0.5, T=4)
    np.testing.assert_allclose(y, 2.0)
