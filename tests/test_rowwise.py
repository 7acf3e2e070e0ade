"""C target: row-wise kernels (``schedule/tiling/rowwise.py``) run one row at a time with the row's reductions in
registers, vectorised with ``omp simd reduction`` when ``reassociate`` allows it; results are checked
against numpy (float64) at sizes that are not multiples of any vector width, and bit for bit against the
reference interpreter with ``reassociate=False``."""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops
from tests.c_oracle import check_against_gcc

R, D, H = pf.params("R D H")


def _softmax() -> pf.Program:
    g = pf.Graph("softmax")
    return g.build(y=ops.softmax(g.input("x", (R, D)), axis=-1))


def _layernorm() -> pf.Program:
    g = pf.Graph("layernorm")
    x, gamma, beta = g.input("x", (R, D)), g.input("gamma", (D,)), g.input("beta", (D,))
    return g.build(y=ops.layernorm(x, gamma, beta, eps=1e-5))


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_layernorm(x, gamma, beta):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta


@pytest.mark.parametrize("r, d", [(1, 1), (7, 37), (37, 129), (3, 1000)])
def test_softmax_and_layernorm_match_numpy(r, d):
    rng = np.random.default_rng(r * 1000 + d)
    x = rng.uniform(-4, 4, (r, d)).astype(np.float32)
    y = np.full_like(x, np.nan)
    pf.compile(_softmax(), target="c", params={"R": r, "D": d})(x=x, y=y)
    np.testing.assert_allclose(y, _np_softmax(x.astype(np.float64)), rtol=1e-5, atol=1e-7)
    gamma, beta = rng.uniform(-1, 1, d).astype(np.float32), rng.uniform(-1, 1, d).astype(np.float32)
    y = np.full_like(x, np.nan)
    pf.compile(_layernorm(), target="c", params={"R": r, "D": d})(x=x, gamma=gamma, beta=beta, y=y)
    np.testing.assert_allclose(y, _np_layernorm(x.astype(np.float64), gamma, beta), rtol=1e-4, atol=1e-4)


def test_rows_run_one_at_a_time_with_register_accumulators():
    code = pf.codegen(pf.schedule(_softmax(), target="c", params={"R": 4096, "D": 1024})).text
    body = code[code.index("void "):]
    assert "t0_softmax_max[" not in body and "t1_softmax_sum[" not in body  # per-row values are scalars
    assert "reduction(max:t0_softmax_max)" in body and "reduction(+:t1_softmax_sum)" in body
    assert body.count("#pragma omp parallel for") + body.count("#pragma omp for ") == 1  # one parallel loop over rows


def test_without_reassociation_sums_keep_the_source_order():
    prog = _layernorm()
    sched = pf.schedule(prog, target="c", params={"R": 5, "D": 77}, reassociate=False)
    assert "reduction(" not in pf.codegen(sched).text  # (a plain ``omp simd`` reorders nothing)
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, (5, 77)).astype(np.float32)
    gamma, beta = rng.uniform(-1, 1, 77).astype(np.float32), rng.uniform(-1, 1, 77).astype(np.float32)
    got, want = np.zeros_like(x), np.zeros_like(x)
    pf.compile(prog, target="c", params={"R": 5, "D": 77}, reassociate=False)(x=x, gamma=gamma, beta=beta, y=got)
    pf.reference(prog)(x=x, gamma=gamma, beta=beta, y=want)
    np.testing.assert_array_equal(got, want)


def test_reassociated_sum_stays_within_a_length_derived_tolerance():
    g = pf.Graph("rowsum")
    x = g.input("x", (R, D), pf.f32)
    prog = g.build(s=ops.sum(x, axis=-1) * 2.0)
    rng = np.random.default_rng(4)
    r, d = 9, 4099
    xv = rng.uniform(-1, 1, (r, d)).astype(np.float32)
    got, want = np.zeros(r, np.float32), np.zeros(r, np.float32)
    pf.compile(prog, target="c", params={"R": r, "D": d})(x=xv, s=got)
    pf.reference(prog)(x=xv, s=want)
    # a reordered float32 sum of d terms errs by about sqrt(d) * eps * sum|x| (twice that allowed); a lost
    # or doubled term (magnitude ~0.5) is far above it
    bound = 2 * np.sqrt(d) * np.finfo(np.float32).eps * np.abs(xv).sum(-1) * 2.0
    assert np.all(np.abs(got - want) <= bound)
    assert bound.max() < 0.1


def test_batched_rows_of_attention_scores():
    g = pf.Graph("heads")
    x = g.input("x", (H, R, D), pf.f32)
    prog = g.build(y=ops.softmax(x * 0.5, axis=-1))
    rng = np.random.default_rng(6)
    xv = rng.uniform(-2, 2, (3, 5, 33)).astype(np.float32)
    y = np.zeros_like(xv)
    pf.compile(prog, target="c", params={"H": 3, "R": 5, "D": 33})(x=xv, y=y)
    np.testing.assert_allclose(y, _np_softmax(xv.astype(np.float64) * 0.5), rtol=1e-5, atol=1e-7)


def test_concrete_sizes_and_attention_after_a_contraction():
    g = pf.Graph("softmax_fixed")  # no size params at all
    x = g.input("x", (64, 129), pf.f32)  # (work enough for threads: tiny work runs in source order)
    prog = g.build(y=ops.softmax(x, axis=-1))
    xv = np.random.default_rng(8).uniform(-3, 3, (64, 129)).astype(np.float32)
    code = pf.codegen(pf.schedule(prog, target="c")).text
    assert "reduction(max:" in code
    y = np.zeros_like(xv)
    pf.compile(prog, target="c")(x=xv, y=y)
    np.testing.assert_allclose(y, _np_softmax(xv.astype(np.float64)), rtol=1e-5, atol=1e-7)

    S, E = pf.params("S E")
    g = pf.Graph("attention")
    q, k = g.input("q", (H, S, E), pf.f32), g.input("k", (H, S, E), pf.f32)
    prog = g.build(p=ops.softmax((q @ ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1))
    sizes = {"H": 3, "S": 37, "E": 13}
    sched = pf.schedule(prog, target="c", params=sizes)
    text = pf.codegen(sched).text
    assert "acc_5_1" in text and "reduction(max:" in text  # scores in a micro-tile, softmax row by row
    rng = np.random.default_rng(10)
    qv, kv = (rng.uniform(-1, 1, (3, 37, 13)).astype(np.float32) for _ in range(2))
    p = np.zeros((3, 37, 37), np.float32)
    pf.compile(prog, target="c", params=sizes)(q=qv, k=kv, p=p)
    want = _np_softmax(np.einsum("hie,hje->hij", qv.astype(np.float64), kv) * 0.125)
    np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-6)


def test_keepdims_reductions_run_once_per_row():
    """rmsnorm written with keepdims (``m[i, 0]``): the per-row statements leave the inner loops, the
    sum gets its simd reduction and the squared values stay per-lane temporaries."""
    g = pf.Graph("rmsnorm")
    x, w = g.input("x", (R, D), pf.f32), g.input("w", (D,), pf.f32)
    prog = g.build(y=x * ops.rsqrt(ops.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w)
    text = pf.codegen(pf.schedule(prog, target="c", params={"R": 64, "D": 256})).text
    assert "reduction(+:" in text and "private(" in text and "== 0" not in text.split("void ")[-1]
    rng = np.random.default_rng(11)
    xv, wv = rng.uniform(-2, 2, (7, 45)).astype(np.float32), rng.uniform(-1, 1, 45).astype(np.float32)
    y = np.zeros_like(xv)
    pf.compile(prog, target="c", params={"R": 7, "D": 45})(x=xv, w=wv, y=y)
    x64 = xv.astype(np.float64)
    np.testing.assert_allclose(y, x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * wv, rtol=1e-5, atol=1e-6)


ROW_RECURRENCE = """
void row_recurrence(int w, int h, double x[w][h], double y[w][h]) {
  int i, j;
  double p1, p2;
#pragma scop
  for (i = 0; i < w; i++) {
    p1 = 0.0;
    p2 = 0.0;
    for (j = FIRST; j STOP; j STEP) {
      y[i][j] = 0.5 * p1 - 0.25 * p2 + x[i][j];
      p2 = p1;
      p1 = y[i][j];
    }
  }
#pragma endscop
}
"""
WALKS = {"upwards": {"FIRST": "0", "STOP": "< h", "STEP": "++"}, "downwards": {"FIRST": "h - 1", "STOP": ">= 0", "STEP": "--"}}


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("w, h", [(1, 1), (7, 5), (9, 37)])
def test_a_recurrence_along_the_row_keeps_its_direction(walk, w, h):
    """A row pass whose scalars carry a recurrence along the row (deriche's anti-causal pass walks each row
    from its end): the row-wise kernel walks the inner loop the way the source does, and keeps its shape
    (one row at a time, untiled) instead of being dropped for an illegal order; results equal gcc's."""
    source = ROW_RECURRENCE
    for macro, text in WALKS[walk].items():
        source = source.replace(macro, text)
    prog = pf.from_c(source)
    sched = pf.schedule(prog, target="c")
    (row_kernel,) = [k for k in sched.kernels if len(k.statements) > 1]
    assert row_kernel.tile_sizes == ()  # the row-wise shape (rows_first), not the fallback's tiles
    rng = np.random.default_rng(w * 100 + h)
    check_against_gcc(source, "row_recurrence", {"x": rng.uniform(-1, 1, (w, h)), "y": np.zeros((w, h))})
