"""C target: a contraction's initialisation runs inside its tiles (``schedule/tiling/init_fold.py``).

``X = 0; X += a * b`` used to run as two kernels, the first a pass over all of ``X``. With the sizes known,
the initialisation moves into the contraction's kernel, and where its value is a constant the micro-kernel
starts its accumulators from it in the call that holds each element's first term (the initialisation is
then not printed at all). Every test runs the code against numpy or the reference interpreter, with the
outputs filled with NaN first, at sizes that are not multiples of the tiles, and with several reduction
tiles (only the first may start from the constant).
"""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.schedule.tiling.init_fold import FOLDED_INIT_MARK

M, Kd, N, B = pf.params("M K N B")


def _matmul(dtype=pf.f32) -> pf.Program:
    g = pf.Graph("mm")
    a, b = g.input("a", (M, Kd), dtype), g.input("b", (Kd, N), dtype)
    return g.build(c=a @ b)


def _run_matmul(m: int, k: int, n: int, dtype=pf.f32) -> tuple[pf.Executable, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m + 10 * k + 100 * n)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype.numpy)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype.numpy)
    c = np.full((m, n), np.nan, dtype.numpy)
    exe = pf.compile(_matmul(dtype), target="c", params={"M": m, "K": k, "N": n})
    exe(a=a, b=b, c=c)
    return exe, c, a.astype(np.float64) @ b.astype(np.float64)


def test_the_zero_initialisation_joins_the_contraction_kernel_and_is_not_printed():
    exe, c, want = _run_matmul(64, 64, 64)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert [k.statements for k in exe.schedule.kernels] == [("S0", "S1")]
    text = exe.code.text
    assert "/* S0 */" not in text  # no pass writing zeros: the accumulators start from 0
    assert "acc_0_0 = pf_vset_f32(0.0f);" in text
    assert "S0 (the initialisation of S1) runs inside the tiles of S1's kernel" in exe.schedule.explain()


@pytest.mark.parametrize("sizes", [(1, 1, 1), (7, 37, 129), (129, 7, 37), (37, 129, 7),
                                   (203, 600, 37),  # three reduction tiles: only the first starts from zero
                                   (13, 29, 61)])
@pytest.mark.parametrize("dtype", [pf.f32, pf.f64])
def test_folded_matmuls_match_numpy_at_odd_sizes(sizes, dtype):
    exe, c, want = _run_matmul(*sizes, dtype)
    k = sizes[1]
    tol = 1e-5 * k if dtype == pf.f32 else 1e-12 * k
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)
    assert len(exe.schedule.kernels) == 1


def test_several_reduction_tiles_load_the_partial_sums_after_the_first():
    exe, c, want = _run_matmul(40, 2100, 70)  # (K over every machine's Kc: 1024 at most)
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
    text = exe.code.text
    assert "== 0) {" in text and "pf_vload_f32(&c[" in text  # zero in the first k tile, the sums after it


def test_an_empty_reduction_keeps_its_own_initialisation():
    # K = 0: no update touches c, so the initialisation has no tile to run in and stays a kernel of its own
    exe, c, _ = _run_matmul(5, 0, 9)
    np.testing.assert_array_equal(c, np.zeros((5, 9), np.float32))
    assert [k.statements for k in exe.schedule.kernels][0] == ("S0",)


def test_symbolic_sizes_keep_the_initialisation_apart():
    # at unknown sizes K may be 0 (every element initialised, none updated): nothing moves
    sched = pf.schedule(_matmul(), target="c")
    assert [k.statements for k in sched.kernels] == [("S0",), ("S1",)]


@pf.program
def bias_start(x: pf.f32[M, Kd], w: pf.f32[Kd, N], bias: pf.f32[N], y: pf.f32[M, N]):
    for i in range(M):
        for j in range(N):
            y[i, j] = bias[j]
    for i in range(M):
        for k in range(Kd):
            for j in range(N):
                y[i, j] += x[i, k] * w[k, j]


def test_an_initialisation_that_reads_an_array_moves_but_is_printed():
    sizes = {"M": 37, "K": 300, "N": 45}
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (37, 300)).astype(np.float32)
    w = rng.uniform(-1, 1, (300, 45)).astype(np.float32)
    bias = rng.uniform(-1, 1, 45).astype(np.float32)
    y = np.full((37, 45), np.nan, np.float32)
    exe = pf.compile(bias_start, target="c", params=sizes)
    exe(x=x, w=w, bias=bias, y=y)
    np.testing.assert_allclose(y, bias + x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    assert [k.statements for k in exe.schedule.kernels] == [("S0", "S1")]
    assert "bias[" in exe.code.text and "/* S0 */" in exe.code.text  # (its value is no constant: it runs)


@pf.program
def read_in_between(x: pf.f32[M, Kd], w: pf.f32[Kd, N], y: pf.f32[M, N], z: pf.f32[M, N]):
    for i in range(M):
        for j in range(N):
            y[i, j] = 1.0
    for i in range(M):
        for j in range(N):
            z[i, j] = y[i, j] * 2.0  # reads the initial value: the initialisation cannot move past it
    for i in range(M):
        for k in range(Kd):
            for j in range(N):
                y[i, j] += x[i, k] * w[k, j]


def test_a_read_of_the_initial_values_keeps_the_initialisation_where_it_is():
    sizes = {"M": 19, "K": 33, "N": 40}
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (19, 33)).astype(np.float32)
    w = rng.uniform(-1, 1, (33, 40)).astype(np.float32)
    exe = pf.compile(read_in_between, target="c", params=sizes)
    y, z = np.full((19, 40), np.nan, np.float32), np.full((19, 40), np.nan, np.float32)
    exe(x=x, w=w, y=y, z=z)
    y_want, z_want = np.zeros_like(y), np.zeros_like(z)
    pf.reference(read_in_between)(x=x, w=w, y=y_want, z=z_want, **sizes)
    np.testing.assert_allclose(y, y_want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(z, np.full_like(z, 2.0))
    assert not any("S0" in k.statements and "S2" in k.statements for k in exe.schedule.kernels)


@pytest.mark.parametrize("shape", [(1, 3, 7, 9, 5), (2, 5, 13, 6, 17)])
def test_a_folded_convolution_matches_numpy(shape):
    n, c, h, w_, f = shape
    g = pf.Graph("conv")
    x, w = g.input("x", (n, c, h, w_)), g.input("w", (f, c, 3, 3))
    prog = g.build(y=pf.ops.relu(pf.ops.conv2d(x, w, padding=1)))
    rng = np.random.default_rng(sum(shape))
    xv = rng.uniform(-1, 1, (n, c, h, w_)).astype(np.float32)
    wv = rng.uniform(-1, 1, (f, c, 3, 3)).astype(np.float32)
    exe = pf.compile(prog, target="c", params={})
    y = exe(x=xv, w=wv)
    xp = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((n, f, h, w_))
    for i in range(3):
        for j in range(3):
            want += np.einsum("fc,nchw->nfhw", wv[:, :, i, j], xp[:, :, i:i + h, j:j + w_])
    np.testing.assert_allclose(y, np.maximum(want, 0), rtol=1e-4, atol=1e-4)


def test_batched_scores_fold_per_head():
    H, S, E = pf.params("H S E")
    g = pf.Graph("scores")
    q, k = g.input("q", (H, S, E)), g.input("k", (H, S, E))
    prog = g.build(s=q @ pf.ops.transpose(k, (0, 2, 1)))
    rng = np.random.default_rng(5)
    qv, kv = (rng.uniform(-1, 1, (3, 37, 19)).astype(np.float32) for _ in range(2))
    exe = pf.compile(prog, target="c", params={"H": 3, "S": 37, "E": 19})
    got = exe(q=qv, k=kv)
    np.testing.assert_allclose(got, qv.astype(np.float64) @ kv.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    assert any(len(k.statements) == 2 for k in exe.schedule.kernels)


def test_the_printer_keeps_the_initialisation_where_a_micro_kernel_does_not_print(monkeypatch):
    # every micro-kernel of the update falls back to plain loops: the initialisation must run
    from polyfuse.codegen import c as c_printer

    monkeypatch.setattr(c_printer, "microtile_lines", lambda *args: None)
    exe, c, want = _run_matmul(23, 41, 30)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert "/* S0 */" in exe.code.text


def test_the_mark_names_the_update():
    sched = pf.schedule(_matmul(), target="c", params={"M": 16, "K": 16, "N": 16})
    found = []

    def visit(node) -> bool:
        if node.get_type() == node.get_type().mark and node.mark_get_id().get_name() == FOLDED_INIT_MARK:
            found.append(node.mark_get_id().user)
        return True

    sched.tree.get_root().foreach_descendant_top_down(visit)
    assert found == ["S1"]
