"""C target: a row-wise kernel's compute-heavy loop prefetches the next row while it computes, strip-mined
into cache-line groups whose reductions keep one partial result per element of the group
(``codegen/c_prefetch.py``). The results equal the reference interpreter's (within the tolerance of a
reassociated sum) at row lengths that leave remainders after the last group (1, 7, 37, 129), in f32 and
f64, for sums, maxima and minima; nothing is prefetched without sizes, for arrays that fit in L2, or where
reductions keep their order. The caches are made small here so that small arrays count as coming from
memory."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops

c_stream = importlib.import_module("polyfuse.codegen.c_stream")
c_prefetch = importlib.import_module("polyfuse.codegen.c_prefetch")

R, D = pf.params("R D")


@pytest.fixture
def small_l2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every array comes from memory (L2 of 0 bytes); no kernel exceeds the last-level cache (no streaming)."""
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 1 << 62))


def _softmax(dtype: pf.DType = pf.f32) -> pf.Program:
    g = pf.Graph(f"softmax_prefetch_{dtype.name}")
    return g.build(y=ops.softmax(g.input("x", (R, D), dtype), axis=-1))


def _layernorm(dtype: pf.DType = pf.f32) -> pf.Program:
    g = pf.Graph(f"layernorm_prefetch_{dtype.name}")
    x, gamma, beta = g.input("x", (R, D), dtype), g.input("gamma", (D,), dtype), g.input("beta", (D,), dtype)
    return g.build(y=ops.layernorm(x, gamma, beta, eps=1e-5))


def _extreme(kind: str) -> pf.Program:
    """A row maximum (minimum) of exponentials, the compute-heavy loop, then a cheap elementwise loop."""
    g = pf.Graph(f"{kind}_prefetch")
    x = g.input("x", (R, D))
    folded = (ops.max if kind == "max" else ops.min)(ops.exp(x), axis=-1, keepdims=True)
    return g.build(y=x - folded)


PROGRAMS = {
    "softmax_f32": lambda: _softmax(),
    "softmax_f64": lambda: _softmax(pf.f64),
    "layernorm_f32": lambda: _layernorm(),
    "layernorm_f64": lambda: _layernorm(pf.f64),
    "max": lambda: _extreme("max"),
    "min": lambda: _extreme("min"),
}


def _check(prog: pf.Program, sizes: dict[str, int], **options: object) -> str:
    exe = pf.compile(prog, target="c", params=sizes, threads=2, **options)
    rng = np.random.default_rng(sizes["D"])
    args = {n: rng.uniform(-3, 3, prog.arrays[n].concrete_shape(sizes)).astype(prog.arrays[n].dtype.numpy)
            for n in prog.arguments}
    args = {n: (np.full_like(a, np.nan) if prog.arrays[n].role == "output" else a) for n, a in args.items()}
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    exe(**args)
    for n in (n for n in prog.arguments if prog.arrays[n].role == "output"):
        f32 = prog.arrays[n].dtype is pf.f32
        tol = (2e-6 if f32 else 1e-14) * max(8, sizes["D"])  # a reassociated row reduction of length D
        np.testing.assert_allclose(args[n], want[n], rtol=tol, atol=tol, err_msg=n)
    return exe.code.text


@pytest.mark.parametrize("d", [1, 7, 37, 129])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_prefetching_rows_equal_the_reference(small_l2, name, d):
    prog = PROGRAMS[name]()
    text = _check(prog, {"R": 48, "D": d})
    if d < 37 or name == "layernorm_f64":
        return  # (short rows are scheduled in tiles of rows; layernorm's f64 loops do too little per byte)
    assert "__builtin_prefetch(&x[(c0 + 1) * D + c1_strip], 0, 3);" in text, text
    lanes = 16 if "f64" not in name else 8
    assert f"c1_strip + {lanes - 1} <= {d - 1}; c1_strip += {lanes})" in text


def test_the_compute_heavy_loop_prefetches_inputs_and_outputs(small_l2):
    """softmax: the exponentials' loop (not the max or the scaling) prefetches ``x`` and ``y``, and its sum
    keeps 16 partial results combined after the loop."""
    text = _check(_softmax(), {"R": 48, "D": 64})
    prefetches = {line.strip() for line in text.splitlines() if "__builtin_prefetch(" in line}
    assert len(prefetches) == 2  # (printed twice: in the explicit vector strips and the scalar ones, c_lanes.py)
    assert "__builtin_prefetch(&y[(c0 + 1) * D + c1_strip], 1, 3);" in text
    strip = text[text.index("c1_strip = 0;"):]
    assert "pf_exp_f32" in strip[:strip.index("#pragma omp simd reduction")]
    assert "float t1_softmax_sum_part[16];" in text
    assert "t1_softmax_sum += t1_softmax_sum_part[pf_lane];" in text


def test_maxima_fold_their_partial_results_without_nan_tests(small_l2):
    text = _check(_extreme("max"), {"R": 48, "D": 40})
    assert "= -INFINITY;" in text and "pf_fmax_lane_f32(" in text
    assert "_part[pf_lane] = pf_fmax_lane_f32(" in text


def test_no_prefetch_where_it_would_not_pay(small_l2, monkeypatch):
    """Not without sizes, not with reductions kept in order (``reassociate=False``: bit for bit the
    reference), not for a memory-bound row kernel (rms_norm's loops do too little per byte), and not
    where the arrays fit in L2."""
    assert "__builtin_prefetch" not in pf.compile(_softmax(), target="c").code.text
    exact = pf.compile(_softmax(), target="c", params={"R": 48, "D": 37}, reassociate=False)
    assert "__builtin_prefetch" not in exact.code.text
    g = pf.Graph("rms_prefetch")
    rms = g.build(y=ops.rms_norm(g.input("x", (R, D)), g.input("g", (D,)), eps=1e-6))
    assert "__builtin_prefetch" not in pf.compile(rms, target="c", params={"R": 48, "D": 64}).code.text
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (1 << 30, 1 << 62))
    assert "__builtin_prefetch" not in pf.compile(_softmax(), target="c", params={"R": 48, "D": 64}).code.text


@pytest.mark.parametrize("kind", ["max", "min"])
def test_order_free_reductions_are_bit_for_bit_the_unprefetched_kernel(small_l2, monkeypatch, kind):
    """A maximum does not depend on the order it is taken in: the strip-mined loop with its partial
    results computes exactly what the plain loop computes."""
    prog = _extreme(kind)
    sizes = {"R": 48, "D": 77}
    x = np.random.default_rng(2).uniform(-3, 3, (48, 77)).astype(np.float32)
    prefetched, plain = np.zeros_like(x), np.zeros_like(x)
    exe = pf.compile(prog, target="c", params=sizes)
    assert "__builtin_prefetch" in exe.code.text
    exe(x=x, y=prefetched)
    monkeypatch.setattr(c_prefetch, "PREFETCH_WORK_PER_BYTE", float("inf"))
    exe = pf.compile(prog, target="c", params=sizes)
    assert "__builtin_prefetch" not in exe.code.text
    exe(x=x, y=plain)
    np.testing.assert_array_equal(prefetched, plain)
