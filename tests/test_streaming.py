"""C target: a band whose tiles would reuse nothing the cache does not keep anyway (an elementwise chain,
a broadcast bias row) is left untiled, one contiguous block of rows per thread, with its innermost loop
whole (not collapsed into the OpenMP loop, so that it vectorises); a band with real reuse or a strided
access (a transpose) keeps its tiles. Results are checked against the reference interpreter at odd sizes."""

from __future__ import annotations

import importlib
import re

import islpy as isl
import numpy as np

import polyfuse as pf

streaming = importlib.import_module("polyfuse.schedule.tiling.streaming")

R, D = pf.params("R D")


@pf.program
def bias_chain(x: pf.f32[R, D], b: pf.f32[D], y: pf.f32[R, D]):
    for i in range(R):
        for j in range(D):
            y[i, j] = pf.exp(x[i, j] + b[j]) * 0.5


@pf.program
def transpose(x: pf.f32[R, D], y: pf.f32[D, R]):
    for i in range(R):
        for j in range(D):
            y[j, i] = x[i, j] + 1.0


@pf.program
def big_broadcast(x: pf.f32[R, D], z: pf.f32[D, D], y: pf.f32[R, D]):
    for i in range(R):
        for j in range(D):
            y[i, j] = x[i, j] + z[j, j]


def _kernel_tiles(sched: pf.Schedule) -> list[tuple[int, ...]]:
    return [k.tile_sizes for k in sched.kernels]


def _check(prog: pf.Program, sizes: dict[str, int]) -> str:
    exe = pf.compile(prog, target="c", params=sizes)
    rng = np.random.default_rng(3)
    args = {a.name: rng.uniform(-1, 1, a.concrete_shape(sizes)).astype(np.float32)
            for a in prog.arrays.values() if a.role == "input"}
    outs = {a.name: np.zeros(a.concrete_shape(sizes), np.float32) for a in prog.arrays.values() if a.role == "output"}
    want = {k: v.copy() for k, v in outs.items()}
    exe(**args, **outs)
    pf.reference(prog)(**args, **want)
    for name, got in outs.items():
        np.testing.assert_allclose(got, want[name], rtol=2e-6, atol=1e-6)
    return exe.code.text


def test_an_elementwise_chain_with_a_bias_row_is_not_tiled():
    sizes = {"R": 129, "D": 37}
    sched = pf.schedule(bias_chain, target="c", params=sizes)
    assert _kernel_tiles(sched) == [()]
    assert any("not tiled" in note for note in sched.notes), sched.notes
    text = _check(bias_chain, sizes)
    pragmas = [ln for ln in text.splitlines() if "#pragma omp parallel for" in ln]
    assert pragmas and not any("collapse" in p for p in pragmas)  # the inner loop stays whole
    assert re.search(r"for \(int64_t c1 = 0; c1 <= 36; c1 \+= 1\)", text), text


def test_a_transpose_and_a_large_reused_array_keep_their_tiles():
    sizes = {"R": 129, "D": 257}
    for prog in (transpose, big_broadcast):
        sched = pf.schedule(prog, target="c", params=sizes)
        assert all(t for t in _kernel_tiles(sched)), (prog.name, _kernel_tiles(sched))
        _check(prog, sizes)


def test_too_few_rows_for_the_threads_keeps_the_tiles():
    """With 2 rows and many columns the OpenMP loop over rows alone would starve threads: tiles stay."""
    sched = pf.schedule(bias_chain, target="c", params={"R": 2, "D": 8192})
    assert all(t for t in _kernel_tiles(sched))


def test_streams_needs_contiguous_or_invariant_inner_accesses():
    tree = pf.schedule(transpose, target="c", params={"R": 64, "D": 64}, tile=None).tree
    node = tree.get_root()
    while node.get_type() != isl.schedule_node_type.band:
        node = node.child(0)
    assert not streaming.streams(transpose, node, {"R": 64, "D": 64}, 1 << 18)
    node = pf.schedule(bias_chain, target="c", params={"R": 64, "D": 64}, tile=None).tree.get_root()
    while node.get_type() != isl.schedule_node_type.band:
        node = node.child(0)
    assert streaming.streams(bias_chain, node, {"R": 64, "D": 64}, 1 << 18)
