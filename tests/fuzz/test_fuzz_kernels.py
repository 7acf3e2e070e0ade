"""Differential fuzzing of the C kernel shapes: random contractions (matmul chains, batched matmuls,
convolutions, with epilogues) and random row reductions (softmax, layernorm, sums and maxima feeding
elementwise work), at random small sizes that are rarely multiples of the register tile, compiled for C
and compared with the reference interpreter (float64 programs: the reassociated reductions and fused
multiply-adds stay far inside the tolerance).

CI runs ``FUZZ_KERNELS_CI_N`` examples per generator (default 12, derandomized); ``make fuzz`` runs
``FUZZ_N // 20`` of each.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polyfuse as pf
from polyfuse import ops

CI_N = int(os.environ.get("FUZZ_KERNELS_CI_N", "12"))
FULL_N = max(1, int(os.environ.get("FUZZ_N", "2000")) // 20)
_common = dict(deadline=None, database=None, print_blob=True, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EPILOGUES = ("none", "bias", "relu", "bias_relu", "scale")


def _epilogue(kind: str, t, g: pf.Graph, n):
    if kind in ("bias", "bias_relu"):
        t = t + g.input("bias", (n,), pf.f64)
    if kind in ("relu", "bias_relu"):
        t = ops.relu(t)
    if kind == "scale":
        t = t * 0.5
    return t


@st.composite
def contractions(draw):
    kind = draw(st.sampled_from(["matmul", "chain", "batched", "conv"]))
    epi = draw(st.sampled_from(EPILOGUES))
    dim = st.integers(1, 41)
    g = pf.Graph("fuzz_contraction")
    if kind == "conv":
        n, c, h, w, f = draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(3, 11)), draw(st.integers(3, 40)), draw(st.integers(1, 14))
        x = g.input("x", (n, c, h, w), pf.f64)
        k = g.input("w", (f, c, 3, 3), pf.f64)
        y = ops.conv2d(x, k, padding=draw(st.integers(0, 1)))
        y = ops.relu(y) if epi in ("relu", "bias_relu") else y
    elif kind == "batched":
        b, m, k_, n = draw(st.integers(1, 3)), draw(dim), draw(dim), draw(dim)
        y = _epilogue(epi, g.input("a", (b, m, k_), pf.f64) @ g.input("b", (b, k_, n), pf.f64), g, n)
    elif kind == "chain":
        m, k_, n, p = draw(dim), draw(dim), draw(dim), draw(dim)
        t = _epilogue(epi, g.input("a", (m, k_), pf.f64) @ g.input("b", (k_, n), pf.f64), g, n)
        y = t @ g.input("c", (n, p), pf.f64)
    else:
        m, k_, n = draw(dim), draw(dim), draw(dim)
        y = _epilogue(epi, g.input("a", (m, k_), pf.f64) @ g.input("b", (k_, n), pf.f64), g, n)
    return g.build(y=y), draw(st.sampled_from(["smart", "min", "max"])), draw(st.booleans())


@st.composite
def row_reductions(draw):
    r, d = draw(st.integers(1, 9)), draw(st.integers(1, 70))
    batch = draw(st.booleans())
    shape = (draw(st.integers(1, 3)), r, d) if batch else (r, d)
    g = pf.Graph("fuzz_rows")
    dtype = draw(st.sampled_from([pf.f64, pf.f32]))  # (f32 rows with exp: the explicit vectors, c_lanes.py)
    x = g.input("x", shape, dtype)
    pre = draw(st.sampled_from(["none", "scale", "exp", "add"]))
    if pre == "scale":
        x = x * 0.25
    elif pre == "exp":
        x = ops.exp(x * 0.1)
    elif pre == "add":
        x = x + g.input("z", shape, dtype)
    op = draw(st.sampled_from(["softmax", "layernorm", "sum", "max", "centered"]))
    if op == "softmax":
        y = ops.softmax(x, axis=-1)
    elif op == "layernorm":
        y = ops.layernorm(x, eps=1e-5)
    elif op == "sum":
        y = ops.sum(x, axis=-1) * 2.0
    elif op == "max":
        y = ops.max(x, axis=-1)
    else:
        y = x - ops.sum(x, axis=-1, keepdims=True) * (1.0 / d)
    return g.build(y=y), draw(st.sampled_from(["smart", "min", "max"])), draw(st.booleans())


def _check(prog: pf.Program, fusion: str, reassociate: bool, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    args = {}
    for name in prog.arguments:
        arr = prog.arrays[name]
        shape = arr.concrete_shape({})
        args[name] = (rng.uniform(-1, 1, shape) if arr.role != "output" else np.zeros(shape)).astype(arr.dtype.numpy)
    want = {k: v.copy() for k, v in args.items()}
    pf.reference(prog)(**want)
    pf.compile(prog, target="c", fusion=fusion, reassociate=reassociate, params={})(**args)
    for name in prog.arguments:
        # f32: an ulp or two of exp, and a reassociated row of up to 70 values
        tol = 1e-9 if prog.arrays[name].dtype is pf.f64 else 5e-6
        np.testing.assert_allclose(args[name], want[name], rtol=tol, atol=tol, err_msg=f"{prog.name}: {name}")


@settings(max_examples=CI_N, **_common)
@given(contractions())
def test_contractions_match_the_reference(case):
    _check(*case)


@settings(max_examples=CI_N, **_common)
@given(row_reductions())
def test_row_reductions_match_the_reference(case):
    _check(*case)


@pytest.mark.slow
@settings(max_examples=FULL_N, **{**_common, "derandomize": False})
@given(st.one_of(contractions(), row_reductions()))
def test_kernels_full(case):
    _check(*case)
