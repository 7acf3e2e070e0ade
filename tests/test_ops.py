"""Every ``pf.ops`` operator and every benchmark workload, compiled for C and compared against numpy; the
CUDA code of each operator compiles with nvcc (no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.workloads import WORKLOADS, np_gelu, np_layernorm, np_softmax
from polyfuse import ops
from polyfuse.codegen.cuda import generate_cuda

R, D = pf.params("R D")
SIZES = {"R": 37, "D": 29}
RNG = np.random.default_rng(1)


def _x(shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


# name -> (build(g) -> {output: tensor}, inputs {name: (shape, lo, hi)}, numpy(**inputs) -> {output: value})
CASES = {
    "add": (lambda g, x, y: ops.add(x, y), lambda x, y: x + y),
    "sub": (lambda g, x, y: ops.sub(x, y), lambda x, y: x - y),
    "mul": (lambda g, x, y: ops.mul(x, y), lambda x, y: x * y),
    "div": (lambda g, x, y: ops.div(x, ops.add(ops.mul(y, y), 1.0)), lambda x, y: x / (y * y + 1)),
    "maximum": (lambda g, x, y: ops.maximum(x, y), np.maximum),
    "exp": (lambda g, x, y: ops.exp(x), lambda x, y: np.exp(x)),
    "log": (lambda g, x, y: ops.log(ops.mul(x, x) + 0.5), lambda x, y: np.log(x * x + 0.5)),
    "tanh": (lambda g, x, y: ops.tanh(x), lambda x, y: np.tanh(x)),
    "sigmoid": (lambda g, x, y: ops.sigmoid(x), lambda x, y: 1 / (1 + np.exp(-x))),
    "relu": (lambda g, x, y: ops.relu(x), lambda x, y: np.maximum(x, 0)),
    "gelu": (lambda g, x, y: ops.gelu(x), lambda x, y: np_gelu(x)),
    "sqrt": (lambda g, x, y: ops.sqrt(x * x), lambda x, y: np.abs(x)),
    "rsqrt": (lambda g, x, y: ops.rsqrt(x * x + 1.0), lambda x, y: 1 / np.sqrt(x * x + 1)),
    "broadcast_row": (lambda g, x, y: x + g.input("b", (D,)), None),
    "operators": (lambda g, x, y: (2.0 - x) * y / 3.0 + 1.0 - -y, lambda x, y: (2 - x) * y / 3 + 1 + y),
    "sum_axis0": (lambda g, x, y: ops.sum(x, axis=0), lambda x, y: x.sum(0)),
    "sum_all": (lambda g, x, y: ops.sum(x), lambda x, y: np.asarray(x.astype(np.float64).sum())),
    "max_keepdims": (lambda g, x, y: ops.max(x, axis=-1, keepdims=True), lambda x, y: x.max(-1, keepdims=True)),
    "mean": (lambda g, x, y: ops.mean(x, axis=1), lambda x, y: x.mean(1)),
    "softmax": (lambda g, x, y: ops.softmax(x, axis=-1), lambda x, y: np_softmax(x.astype(np.float64))),
    "softmax_axis0": (lambda g, x, y: ops.softmax(x, axis=0), lambda x, y: np_softmax(x.astype(np.float64), axis=0)),
    "layernorm": (lambda g, x, y: ops.layernorm(x, eps=1e-5), lambda x, y: np_layernorm(x.astype(np.float64), 1.0, 0.0)),
    "transpose": (lambda g, x, y: ops.transpose(x), lambda x, y: x.T),
    "matmul": (lambda g, x, y: x @ ops.transpose(y), lambda x, y: x.astype(np.float64) @ y.T),
}


def _program(name: str) -> pf.Program:
    g = pf.Graph(name)
    x, y = g.input("x", (R, D)), g.input("y", (R, D))
    return g.build(out=CASES[name][0](g, x, y))


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_numpy(name: str) -> None:
    prog = _program(name)
    x, y = _x((37, 29)), _x((37, 29))
    args = {"x": x, "y": y}
    if "b" in prog.arrays:
        args["b"] = _x((29,))
        expected = x + args["b"]
    else:
        expected = CASES[name][1](x, y)
    out = np.zeros(prog.arrays["out"].concrete_shape(SIZES), np.float32)
    pf.compile(prog, target="c")(**args, out=out)
    np.testing.assert_allclose(out, np.asarray(expected, np.float32), rtol=2e-4, atol=2e-5)


def test_batched_matmul_broadcasts_batch_dims() -> None:
    g = pf.Graph("bmm")
    a, b = g.input("a", (3, 1, 5, 4)), g.input("b", (2, 4, 6))
    prog = g.build(c=a @ b)
    assert prog.arrays["c"].concrete_shape({}) == (3, 2, 5, 6)
    av, bv, c = _x((3, 1, 5, 4)), _x((2, 4, 6)), np.zeros((3, 2, 5, 6), np.float32)
    pf.compile(prog, target="c")(a=av, b=bv, c=c)
    np.testing.assert_allclose(c, av @ bv, rtol=1e-4, atol=1e-5)


def test_matvec_and_vecmat() -> None:
    g = pf.Graph("mv")
    a, v = g.input("a", (5, 4)), g.input("v", (4,))
    u = g.input("u", (5,))
    prog = g.build(y=a @ v, z=u @ a)
    av, vv, uv = _x((5, 4)), _x((4,)), _x((5,))
    y, z = np.zeros(5, np.float32), np.zeros(4, np.float32)
    pf.compile(prog, target="c")(a=av, v=vv, u=uv, y=y, z=z)
    np.testing.assert_allclose(y, av @ vv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(z, uv @ av, rtol=1e-4, atol=1e-5)


def _np_conv(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,fchw->nf", patch, w)
    return out + (b[None, :, None, None] if b is not None else 0)


@pytest.mark.parametrize("stride,pad,bias", [(1, 0, False), (1, 1, True), (2, 1, False)])
def test_conv2d(stride: int, pad: int, bias: bool) -> None:
    g = pf.Graph("conv")
    x, w = g.input("x", (2, 3, 9, 8)), g.input("w", (4, 3, 3, 3))
    b = g.input("b", (4,)) if bias else None
    prog = g.build(y=ops.conv2d(x, w, b, stride=stride, padding=pad))
    xv, wv = _x((2, 3, 9, 8)), _x((4, 3, 3, 3))
    args = {"x": xv, "w": wv}
    bv = _x((4,)) if bias else None
    if bias:
        args["b"] = bv
    expected = _np_conv(xv.astype(np.float64), wv, bv, stride, pad)
    y = np.zeros(expected.shape, np.float32)
    pf.compile(prog, target="c")(**args, y=y)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_conv2d_symbolic_sizes_with_padding() -> None:
    H, W = pf.params("H W")
    g = pf.Graph("convp")
    x, w = g.input("x", (1, 2, H, W)), g.input("w", (3, 2, 3, 3))
    prog = g.build(y=ops.conv2d(x, w, padding=1))
    xv, wv = _x((1, 2, 6, 7)), _x((3, 2, 3, 3))
    y = np.zeros((1, 3, 6, 7), np.float32)
    pf.compile(prog, target="c")(x=xv, w=wv, y=y)
    np.testing.assert_allclose(y, _np_conv(xv.astype(np.float64), wv, None, 1, 1), rtol=1e-4, atol=1e-4)




@pytest.mark.parametrize("w", WORKLOADS,
                         ids=lambda w: w.name)
def test_workload_matches_numpy(w) -> None:
    prog = w.program()
    sizes = dict(w.test)
    values = w.inputs(prog, sizes)
    expected = w.expected(prog, values, sizes)
    pf.compile(prog, target="c")(**values, **({"T": sizes["T"]} if "T" in sizes else {}))
    for name, e in expected.items():
        np.testing.assert_allclose(values[name], e, rtol=w.rtol, atol=1e-4, err_msg=f"{w.name}: {name}")


def test_every_op_compiles_with_nvcc(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    from tests.test_codegen_cuda import _unit

    variants = []
    for name in sorted(CASES):
        sched = pf.schedule(_program(name), target="cuda")
        variants.append((name, generate_cuda(sched).text))
    src = tmp_path / "ops.cu"
    src.write_text(_unit(variants))
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "ops.ptx"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
