"""C target: register micro-tiles for contractions (``schedule/tiling/microtile.py``, ``codegen/c_micro.py``).

Every test runs the generated code against the reference interpreter (or numpy for graphs), at sizes that
are not multiples of the register tile (6 or 8 rows x 2 or 3 vectors of lanes) nor of the cache tiles, so the
remainder paths run too.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from types import MappingProxyType

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as K
from polyfuse.schedule.tiling.microtile import MICROTILE_MARK, MicroTile

M, Kd, N, B = pf.params("M K N B")


def _matmul(dtype=pf.f32) -> pf.Program:
    g = pf.Graph("mm")
    a = g.input("a", (M, Kd), dtype)
    b = g.input("b", (Kd, N), dtype)
    return g.build(c=a @ b)


def _marks(sched: pf.Schedule) -> list[MicroTile]:
    found: list[MicroTile] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == MICROTILE_MARK:
            found.append(node.mark_get_id().user)
        return True

    sched.tree.get_root().foreach_descendant_top_down(visit)
    return found


def test_matmul_gets_a_register_tile_with_its_initialisation_hoisted():
    prog = _matmul()
    sched = pf.schedule(prog, target="c", params={"M": 64, "K": 64, "N": 64})
    (mark,) = _marks(sched)
    s1 = prog.statement(mark.statement)
    # c[i0, i2] += a[i0, i1] * b[i1, i2]: rows i0, lanes i2 (c and b contiguous), reduction i1
    assert (mark.rows, mark.lane, mark.reduction) == (s1.iterators[0], s1.iterators[2], s1.iterators[1])
    # the zero-initialisation is no guard inside the k loop: its accumulators start from zero in the first
    # k tile (tiling/init_fold.py; tests/test_init_fold.py)
    assert [k.statements for k in sched.kernels] == [("S0", "S1")]
    text = pf.codegen(sched).text
    assert "PF_VFMA_f32" in text and "acc_5_1" in text
    assert "pack2[" in text  # b's k x NR panel is packed once per lane strip (b is access 2 of S1)
    assert "S1 | S0: fused: kernel0: S0 initialises S1's elements and runs inside its tiles" in sched.explain()


@pytest.mark.parametrize("sizes", [(1, 1, 1), (7, 37, 129), (129, 7, 37), (37, 129, 7), (61, 300, 50),
                                   (203, 517, 37),  # several row and k cache tiles, the last ones partial
                                   (13, 29, 61)])  # every remainder: single rows; a vector, half one, lanes
@pytest.mark.parametrize("dtype", [pf.f32, pf.f64])
def test_matmul_remainders_match_numpy(sizes, dtype):
    m, k, n = sizes
    rng = np.random.default_rng(m * 100 + n)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype.numpy)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype.numpy)
    c = np.full((m, n), np.nan, dtype.numpy)
    pf.compile(_matmul(dtype), target="c", params={"M": m, "K": k, "N": n})(a=a, b=b, c=c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-5 * k if dtype == pf.f32 else 1e-12 * k
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


def test_symbolic_sizes_use_the_register_tile_too():
    prog = _matmul()
    exe = pf.compile(prog, target="c")  # size-generic code
    rng = np.random.default_rng(1)
    for m, k, n in [(5, 3, 17), (13, 40, 33)]:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        c = np.zeros((m, n), np.float32)
        exe(a=a, b=b, c=c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


def test_exact_without_reassociation_matches_the_reference_bit_for_bit():
    sizes = {"N": 37, "M": 45, "K": 29}
    sched = pf.schedule(K.gemm, target="c", params=sizes, reassociate=False)
    assert _marks(sched)
    assert "PF_VFMA" not in pf.codegen(sched).text.split("void ")[-1]  # no fused multiply-add in the body
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (37, 29)).astype(np.float32)
    b = rng.uniform(-1, 1, (29, 45)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (37, 45)).astype(np.float32)
    got, want = c0.copy(), c0.copy()
    pf.compile(K.gemm, target="c", params=sizes, reassociate=False)(A=a, B=b, C=got, alpha=1.5, beta=0.5)
    pf.reference(K.gemm)(A=a, B=b, C=want, alpha=1.5, beta=0.5)
    np.testing.assert_array_equal(got, want)


def test_gemm_with_scalars_matches_the_reference():
    sizes = {"N": 37, "M": 45, "K": 29}
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (37, 29)).astype(np.float32)
    b = rng.uniform(-1, 1, (29, 45)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (37, 45)).astype(np.float32)
    got, want = c0.copy(), c0.copy()
    pf.compile(K.gemm, target="c", params=sizes)(A=a, B=b, C=got, alpha=1.5, beta=0.5)
    pf.reference(K.gemm)(A=a, B=b, C=want, alpha=1.5, beta=0.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * 29)


def test_batched_matmul_and_mlp_chain_match_numpy():
    g = pf.Graph("mlp")
    x = g.input("x", (M, Kd), pf.f32)
    w1 = g.input("w1", (Kd, N), pf.f32)
    b1 = g.input("b1", (N,), pf.f32)
    w2 = g.input("w2", (N, Kd), pf.f32)
    prog = g.build(y=pf.ops.relu(x @ w1 + b1) @ w2)
    sizes = {"M": 19, "K": 23, "N": 41}
    rng = np.random.default_rng(3)
    xv, w1v, b1v, w2v = (rng.uniform(-1, 1, s).astype(np.float32) for s in [(19, 23), (23, 41), (41,), (41, 23)])
    y = np.zeros((19, 23), np.float32)
    sched = pf.schedule(prog, target="c", params=sizes, fusion="min")  # (smart fuses work this small)
    assert len(_marks(sched)) == 2
    pf.compile(prog, target="c", params=sizes, fusion="min")(x=xv, w1=w1v, b1=b1v, w2=w2v, y=y)
    np.testing.assert_allclose(y, np.maximum(xv @ w1v + b1v, 0) @ w2v, rtol=1e-4, atol=1e-4)

    g = pf.Graph("bmm")
    p = g.input("p", (B, M, Kd), pf.f32)
    q = g.input("q", (B, Kd, N), pf.f32)
    prog = g.build(r=p @ q)
    sizes = {"B": 3, "M": 13, "K": 9, "N": 35}
    pv = rng.uniform(-1, 1, (3, 13, 9)).astype(np.float32)
    qv = rng.uniform(-1, 1, (3, 9, 35)).astype(np.float32)
    r = np.zeros((3, 13, 35), np.float32)
    assert _marks(pf.schedule(prog, target="c", params=sizes))
    pf.compile(prog, target="c", params=sizes)(p=pv, q=qv, r=r)
    np.testing.assert_allclose(r, pv @ qv, rtol=1e-4, atol=1e-5)


def test_explicit_tile_sizes_keep_the_plain_tiling():
    sched = pf.schedule(_matmul(), target="c", params={"M": 64, "K": 64, "N": 64}, tile=(16, 16, 16))
    assert not _marks(sched)


def _np_conv(x, w, padding, stride):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    pad = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, f, oh, ow))
    for r in range(kh):
        for s in range(kw):
            win = pad[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,fc->nfhw", win, w[:, :, r, s])
    return out


@pytest.mark.parametrize("padding, stride", [(1, 1), (0, 1), (2, 2)])
def test_conv2d_matches_numpy(padding, stride):
    g = pf.Graph("conv")  # concrete sizes (a stride needs them)
    x = g.input("x", (2, 5, 9, 37), pf.f32)
    w = g.input("w", (13, 5, 3, 3), pf.f32)
    prog = g.build(y=pf.ops.relu(pf.ops.conv2d(x, w, padding=padding, stride=stride)))
    sizes: dict[str, int] = {}
    sched = pf.schedule(prog, target="c", params=sizes)
    if stride == 1:  # the output row is the lane: contiguous in the (padded) input too
        (mark,) = _marks(sched)
        assert len(mark.inner) == 2  # the 3 x 3 window runs inside the register tile, around the channels
    rng = np.random.default_rng(padding)
    xv = rng.uniform(-1, 1, (2, 5, 9, 37)).astype(np.float32)
    wv = rng.uniform(-1, 1, (13, 5, 3, 3)).astype(np.float32)
    want = np.maximum(_np_conv(xv, wv, padding, stride), 0)
    y = np.zeros(want.shape, np.float32)
    pf.compile(prog, target="c", params=sizes)(x=xv, w=wv, y=y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_the_window_runs_inside_the_channel_loop_only_where_sums_may_be_reordered():
    """With ``reassociate`` (the default) the register tile runs the 3 x 3 window inside the channel loop
    (``c`` outermost: each step walks the input row by row and the weights contiguously); with
    ``reassociate=False`` each output sums its terms in source order, window outside, and equals the
    reference interpreter bit for bit."""
    g = pf.Graph("conv_order")
    x = g.input("x", (1, 5, 9, 37), pf.f32)
    w = g.input("w", (13, 5, 3, 3), pf.f32)
    prog = g.build(y=pf.ops.conv2d(x, w, padding=1))
    rng = np.random.default_rng(7)
    xv = rng.uniform(-1, 1, (1, 5, 9, 37)).astype(np.float32)
    wv = rng.uniform(-1, 1, (13, 5, 3, 3)).astype(np.float32)
    for reassociate in (True, False):
        exe = pf.compile(prog, target="c", params={}, reassociate=reassociate)
        (mark,) = _marks(exe.schedule)
        assert len(mark.inner) == 2
        text = exe.code.text
        tile = text[text.index("acc_0_0 = "):].splitlines()
        bounds = [int(re.search(r"<= (\d+);", line).group(1)) for line in tile if line.strip().startswith("for (int64_t")][:3]
        assert bounds == ([4, 2, 2] if reassociate else [2, 2, 4]), (reassociate, bounds)  # channels: 0..4, window: 0..2
        y = np.zeros((1, 13, 9, 37), np.float32)
        exe(x=xv, w=wv, y=y)
        if reassociate:
            np.testing.assert_allclose(y, _np_conv(xv, wv, 1, 1), rtol=1e-4, atol=1e-4)
        else:
            want = np.zeros_like(y)
            pf.reference(prog)(x=xv, w=wv, y=want)
            np.testing.assert_array_equal(y, want)


def test_a_long_channel_reduction_keeps_the_window_outside_the_register_tile():
    """The window moves inside the register tile only where the channel sum fits one k tile: a k tile
    loop outside the window would change the order of each output's terms."""
    from polyfuse.schedule.tiling.tile_shapes import reduction_tile
    kc = reduction_tile(4)
    c = kc + 44  # (more channels than one k tile holds, on this machine)
    g = pf.Graph("conv_wide")
    x = g.input("x", (1, c, 4, 21), pf.f32)
    w = g.input("w", (9, c, 3, 3), pf.f32)
    prog = g.build(y=pf.ops.conv2d(x, w, padding=1))
    (mark,) = _marks(pf.schedule(prog, target="c", params={}))
    assert mark.inner == () and mark.k_tile == kc
    rng = np.random.default_rng(5)
    xv = rng.uniform(-1, 1, (1, c, 4, 21)).astype(np.float32)
    wv = rng.uniform(-1, 1, (9, c, 3, 3)).astype(np.float32)
    y = np.zeros((1, 9, 4, 21), np.float32)
    pf.compile(prog, target="c", params={})(x=xv, w=wv, y=y)
    np.testing.assert_allclose(y, _np_conv(xv, wv, 1, 1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name, sizes", [("covariance", {"N": 31, "M": 27}), ("covariance", {"N": 7, "M": 45}),
                                         ("correlation", {"N": 29, "M": 37}), ("syrk", {"N": 37, "M": 29}),
                                         ("syr2k", {"N": 45, "M": 131})])
def test_triangular_contractions_get_register_tiles_and_match_gcc(name, sizes):
    """covariance's ``for j >= i`` and syrk's ``j <= i``: the lanes of a row group that every row has run
    as register tiles, each row's others one at a time (a loop over the group's rows: MR copies of those
    scalar edges cost gcc more time than the tiles, syr2k 1.1 -> 0.8 s); syrk's ``A[j][k]``, strided along the lane, is
    gathered into a panel per strip. Checked against gcc's build of the source (odd sizes: every
    remainder; syr2k: two k tiles)."""
    from pathlib import Path

    from tests.c_oracle import check_against_gcc

    source = Path(__file__).parent / "kernels" / f"{name}.c"
    prog = pf.from_c(str(source), defines=sizes)
    text = pf.codegen(pf.schedule(prog, target="c")).text  # size-generic: no tiny-work shortcut
    assert "_lo = " in text and "PF_VFMA_f64" in text
    assert "r_ += 1" in text  # each row's own lanes: one loop over the group's rows, not a copy per row
    rng = np.random.default_rng(len(name))
    n, m = sizes["N"], sizes["M"]
    if name == "covariance":
        args = {"data": rng.uniform(-1, 1, (n, m)), "cov": np.zeros((m, m)), "mean": np.zeros(m), "float_n": float(n)}
    elif name == "correlation":
        args = {"data": rng.uniform(-1, 1, (n, m)), "corr": np.zeros((m, m)), "mean": np.zeros(m), "stddev": np.zeros(m),
                "float_n": float(n)}
    else:
        args = {"C": rng.uniform(-1, 1, (n, n)), "A": rng.uniform(-1, 1, (n, m)), "alpha": 1.5, "beta": 1.2}
        if name == "syr2k":
            args["B"] = rng.uniform(-1, 1, (n, m))
    check_against_gcc(source, f"kernel_{name}", args, defines=sizes, program=prog, rtol=1e-12, atol=1e-12)


@pf.program
def _matmul_nt(A: pf.f32[M, Kd], W: pf.f32[N, Kd], C: pf.f32[M, N]):
    for i in range(M):
        for j in range(N):
            C[i, j] = 0.0
            for k in range(Kd):
                C[i, j] += A[i, k] * W[j, k]



@pytest.mark.parametrize("m, n", [(130, 45), (67, 101), (131, 17)])  # (enough updates that the tile counts)
def test_a_reduction_whose_range_moves_with_the_row_gets_a_register_tile(m, n):
    """symm's ``C[k][j] += alpha * B[i][j] * A[i][k]`` for ``i > k``: each row of a tile sums over its own
    range of ``i``; the range all rows share runs as the register tile, each row's own before and after it
    one row at a time (every element still sums in order of ``i``). Against gcc's build of the source,
    and bit for bit against the reference without reassociation."""
    from pathlib import Path

    from tests.c_oracle import check_against_gcc

    source = Path(__file__).parent / "kernels" / "symm.c"
    prog = pf.from_c(str(source), defines={"M": m, "N": n})
    sched = pf.schedule(prog, target="c", params={"m": m, "n": n})
    text = pf.codegen(sched).text
    assert any(t.statement == "S1" for t in _marks(sched)) and "_lo = " in text and "PF_VFMA_f64" in text
    rng = np.random.default_rng(m)
    args = {"alpha": 1.5, "beta": 1.2, "C": rng.uniform(-1, 1, (m, n)), "A": rng.uniform(-1, 1, (m, m)),
            "B": rng.uniform(-1, 1, (m, n))}
    check_against_gcc(source, "kernel_symm", args, defines={"M": m, "N": n}, rtol=1e-10, atol=1e-10)
    exact = pf.compile(prog, target="c", params={"m": m, "n": n}, reassociate=False)
    assert "_lo = " in exact.code.text
    got = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    want = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    exact(**got, m=m, n=n)
    pf.reference(prog)(**want, m=m, n=n)
    np.testing.assert_array_equal(got["C"], want["C"])

@pytest.mark.parametrize("sizes", [(13, 300, 61), (64, 40, 37)])
def test_a_weight_read_across_the_lanes_is_gathered_per_strip(sizes):
    """``C = A @ W.T`` (a linear layer's weight, [out, in]): ``W[j, k]`` moves a whole row per lane, so each
    strip gathers its ``k x NR`` panel lane by lane and the register tile reads it as vectors."""
    m, k, n = sizes
    sched = pf.schedule(_matmul_nt, target="c", params={"M": m, "K": k, "N": n}, fusion="min")
    assert _marks(sched) and "gather2[" in pf.codegen(sched).text
    rng = np.random.default_rng(k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    c = pf.compile(_matmul_nt, target="c", params={"M": m, "K": k, "N": n}, fusion="min")(A=a, W=w)
    np.testing.assert_allclose(c, a.astype(np.float64) @ w.T, rtol=1e-5 * k, atol=1e-5 * k)


@pytest.mark.parametrize("vbytes, registers, full_width, lanes, itemsize, nr", [
    (64, 32, False, 56, 4, 3),  # a conv row of 56 floats: 48 lanes in three vectors, not 32 in two
    (64, 32, False, 256, 4, 2),  # a matmul's lane tile of 256: two vectors leave nothing over
    (64, 32, False, 220, 8, 3),  # PolyBench gemm MEDIUM's 220 doubles: 4 left over, not 12
    (64, 32, False, 56, 8, 2),  # a tie (8 left over either way) keeps two
    (32, 16, False, 56, 4, 2),  # 16 registers cannot hold 6 x 3 accumulators
    (64, 32, False, 0, 4, 2),  # an unknown lane count
    # 512-bit vectors at full width (Intel): 6 rows of four vectors, or three or two where they fit better
    (64, 32, True, 256, 4, 4),
    (64, 32, True, 0, 4, 4),
    (64, 32, True, 56, 4, 3),  # the conv row: 48 + 8 lanes
    (64, 32, True, 220, 8, 3),  # 4 left over, not 28
    (64, 32, True, 48, 8, 3),  # none left over with three vectors or two: the wider
    (32, 16, True, 56, 4, 2),  # (no AVX-512: the 16-register rule)
])
def test_vectors_of_lanes_that_fit_the_lane_loop(monkeypatch, vbytes, registers, full_width, lanes, itemsize, nr):
    from polyfuse.schedule.tiling import tile_shapes
    monkeypatch.setattr(tile_shapes, "vector_bytes", lambda: vbytes)
    monkeypatch.setattr(tile_shapes, "vector_registers", lambda: registers)
    monkeypatch.setattr(tile_shapes, "full_width_vector_units", lambda: full_width)
    assert tile_shapes.lane_vectors(lanes, itemsize) == nr


@pytest.mark.parametrize("full_width", [False, True])
def test_the_conv_row_of_56_gets_three_vectors_on_avx512(monkeypatch, full_width):
    from polyfuse.schedule.tiling import tile_shapes
    monkeypatch.setattr(tile_shapes, "vector_bytes", lambda: 64)
    monkeypatch.setattr(tile_shapes, "vector_registers", lambda: 32)
    monkeypatch.setattr(tile_shapes, "full_width_vector_units", lambda: full_width)
    g = pf.Graph("conv56")
    x = g.input("x", (1, 4, 3, 56), pf.f32)
    w = g.input("w", (5, 4, 3, 3), pf.f32)
    (mark,) = _marks(pf.schedule(g.build(y=pf.ops.conv2d(x, w, padding=1)), target="c", params={}))
    assert (mark.mr, mark.nr) == (8, 3)  # (24 accumulators either way: six rows only with four vectors)


@pytest.mark.parametrize("sizes", [(7, 37, 129), (13, 1100, 61), (64, 520, 64)])
@pytest.mark.parametrize("dtype", [pf.f32, pf.f64])
def test_full_width_register_tiles_match_numpy(monkeypatch, sizes, dtype):
    """6 x 4 vector register tiles and the doubled reduction tile print and run right on any machine:
    every lane and row remainder, and reductions longer than one (doubled) reduction tile."""
    from polyfuse.schedule.tiling import tile_shapes
    monkeypatch.setattr(tile_shapes, "full_width_vector_units", lambda: True)
    m, k, n = sizes
    rng = np.random.default_rng(m + k + n)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype.numpy)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype.numpy)
    exe = pf.compile(_matmul(dtype), target="c", params={"M": m, "K": k, "N": n})
    (mark,) = _marks(exe.schedule)
    assert mark.nr in (2, 3, 4) and mark.k_tile == tile_shapes.reduction_tile(np.dtype(dtype.numpy).itemsize)
    c = exe(a=a, b=b)
    tol = 1e-5 * k if dtype == pf.f32 else 1e-12 * k
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("sizes", [(16, 8, 50), (7, 37, 129), (37, 129, 7), (13, 29, 61), (19, 33, 107)])
@pytest.mark.parametrize("dtype", [pf.f32, pf.f64])
def test_three_vector_register_tiles_match_numpy(monkeypatch, sizes, dtype):
    """Whatever this machine's registers, three vectors per row print and run right: every lane remainder
    (a vector, half of one, single lanes) after the three-vector strips, and every row remainder."""
    from polyfuse.schedule.tiling import tile_shapes
    monkeypatch.setattr(tile_shapes, "lane_vectors", lambda lanes, itemsize, wide=None: 3)
    m, k, n = sizes
    prog = _matmul(dtype)
    sched = pf.schedule(prog, target="c", params={"M": m, "K": k, "N": n})
    assert [mark.nr for mark in _marks(sched)] == [3]
    assert "3 * PF_VL_" in pf.codegen(sched).text
    rng = np.random.default_rng(m + n)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype.numpy)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype.numpy)
    c = np.full((m, n), np.nan, dtype.numpy)
    pf.compile(prog, target="c", params={"M": m, "K": k, "N": n})(a=a, b=b, c=c)
    tol = 1e-5 * k if dtype == pf.f32 else 1e-12 * k
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)


def test_three_vector_conv_matches_numpy(monkeypatch):
    from polyfuse.schedule.tiling import tile_shapes
    monkeypatch.setattr(tile_shapes, "lane_vectors", lambda lanes, itemsize, wide=None: 3)
    g = pf.Graph("conv3v")
    x = g.input("x", (1, 5, 6, 61), pf.f32)
    w = g.input("w", (11, 5, 3, 3), pf.f32)
    prog = g.build(y=pf.ops.relu(pf.ops.conv2d(x, w, padding=1)))
    sched = pf.schedule(prog, target="c", params={})
    assert [mark.nr for mark in _marks(sched)] == [3]
    rng = np.random.default_rng(3)
    xv = rng.uniform(-1, 1, (1, 5, 6, 61)).astype(np.float32)
    wv = rng.uniform(-1, 1, (11, 5, 3, 3)).astype(np.float32)
    y = np.zeros((1, 11, 6, 61), np.float32)
    pf.compile(prog, target="c", params={})(x=xv, w=wv, y=y)
    np.testing.assert_allclose(y, np.maximum(_np_conv(xv, wv, 1, 1), 0), rtol=1e-4, atol=1e-4)


def _doitgen(sizes: dict[str, int]):
    from tests.kernels import BY_NAME

    k = BY_NAME["doitgen"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    return k, prog, pf.schedule(prog, target="c", params={p: sizes[p.upper()] for p in prog.params})


@pytest.mark.parametrize("sizes", [{"NQ": 40, "NR": 50, "NP": 60}, {"NQ": 140, "NR": 150, "NP": 160}])
def test_doitgen_gets_a_row_less_register_tile(sizes):
    """``sum[p] += A[r][q][s] * C4[s][p]`` has no rows member: its rows are the host loops ``r, q`` (``sum``
    is reused by each). One row per launch: accumulators for four vectors of ``p`` over the ``s`` loop, the
    broadcast ``A[r][q][s]`` (PolyBench MEDIUM: 1.27 -> 0.43 ms, LARGE 147 -> 54 ms on one thread). At
    MEDIUM the launch is too small for the team, and still gets the tile."""
    _, prog, sched = _doitgen(sizes)
    (mark,) = _marks(sched)
    assert (mark.statement, mark.rows, mark.nr, mark.mr) == ("S1", None, 4, 1)
    text = pf.codegen(sched).text
    assert "acc_0_3 = PF_VFMA_f64(" in text and "acc_1_0" not in text


@pytest.mark.parametrize("sizes", [{"NQ": 2, "NR": 3, "NP": 37}, {"NQ": 3, "NR": 1, "NP": 9}, {"NQ": 1, "NR": 2, "NP": 161}])
@pytest.mark.parametrize("flags", ["", "-DPF_MASKED_TAILS=0"])
def test_row_less_register_tiles_equal_gccs_build(sizes, flags, monkeypatch):
    """doitgen against gcc's build of its source, at sizes leaving every lane remainder (a vector, then a
    masked one on AVX-512; or half of one and single lanes) and a partial ``k`` tile (161 > 128)."""
    from polyfuse.runtime import cpu
    from tests.c_oracle import check_against_gcc
    from tests.kernels import inputs

    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, flags)

    k, prog, sched = _doitgen(sizes)
    assert [m.rows for m in _marks(sched)] == [None]
    kernel = dataclasses.replace(k, sizes=MappingProxyType(sizes))
    args = dict(inputs(kernel))
    want = check_against_gcc(k.path, k.function, args, defines=k.defines, assume=k.assume)
    got = {n: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for n, v in args.items()}
    params = {p: sizes[p.upper()] for p in prog.params}
    pf.compile(prog, target="c", params=params)(**{n: got[n] for n in prog.arguments}, **params)
    for name in ("A", "sum"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


def test_a_row_sum_is_no_row_less_contraction():
    """``s[i] += x[i][j]`` (a softmax's row sum) reads ``x`` a row apart along its lane: not a vector-matrix
    product, no register tile (the row kernels have their own shapes)."""
    g = pf.Graph("rowsum")
    x = g.input("x", (64, 300), pf.f32)
    prog = g.build(s=pf.ops.sum(x, axis=1))
    assert not _marks(pf.schedule(prog, target="c", params={}))


@pytest.mark.parametrize("m, k, n, mc", [(1024, 64, 1024, 512), (1000, 37, 1029, 504), (1100, 7, 1030, 368), (300, 5, 33, 80)])
def test_rows_of_equal_work_are_cut_into_equal_tiles_of_at_most_512(m: int, k: int, n: int, mc: int, monkeypatch) -> None:
    """At known sizes, where nothing above the rows runs in parallel, a rectangular contraction's rows are
    cut into the fewest tiles of at most 512 rows, all equal and each a whole number of register-row
    groups (1000 rows: two of 504; 1100: three of 368), so that the threads get equal work. Where the lane
    tiles alone are too few to occupy the threads (33 lanes: one tile), there are at least as many row
    tiles as two per core ask (300 rows on 2 cores: four of 80). The compiled code, with its remainders in
    every dimension, computes what numpy computes."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    tile_shapes = importlib.import_module("polyfuse.schedule.tiling.tile_shapes")
    monkeypatch.setattr(tile_shapes, "cache_sizes", lambda: (32 * 1024, 1 << 20))
    monkeypatch.setattr(tile_shapes, "register_rows", lambda nr=2: 8)
    M, K, N = pf.params("M K N")
    g = pf.Graph("mm")
    prog = g.build(y=g.input("x", (M, K), pf.f32) @ g.input("w", (K, N), pf.f32))
    exe = pf.compile(prog, target="c", params={"M": m, "K": k, "N": n})
    tiled = [kern for kern in exe.schedule.kernels if kern.tile_sizes]
    assert tiled and tiled[0].tile_sizes[0] == mc, [kern.tile_sizes for kern in exe.schedule.kernels]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(exe(x, w), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_the_full_width_tile_is_for_rectangular_contractions_with_packed_panels(monkeypatch):
    """Where 512-bit vectors run at full width, a matmul takes six rows of four vectors and twice the
    reduction tile (four times with an L2 of 2 MiB or more); syrk (its lanes move with the row, its lane operand is gathered per strip) keeps the
    narrower tile, whose panels fit L1."""
    from polyfuse.schedule.tiling import tile_shapes
    from tests.kernels import BY_NAME
    monkeypatch.setattr(tile_shapes, "vector_bytes", lambda: 64)
    monkeypatch.setattr(tile_shapes, "vector_registers", lambda: 32)
    monkeypatch.setattr(tile_shapes, "full_width_vector_units", lambda: True)
    monkeypatch.setattr(tile_shapes, "cache_sizes", lambda: (48 << 10, 1 << 20))
    (mark,) = _marks(pf.schedule(_matmul(), target="c", params={"M": 200, "K": 700, "N": 256}))
    assert (mark.mr, mark.nr, mark.k_tile) == (6, 4, 512)
    monkeypatch.setattr(tile_shapes, "cache_sizes", lambda: (48 << 10, 2 << 20))
    (mark,) = _marks(pf.schedule(_matmul(), target="c", params={"M": 200, "K": 1500, "N": 256}))
    assert (mark.mr, mark.nr, mark.k_tile) == (6, 4, 1024)
    k = BY_NAME["syrk"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    marks = _marks(pf.schedule(prog, target="c", params={p: 300 for p in prog.params}))
    assert marks and all(m.mr == 8 and m.nr in (2, 3) and m.k_tile == 128 for m in marks)


def _masked_and_strips(monkeypatch, build, run):
    """``run(exe)`` -> outputs, for the program ``build()`` compiled with the masked tails (the default where
    GCC targets AVX-512) and with ``-DPF_MASKED_TAILS=0`` (half a vector, then one lane at a time)."""
    from polyfuse.runtime import cpu

    out = []
    for flags in ("", "-DPF_MASKED_TAILS=0"):
        monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, flags)
        exe = build()
        assert "#if PF_MASKED_TAILS" in exe.code.text and "PF_LANE_MASK(" in exe.code.text
        out.append(run(exe))
    return out


@pytest.mark.parametrize("case", ["matmul f32 13x29x61", "matmul f64 7x37x129", "symbolic f32 37x129x7",
                                  "gathered 13x300x61", "exact gemm 37x45x29", "syrk 37x29", "syr2k 45x131"])
def test_masked_tails_equal_the_strips_bit_for_bit(monkeypatch, case):
    """The lanes left after the strips of whole vectors run as one vector masked to them on AVX-512
    (``RegisterTile._tails``) where other machines run half a vector and single lanes: each lane still sums
    its terms in the same order with the same (fused) operations, so both builds give the same bits, and
    numpy's or gcc's results. A masked strip's gathered panel repeats its last lane past the end of the
    row (``_gather``): syrk's and the gathered ``W[j, k]`` at widths that leave 1-15 lanes."""
    rng = np.random.default_rng(len(case))
    kind, shape = case.rsplit(" ", 1)
    dims = [int(v) for v in shape.split("x")]
    if kind in ("syrk", "syr2k"):
        from pathlib import Path

        from tests.c_oracle import check_against_gcc

        n, m = dims
        source = Path(__file__).parent / "kernels" / f"{kind}.c"
        prog = pf.from_c(str(source), defines={"N": n, "M": m})
        args = {"C": rng.uniform(-1, 1, (n, n)), "A": rng.uniform(-1, 1, (n, m)), "B": rng.uniform(-1, 1, (n, m)),
                "alpha": 1.5, "beta": 1.2}
        if kind == "syrk":
            del args["B"]
        got = _masked_and_strips(monkeypatch, lambda: pf.compile(prog, target="c"),
                                 lambda exe: exe(**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}))
        np.testing.assert_array_equal(got[0], got[1])
        monkeypatch.delenv("POLYFUSE_CFLAGS", raising=False)
        check_against_gcc(source, f"kernel_{kind}", args, defines={"N": n, "M": m}, program=prog, rtol=1e-12, atol=1e-12)
        return
    m, k, n = dims
    if kind == "exact gemm":
        sizes = {"N": m, "M": n, "K": k}
        a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
        c0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
        got = _masked_and_strips(monkeypatch, lambda: pf.compile(K.gemm, target="c", params=sizes, reassociate=False),
                                 lambda exe: exe(A=a, B=b, C=c0.copy(), alpha=1.5, beta=0.5))
        want = c0.copy()
        pf.reference(K.gemm)(A=a, B=b, C=want, alpha=1.5, beta=0.5)
        np.testing.assert_array_equal(got[0], want)  # (no reassociation: the reference's bits)
        np.testing.assert_array_equal(got[1], want)
        return
    dtype = pf.f64 if "f64" in kind else pf.f32
    a = rng.uniform(-1, 1, (m, k)).astype(dtype.numpy)
    if kind == "gathered":
        w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
        got = _masked_and_strips(monkeypatch, lambda: pf.compile(_matmul_nt, target="c", params={"M": m, "K": k, "N": n}, fusion="min"),
                                 lambda exe: exe(A=a, W=w))
        want = a.astype(np.float64) @ w.T.astype(np.float64)
    else:
        b = rng.uniform(-1, 1, (k, n)).astype(dtype.numpy)
        params = None if kind.startswith("symbolic") else {"M": m, "K": k, "N": n}
        got = _masked_and_strips(monkeypatch, lambda: pf.compile(_matmul(dtype), target="c", params=params),
                                 lambda exe: exe(a=a, b=b, c=np.full((m, n), np.nan, dtype.numpy)))
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(got[0], got[1])
    tol = 1e-5 * k if dtype == pf.f32 else 1e-12 * k
    np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol)
