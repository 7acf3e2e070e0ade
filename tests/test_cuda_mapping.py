"""Which loops CUDA maps to threads (``Mapper._cuda_layout``): the innermost parallel loops with more than
one iteration, so that a batch of one or a batch dimension does not take a thread axis, and, at known
sizes, a third mapped loop where the tile search ranks it better (a convolution's filters); results in the
CUDA simulator equal the reference at odd sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.runtime import cuda_sim

B, I, J, L = pf.params("B I J L")


def _conv(n: int, c: int, h: int, w: int, k: int) -> pf.Program:
    g = pf.Graph("conv")
    x = g.input("x", (n, c, h, w), pf.f32)
    f = g.input("w", (k, c, 3, 3), pf.f32)
    return g.build(y=pf.ops.relu(pf.ops.conv2d(x, f, padding=1)))


def _bmm(shape_a, shape_b) -> pf.Program:
    g = pf.Graph("bmm")
    a = g.input("a", shape_a, pf.f32)
    b = g.input("b", shape_b, pf.f32)
    return g.build(y=pf.ops.matmul(a, b))


def _threaded_dims(kernel) -> int:
    return sum(1 for b in kernel.block if b > 1)


def test_a_convolution_of_one_image_maps_filters_rows_and_columns() -> None:
    sched = pf.schedule(_conv(1, 64, 56, 56, 64), target="cuda", params={})
    conv = max(sched.kernels, key=lambda k: len(k.statements))  # (init, update and relu fused)
    assert _threaded_dims(conv) >= 2 and math.prod(conv.grid) >= 132, (conv.grid, conv.block)


def test_a_convolution_without_sizes_maps_two_output_dimensions() -> None:
    n, c, h, w, k = pf.params("N C H W K")
    g = pf.Graph("conv")
    x = g.input("x", (n, c, h, w), pf.f32)
    f = g.input("w", (k, c, 3, 3), pf.f32)
    prog = g.build(y=pf.ops.relu(pf.ops.conv2d(x, f, padding=1)))
    sched = pf.schedule(prog, target="cuda")
    (conv,) = [kk for kk in sched.kernels if any(prog.statement(s).is_reduction for s in kk.statements)]
    assert _threaded_dims(conv) >= 2, (conv.statements, conv.block)  # not the images alone, fused with the padding
    assert "fusion maps one dimension to the GPU's threads where apart the statements map two or more" in sched.explain()


def test_a_batched_matmul_maps_rows_and_columns_with_or_without_sizes() -> None:
    for prog, params in ((_bmm((8, 512, 64), (8, 64, 512)), {}), (_bmm((B, I, L), (B, L, J)), None)):
        (kernel,) = [k for k in pf.schedule(prog, target="cuda", params=params).kernels
                     if any(prog.statement(s).is_reduction for s in k.statements)]  # (after C = 0)
        assert _threaded_dims(kernel) == 2, kernel.block
        assert kernel.microtile is not None and len(kernel.grid) == 3  # the batch on blockIdx.z


@pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")
@pytest.mark.parametrize("shape", [(1, 3, 7, 9, 5), (2, 2, 5, 33, 3)])
def test_convolutions_in_the_simulator_equal_the_reference(shape) -> None:
    prog = _conv(*shape)
    rng = np.random.default_rng(0)
    n, c, h, w, k = shape
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    f = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    got = pf.compile(prog, target="cuda-sim")(x=x, w=f)
    want = np.zeros((n, k, h, w), np.float32)
    pf.reference(prog)(x=x, w=f, y=want)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")
@pytest.mark.parametrize("params", [None, {"B": 3, "I": 7, "J": 33, "L": 5}])
def test_batched_matmuls_in_the_simulator_equal_the_reference(params) -> None:
    prog = _bmm((B, I, L), (B, L, J))
    sizes = {"B": 3, "I": 7, "J": 33, "L": 5}
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 7, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 33)).astype(np.float32)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=params))
    y = np.zeros((3, 7, 33), np.float32)
    values = {**sizes, "a": a, "b": b, "y": y}
    cuda_sim.load(code)(*(values[s.name] for s in code.signature))
    np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-5)
