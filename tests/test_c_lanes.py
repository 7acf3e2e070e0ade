"""C target: innermost loops that call ``exp`` run whole 16-float vectors through the AVX-512 ``exp`` that
the printer writes out (``codegen/c_lanes.py``), then their scalar loop over the rest.

What a user relies on: the results are those of the scalar build bit for bit (``-DPF_EXPLICIT_SIMD=0`` through
``$POLYFUSE_CFLAGS`` compiles the scalar loops only), over the whole range of ``exp`` and its special
values, at lengths that leave every number of remainder lanes (1, 7, 16, 37, 129), in plain loops, loops
with per-iteration temporaries, sums and next-row prefetches; and they equal the reference interpreter's.
Loops that only reduce (a row's max, min or sum, no ``exp``) run four vector accumulators: maxima and minima
bit for bit the scalar build's, sums within the reassociation's tolerance. Loops the explicit form does not
cover (f64, strided reads, ``tanh``, sums kept in order) keep their scalar form."""

from __future__ import annotations

import importlib
import subprocess

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops
from polyfuse.runtime import cpu

c_lanes = importlib.import_module("polyfuse.codegen.c_lanes")
c_stream = importlib.import_module("polyfuse.codegen.c_stream")
c_vector = importlib.import_module("polyfuse.codegen.c_vector")

R, D = pf.params("R D")

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 88.72, 88.73, 88.4, -87.3, -87.4, -100.0,
                    -103.9, -103.98, -104.5, 104.0, 200.0, -200.0, 0.34657359, -0.34657359, 1.0, -1.0, 20.5],
                   dtype=np.float32)


def _exp_chain() -> pf.Program:
    """Per-iteration temporaries (the fused ``a * s`` and ``+ b``) feeding ``exp``, a broadcast operand."""
    g = pf.Graph("lanes_exp_chain")
    a, b = g.input("a", (R, D)), g.input("b", (D,))
    return g.build(y=ops.exp(a * 0.5 + b) - 1.0)


def _softmax(dtype: pf.DType = pf.f32) -> pf.Program:
    g = pf.Graph(f"lanes_softmax_{dtype.name}")
    return g.build(y=ops.softmax(g.input("x", (R, D), dtype), axis=-1))


@pf.program
def lanes_strided_exp(x: pf.f32[D, R], y: pf.f32[R, D]):
    for i in range(R):
        for j in range(D):
            y[i, j] = pf.exp(x[j, i])


def _strided_exp() -> pf.Program:
    """One of the two accesses strides along whichever loop is innermost."""
    return lanes_strided_exp


def _tanh() -> pf.Program:
    g = pf.Graph("lanes_tanh")
    return g.build(y=ops.tanh(g.input("x", (R, D)) + 1.0))


def _row_extrema() -> pf.Program:
    """A row's max and min, each feeding the row's elements: one loop that only reduces, into two scalars."""
    g = pf.Graph("lanes_extrema")
    x = g.input("x", (R, D))
    return g.build(y=x - x.max(axis=-1, keepdims=True), z=x - x.min(axis=-1, keepdims=True))


def _row_sum_of_squares() -> pf.Program:
    """A sum of per-iteration temporaries (``x * x``): rmsnorm's reduction."""
    g = pf.Graph("lanes_sum_of_squares")
    x = g.input("x", (R, D))
    return g.build(y=x / (x * x).sum(axis=-1, keepdims=True))


def _scaled_softmax() -> pf.Program:
    """softmax(x * s): the row's max loop also stores the products (an array written beside a reduction)."""
    g = pf.Graph("lanes_scaled_softmax")
    x, sc = g.input("x", (R, D)), g.input("s", (R, D))
    return g.build(p=ops.softmax(x * sc, axis=-1))


def _inputs(prog: pf.Program, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Inputs over exp's whole range with the special values spread through them, and NaN-filled outputs."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in prog.arguments:
        array = prog.arrays[name]
        shape = array.concrete_shape(sizes)
        if array.role == "output":
            out[name] = np.full(shape, np.nan, array.dtype.numpy)
            continue
        a = rng.uniform(-110, 110, shape).astype(array.dtype.numpy)
        flat = a.reshape(-1)
        spots = rng.choice(flat.size, size=min(flat.size, SPECIAL.size), replace=False)
        flat[spots] = SPECIAL[: spots.size]
        out[name] = a
    return out


def _run(prog: pf.Program, sizes: dict[str, int], args: dict[str, np.ndarray], monkeypatch, flags: str = "",
         **options: object) -> tuple[dict[str, np.ndarray], str]:
    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, flags)
    exe = pf.compile(prog, target="c", params=sizes, threads=2, **options)
    mine = {n: a.copy() for n, a in args.items()}
    exe(**mine)
    return {n: mine[n] for n in prog.arguments if prog.arrays[n].role == "output"}, exe.code.text


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that any two NaNs match (a NaN's payload is not part of the contract)."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def _compiler_has_avx512() -> bool:
    done = subprocess.run([cpu.compiler(), "-march=native", "-dM", "-E", "-x", "c", "-"], input="", capture_output=True,
                          text=True, check=False)
    return "__AVX512F__" in done.stdout


def test_the_guard_follows_the_compiler_and_the_flag(monkeypatch):
    """``PF_EXPLICIT_SIMD`` is 1 exactly where the compiler targets AVX-512 (GCC), and ``-DPF_EXPLICIT_SIMD=0`` turns it off:
    where it is 1, the explicit loops below are compiled and run, not only printed."""
    text = ("#include <stdint.h>\n" + c_vector.VECTOR_HELPERS + c_lanes.LANE_HELPERS
            + "int polyfuse_lanes_probe(void) { return PF_EXPLICIT_SIMD; }\n")
    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, "")
    gcc = "clang" not in subprocess.run([cpu.compiler(), "--version"], capture_output=True, text=True).stdout
    assert cpu.load_library(text).polyfuse_lanes_probe() == int(_compiler_has_avx512() and gcc)
    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, "-DPF_EXPLICIT_SIMD=0")
    assert cpu.load_library(text).polyfuse_lanes_probe() == 0


@pytest.mark.parametrize("d", [1, 7, 16, 37, 129])
def test_exp_loops_are_bit_for_bit_the_scalar_build(monkeypatch, d):
    prog, sizes = _exp_chain(), {"R": 64, "D": d}
    args = _inputs(prog, sizes, d)
    vector, text = _run(prog, sizes, args, monkeypatch)
    scalar, _ = _run(prog, sizes, args, monkeypatch, "-DPF_EXPLICIT_SIMD=0")
    if d >= 16:  # (shorter rows are whole tiles of rows: no loop along them to vectorise)
        assert "pf_vexp_f32(" in text and f"#if {c_lanes.GUARD}" in text, text
    if d == 129:  # fused into one loop: the temporaries are vectors, b moves with the lane (a vector load)
        assert "pf_vf32 t0_mul_v = " in text and "pf_vload_f32(&b[" in text, text
    assert _same_bits(vector["y"], scalar["y"])
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    np.testing.assert_allclose(vector["y"], want["y"], rtol=2e-6, atol=2.5e-7)  # (exp(..) - 1: an ulp of 1)


@pytest.mark.parametrize("prefetched", [False, True])
@pytest.mark.parametrize("d", [1, 7, 16, 37, 129])
def test_softmax_sums_whole_vectors_and_equals_the_reference(monkeypatch, prefetched, d):
    """The exponentials' loop keeps one vector of partial sums (folded into the scalar, or into the
    prefetching strip's partial results, lane by lane)."""
    if prefetched:  # every array comes from memory: the next-row prefetching strips
        monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 1 << 62))
    prog, sizes = _softmax(), {"R": 33, "D": d}
    rng = np.random.default_rng(d)
    args = {"x": rng.uniform(-30, 30, (33, d)).astype(np.float32), "y": np.zeros((33, d), np.float32)}
    vector, text = _run(prog, sizes, args, monkeypatch)
    if d >= 37:  # (shorter rows: tiles of rows, the sum in its own loop; see the previous test)
        assert "pf_vexp_f32(" in text and "t1_softmax_sum_vsum" in text
        assert ("c1_strip" in text) == prefetched, text
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    tol = 2e-6 * max(8, d)
    np.testing.assert_allclose(vector["y"], want["y"], rtol=tol, atol=tol)
    if prefetched:  # the partial sums follow the scalar strips' order: the same bits
        scalar, _ = _run(prog, sizes, args, monkeypatch, "-DPF_EXPLICIT_SIMD=0")
        assert _same_bits(vector["y"], scalar["y"])


@pytest.mark.parametrize("make, why", [
    (lambda: _softmax(pf.f64), "f64"),
    (_strided_exp, "a strided access"),
    (_tanh, "tanh"),
])
def test_loops_outside_the_explicit_form_stay_scalar(monkeypatch, make, why):
    prog = make()
    sizes = {"R": 9, "D": 37}
    args = _inputs(prog, sizes, 3)
    got, text = _run(prog, sizes, args, monkeypatch)
    assert "pf_vexp_f32(" not in text and c_lanes.GUARD not in text, why
    assert "pf_exp" in text or "pf_tanh" in text
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    for n, a in got.items():
        np.testing.assert_allclose(a, want[n], rtol=1e-5, atol=1e-30)


def test_sums_kept_in_order_stay_scalar(monkeypatch):
    """``reassociate=False``: a sum is never split into lanes (the exponentials alone could be, but the
    loop that sums them is printed as written)."""
    prog, sizes = _softmax(), {"R": 4, "D": 64}
    x = np.random.default_rng(0).uniform(-5, 5, (4, 64)).astype(np.float32)
    got, text = _run(prog, sizes, {"x": x, "y": np.zeros_like(x)}, monkeypatch, reassociate=False)
    assert "_vsum" not in text
    want = {"x": x.copy(), "y": np.zeros_like(x)}
    pf.reference(prog)(**want)
    np.testing.assert_allclose(got["y"], want["y"], rtol=2e-6, atol=1e-12)


@pytest.mark.parametrize("d", [1, 7, 37, 64, 129, 200])
def test_row_maxima_and_minima_run_four_accumulators_bit_for_bit(monkeypatch, d):
    """Four independent vector maxima (minima) per row, folded into the scalar lane by lane: the order of a
    max does not change its value, so the results are the scalar build's and the reference's exactly,
    special values (NaN, infinities, signed zeros) included."""
    prog, sizes = _row_extrema(), {"R": 33, "D": d}
    args = _inputs(prog, sizes, d)
    vector, text = _run(prog, sizes, args, monkeypatch)
    if d >= 64:
        assert f"t0_max_v{'max'}{c_lanes.UNROLL - 1} = PF_VMAXLANE_f32(" in text, text
        assert f"t1_min_vmin{c_lanes.UNROLL - 1} = PF_VMINLANE_f32(" in text, text
    scalar, _ = _run(prog, sizes, args, monkeypatch, "-DPF_EXPLICIT_SIMD=0")
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    for name in ("y", "z"):
        assert _same_bits(vector[name], scalar[name]), name
        assert _same_bits(vector[name], want[name]), name


@pytest.mark.parametrize("d", [1, 7, 37, 64, 129, 200])
def test_row_sums_run_four_accumulators_within_the_reassociation_tolerance(monkeypatch, d):
    prog, sizes = _row_sum_of_squares(), {"R": 33, "D": d}
    rng = np.random.default_rng(d)
    args = {"x": rng.uniform(-3, 3, (33, d)).astype(np.float32), "y": np.zeros((33, d), np.float32)}
    vector, text = _run(prog, sizes, args, monkeypatch)
    if d >= 64:
        assert f"t1_sum_vsum{c_lanes.UNROLL - 1} = t1_sum_vsum{c_lanes.UNROLL - 1} + t0_mul_v;" in text, text
        assert "pf_vexp_f32(" not in text.split("void lanes_sum_of_squares_kernel")[1]
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    tol = 2e-7 * max(8, d)  # (a sum of d positive terms, reassociated: a few ulps per term at most)
    np.testing.assert_allclose(vector["y"], want["y"], rtol=tol, atol=0)
    exact, text = _run(prog, sizes, args, monkeypatch, reassociate=False)
    assert "_vsum" not in text and "_vmax" not in text
    np.testing.assert_array_equal(exact["y"], want["y"])


@pytest.mark.parametrize("d", [1, 7, 37, 64, 129, 200])
def test_a_loop_storing_beside_its_maximum_runs_four_accumulators(monkeypatch, d):
    """The stores of each unrolled copy go to its own 16 elements, which its maximum then reads back."""
    prog, sizes = _scaled_softmax(), {"R": 33, "D": d}
    rng = np.random.default_rng(d)
    args = {"x": rng.uniform(-6, 6, (33, d)).astype(np.float32), "s": rng.uniform(-2, 2, (33, d)).astype(np.float32),
            "p": np.zeros((33, d), np.float32)}
    got, text = _run(prog, sizes, args, monkeypatch)
    if d >= 64:
        assert "t1_softmax_max_vmax3 = PF_VMAXLANE_f32(" in text and "pf_vstore_f32(&t0_mul[" in text, text
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    tol = 2e-6 * max(8, d)
    np.testing.assert_allclose(got["p"], want["p"], rtol=tol, atol=tol)
