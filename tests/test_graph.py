"""``pf.Graph``: building Programs from tensor operations, shape errors, and the fusion outcome of the
row-wise operators (one kernel each on the C backend, from the general scheduler)."""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.workloads import np_gelu, np_softmax
from polyfuse import ops

R, D = pf.params("R D")


def test_design_example_builds_and_runs() -> None:
    g = pf.Graph("block")
    x, w, b = g.input("x", (R, D), pf.f32), g.input("w", (D, D), pf.f32), g.input("b", (D,), pf.f32)
    prog = g.build(y=pf.ops.softmax(pf.ops.gelu(x @ w + b), axis=-1))
    assert isinstance(prog, pf.Program)
    assert {n: prog.arrays[n].role for n in ("x", "w", "b", "y")} == {"x": "input", "w": "input", "b": "input", "y": "output"}
    assert prog.arguments == ("x", "w", "b", "y")
    assert all(a.role == "temp" for n, a in prog.arrays.items() if n not in ("x", "w", "b", "y"))
    rng = np.random.default_rng(0)
    xv, wv, bv = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((6, 5), (5, 5), (5,)))
    out = np.zeros((6, 5), np.float32)
    pf.compile(prog, target="c")(x=xv, w=wv, b=bv, y=out)
    np.testing.assert_allclose(out, np_softmax(np_gelu(xv.astype(np.float64) @ wv + bv)), rtol=1e-4, atol=1e-6)


def test_reductions_lower_to_init_and_update() -> None:
    g = pf.Graph("red")
    x = g.input("x", (R, D))
    prog = g.build(s=ops.sum(x, axis=1), m=ops.max(x, axis=1))
    texts = [s.text for s in prog.statements]
    assert [s.op for s in prog.statements] == ["=", "+=", "=", "="]
    assert "-inf" in texts[2] and "max(" in texts[3]


def test_output_that_is_an_input_or_repeated_is_copied() -> None:
    g = pf.Graph("copy")
    x = g.input("x", (3,))
    e = ops.exp(x)
    prog = g.build(a=x, b=e, c=e)
    a, b, c = (np.zeros(3, np.float32) for _ in range(3))
    xv = np.array([0.0, 1.0, 2.0], np.float32)
    pf.compile(prog, target="c")(x=xv, a=a, b=b, c=c)
    np.testing.assert_allclose(a, xv)
    np.testing.assert_allclose(b, np.exp(xv), rtol=1e-6)
    np.testing.assert_allclose(c, np.exp(xv), rtol=1e-6)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda g: g.input("a", (R, D)) @ g.input("b", (R, D)), r"matmul: inner dimensions do not match: \(R, D\) @ \(R, D\)"),
        (lambda g: g.input("a", (R, D)) + g.input("b", (D, R)), r"add: shapes \(R, D\) and \(D, R\) cannot be broadcast"),
        (lambda g: ops.sum(g.input("a", (R, D)), axis=2), r"sum: axis 2 is out of range for a tensor of shape \(R, D\)"),
        (lambda g: ops.softmax(g.input("a", (R, D)), axis=-3), r"softmax: axis -3 is out of range"),
        (lambda g: ops.transpose(g.input("a", (R, D)), (0, 0)), r"transpose: axes"),
        (lambda g: ops.conv2d(g.input("x", (1, 3, 8, 8)), g.input("w", (4, 2, 3, 3))), r"conv2d: channels do not match"),
        (lambda g: ops.layernorm(g.input("x", (R, D)), g.input("g", (R,))), r"layernorm: gamma of shape \(R,\)"),
    ],
)
def test_shape_errors_name_the_op_and_shapes(make, match) -> None:
    with pytest.raises(pf.ShapeError, match=match):
        make(pf.Graph("bad"))


def test_build_errors() -> None:
    g = pf.Graph("g")
    x = g.input("x", (4,))
    with pytest.raises(pf.PolyfuseError, match="at least one output"):
        g.build()
    with pytest.raises(pf.PolyfuseError, match="name of an input"):
        g.build(x=ops.exp(x))
    other = pf.Graph("h").input("y", (4,))
    with pytest.raises(pf.PolyfuseError, match="belongs to graph"):
        x + other


def test_conv2d_padding_reads_are_guarded() -> None:
    g = pf.Graph("conv")
    prog = g.build(y=ops.conv2d(g.input("x", (1, 1, 5, 5)), g.input("w", (1, 1, 3, 3)), padding=1))
    update = prog.statements[1]
    assert update.domain.count_val().to_python() < 25 * 9  # the border instances are cut away
    assert prog.arrays["y"].concrete_shape({}) == (1, 1, 5, 5)


# ----- fusion outcome on the C backend ---------------------------------------------------------------------
def _softmax() -> pf.Program:
    g = pf.Graph("softmax")
    return g.build(y=ops.softmax(g.input("x", (R, D))))


def _layernorm() -> pf.Program:
    g = pf.Graph("layernorm")
    return g.build(y=ops.layernorm(g.input("x", (R, D)), g.input("g", (D,)), g.input("b", (D,))))


def _chain() -> pf.Program:
    g = pf.Graph("chain")
    a, b, c = (g.input(n, (R, D)) for n in "abc")
    return g.build(y=ops.tanh((a * b + c) * 0.5))


@pytest.mark.parametrize("build", [_softmax, _layernorm, _chain], ids=["softmax", "layernorm", "chain"])
@pytest.mark.parametrize("params", [None, {"R": 512, "D": 1024}], ids=["symbolic", "concrete"])
def test_row_wise_ops_are_one_parallel_kernel(build, params) -> None:
    sched = pf.schedule(build(), target="c", fusion="smart", params=params)
    assert len(sched.kernels) == 1, sched.explain()
    assert sched.kernels[0].parallel_depth >= 1


def test_elementwise_chain_contracts_its_temporaries() -> None:
    sched = pf.schedule(_chain(), target="c", fusion="smart")
    assert sched.contracted == {"t0_mul", "t1_add", "t2_mul"}


def test_softmax_cuda_is_one_kernel_with_row_temporaries_in_registers() -> None:
    sched = pf.schedule(_softmax(), target="cuda", fusion="smart", params={"R": 512, "D": 1024})
    assert len(sched.kernels) == 1
    assert sched.contracted == {"t0_softmax_max", "t1_softmax_sum"}


# ----- interop --------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_cuda_graph_on_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("pycuda")
    prog = _softmax()
    x = torch.randn(64, 128, device="cuda")
    y = torch.empty_like(x)
    pf.compile(prog, target="cuda")(x=x, y=y)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), rtol=1e-4, atol=1e-6)
