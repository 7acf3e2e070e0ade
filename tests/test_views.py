"""``pf.ops`` views (reshape, permute, expand, slice_axis, select, squeeze, unsqueeze) and the operators added
for PyTorch models (silu, erf-form gelu, log_softmax, rms_norm, batch_norm), checked against numpy through
the reference interpreter (no torch needed); the fusion-relevant property: a view adds no statement."""

from __future__ import annotations

import math

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops

RNG = np.random.default_rng(3)


def _run(prog, **inputs):
    outs = {n: np.zeros(prog.arrays[n].concrete_shape({}), np.float32) for n in prog.arguments if prog.arrays[n].role == "output"}
    pf.reference(prog)(**inputs, **outs)
    return outs


def test_views_read_their_base_without_statements():
    g = pf.Graph("views")
    x = g.input("x", (2, 6, 8))
    split = ops.permute(ops.reshape(x, (2, 6, 2, 4)), (0, 2, 1, 3))        # (2, 2, 6, 4): a view
    row = ops.expand(ops.reshape(ops.select(ops.slice_axis(x, 2, 2, 6), 1, 0), (2, 1, 1, 4)), (2, 2, 6, 4))
    y = ops.squeeze(ops.unsqueeze(split * 2.0 + row, 1), 1)
    prog = g.build(y=y)
    # mul, add, and the copy into y (the output itself is a view); the seven views add no statement
    assert [s.text.split(" = ")[1].split("(")[0] for s in prog.statements] == ["mul", "add", "t1_add"]
    xv = RNG.standard_normal((2, 6, 8)).astype(np.float32)
    want = xv.reshape(2, 6, 2, 4).transpose(0, 2, 1, 3) * 2 + xv[:, 0, 2:6].reshape(2, 1, 1, 4)
    np.testing.assert_allclose(_run(prog, x=xv)["y"], want, rtol=1e-6)


def test_merging_reshape_is_an_affine_copy():
    g = pf.Graph("merge")
    x = g.input("x", (3, 4, 5))
    prog = g.build(y=ops.reshape(ops.permute(x, (1, 0, 2)), (12, 5)) + 1.0)
    copy = next(s for s in prog.statements if "reshape" in s.text)
    assert "floor" not in str(copy.accesses[copy.target].relation) and "mod" not in str(copy.accesses[copy.target].relation)
    xv = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(_run(prog, x=xv)["y"], xv.transpose(1, 0, 2).reshape(12, 5) + 1, rtol=1e-6)


def test_new_operators_match_numpy():
    g = pf.Graph("nn_ops")
    x, w = g.input("x", (5, 7)), g.input("w", (7,))
    m, v, z = g.input("m", (3,)), g.input("v", (3,)), g.input("z", (2, 3, 4))
    prog = g.build(silu=ops.silu(x), gelu=ops.gelu(x, approximate="none"), lsm=ops.log_softmax(x, axis=-1),
                   rms=ops.rms_norm(x, w, eps=1e-6), bn=ops.batch_norm(z, m, v, eps=1e-5))
    xv, wv = RNG.standard_normal((5, 7)).astype(np.float32), RNG.standard_normal(7).astype(np.float32)
    mv, vv, zv = RNG.standard_normal(3).astype(np.float32), RNG.uniform(0.5, 1.5, 3).astype(np.float32), RNG.standard_normal((2, 3, 4)).astype(np.float32)
    got = _run(prog, x=xv, w=wv, m=mv, v=vv, z=zv)
    x64 = xv.astype(np.float64)
    erf = np.vectorize(math.erf)
    want = {
        "silu": x64 / (1 + np.exp(-x64)),
        "gelu": 0.5 * x64 * (1 + erf(x64 / math.sqrt(2))),
        "lsm": x64 - x64.max(-1, keepdims=True) - np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1, keepdims=True)),
        "rms": x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * wv,
        "bn": (zv - mv[:, None]) / np.sqrt(vv[:, None] + 1e-5),
    }
    for k, ref in want.items():
        np.testing.assert_allclose(got[k], ref, rtol=2e-5, atol=2e-6, err_msg=k)


@pytest.mark.parametrize("build, message", [
    (lambda x: ops.reshape(x, (5, 5)), "cannot reshape"),
    (lambda x: ops.permute(x, (0, 0)), "not a permutation"),
    (lambda x: ops.expand(x, (4, 3)), "cannot be broadcast"),
    (lambda x: ops.select(x, 0, 9), "out of range"),
])
def test_view_errors(build, message):
    g = pf.Graph("bad")
    with pytest.raises(pf.ShapeError, match=message):
        build(g.input("x", (4, 6)))
