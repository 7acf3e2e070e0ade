"""numpy-style methods of graph tensors (issue 13): ``.T``, reductions as methods, ``reshape``,
``transpose`` and affine indexing; each checked against numpy through the compiled program."""

import warnings

import numpy as np
import pytest

import polyfuse as pf


def compiled(g, **outputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pf.PolyfuseWarning)
        return pf.compile(g.build(**outputs), target="c")


def test_methods_on_symbolic_shapes():
    R, D = pf.params("R D")
    g = pf.Graph("methods")
    x, w = g.input("x", (R, D)), g.input("w", (D, D))
    exe = compiled(g, y=(x @ w.T).sum(axis=1), z=x[1:R - 1].max(axis=0), m=x.mean(axis=1, keepdims=True),
                   n=x.transpose().min(axis=1))
    rng = np.random.default_rng(0)
    xv, wv = rng.uniform(0.5, 1.5, (6, 4)).astype(np.float32), rng.uniform(0.5, 1.5, (4, 4)).astype(np.float32)
    y, z, m, n = exe(xv, wv)
    np.testing.assert_allclose(y, (xv @ wv.T).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(z, xv[1:5].max(axis=0))
    np.testing.assert_allclose(m, xv.mean(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(n, xv.T.min(axis=1))


def test_indexing_and_reshape_on_constant_shapes():
    g = pf.Graph("views")
    a = g.input("a", (4, 6))
    assert [e.constant for e in a[1, 2:5].shape] == [3] and [e.constant for e in a.reshape(2, 12).shape] == [2, 12]
    exe = compiled(g, b=a[-1, 1::2].sum(), c=a[:, -2:] * 2.0, d=a.reshape((6, 4)).T)
    av = np.random.default_rng(1).uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    b, c, d = exe(av)
    np.testing.assert_allclose(b, av[-1, 1::2].sum(), rtol=1e-5)
    np.testing.assert_allclose(c, av[:, -2:] * 2)
    np.testing.assert_allclose(d, av.reshape(6, 4).T)


@pytest.mark.parametrize("index, message", [
    (0.5, "only ints and slices"), ((0, 0, 0), "3 indices for a tensor of shape"),
    (slice(0, 4, -1), "positive int step"), (9, "out of range"),
])
def test_bad_indices(index, message):
    g = pf.Graph("bad")
    a = g.input("a", (4, 6))
    with pytest.raises(pf.ShapeError, match=message):
        a[index]


def test_where_comparisons_and_concat():
    R, D = pf.params("R D")
    g = pf.Graph("select")
    x, y, z = g.input("x", (R, D)), g.input("y", (R, D)), g.input("z", (R, 2))
    exe = compiled(g, a=pf.ops.where(x > 0.5, x, 0.1 * x), b=pf.ops.concat([x, y, z], axis=1),
                   c=pf.ops.concat([x, y]), d=(x <= y) * 1.0, e=pf.ops.equal(x, x))
    rng = np.random.default_rng(2)
    xv, yv, zv = (rng.uniform(0, 1, s).astype(np.float32) for s in ((3, 4), (3, 4), (3, 2)))
    a, b, c, d, e = exe(xv, yv, zv)
    np.testing.assert_allclose(a, np.where(xv > 0.5, xv, 0.1 * xv))
    np.testing.assert_array_equal(b, np.concatenate([xv, yv, zv], axis=1))
    np.testing.assert_array_equal(c, np.concatenate([xv, yv]))
    np.testing.assert_array_equal(d, (xv <= yv).astype(np.float32))
    np.testing.assert_array_equal(e, np.ones_like(xv))
    with pytest.raises(pf.ShapeError, match=r"concat: \(R, 2\) does not match \(R, D\) off axis 0"):
        pf.ops.concat([x, z])
