"""PyTorch models in: ``pf.from_torch`` and ``torch.compile(model, backend="polyfuse")`` against eager PyTorch.

Every operator of the ATen table is checked on random float32 inputs, grouped into a few models so each
group is one Program and one C compilation; then whole blocks (an MLP, ``nn.TransformerEncoderLayer`` in
eval mode, a hand-written transformer block, conv-bn-relu) through both entry points, an unsupported
operator in the middle of a model (left to eager, reported), and the fusion across operator boundaries of
the transformer block. Tolerance: ``|polyfuse - eager| <= ATOL + RTOL * |eager|`` with the values below
(float32 throughout; the C code may reassociate reductions and uses its own exp/tanh).
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import polyfuse as pf  # noqa: E402
from polyfuse.errors import UnsupportedOperator  # noqa: E402
from polyfuse.frontend.torch.compiling import compile_program  # noqa: E402
from polyfuse.frontend.torch.report import partitions  # noqa: E402

ATOL, RTOL = 2e-5, 2e-4
BLOCK_ATOL = 2e-4  # whole blocks: several reductions and matrix products in a row


def _close(got, want, atol=ATOL):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: shape {tuple(g.shape)} vs {tuple(w.shape)}"
        err = (g - w).abs().max().item()
        assert torch.allclose(g, w, atol=atol, rtol=RTOL), f"output {k}: max |error| {err}"


def _via_from_torch(model, *inputs):
    prog, binding = pf.from_torch(model, *inputs)
    compiled = compile_program(prog)
    return binding(compiled.exe, *inputs), prog, compiled


class Fn(nn.Module):
    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            setattr(self, k, nn.Parameter(v, requires_grad=False))

    def forward(self, *args):
        return self.fn(self, *args)


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----- every operator of item 3, in groups ------------------------------------------------------------------
def _pointwise(m, x, y):
    drop = nn.Dropout(0.5).eval()
    return (F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), torch.sigmoid(x), torch.tanh(x),
            x + m.b, x - y, x * y, x / (y * y + 1), drop(x) * 2.0, 1.0 - x, x ** 2)


def _reductions(m, x, y):
    return (torch.softmax(x, dim=-1), F.log_softmax(x, dim=-1), x.mean(dim=-1), x.sum(dim=0), x.amax(dim=1, keepdim=True),
            y.mean(dim=(0, 1)), x.sum(), torch.softmax(x, dim=0))


def _norms(m, x, z):
    return (F.layer_norm(x, (8,), m.g, m.b, 1e-5), F.rms_norm(x, (8,), m.g, 1e-6), F.layer_norm(x, (8,)),
            F.batch_norm(z, m.rm, m.rv, m.g4, m.b4, training=False, eps=1e-5))


def _linalg(m, x, a, b):
    return (F.linear(x, m.w, m.bias), torch.addmm(m.bias, a[0], m.w.t()), torch.mm(a[0], b[0]), torch.bmm(a, b),
            torch.matmul(a, b[0]), x @ m.w.t())


def _layout(m, a):
    t = a.transpose(1, 2)                                  # (2, 8, 6)
    p = a.permute(2, 0, 1).contiguous()                     # (8, 2, 6)
    v = a.reshape(12, 8).view(2, 6, 2, 4)                  # split and merge
    e = a[:, :1, :].expand(2, 6, 8)                        # broadcast a row
    return t * 1.0, p + 0.0, v.permute(0, 2, 1, 3).reshape(2, 48) * 2.0, e + a, a.unsqueeze(1).squeeze(1) * 3.0


def _conv(m, x):
    return F.conv2d(x, m.w, m.b, stride=2, padding=1), F.conv2d(x, m.w, None, stride=1, padding=0)


def _attention(m, q, k, v):
    return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, attn_mask=m.mask)


GROUPS = {
    "pointwise": (_pointwise, dict(b=_rand(8, seed=9)), [(6, 8), (6, 8)]),
    "reductions": (_reductions, {}, [(6, 8), (3, 4, 5)]),
    "norms": (_norms, dict(g=_rand(8, seed=3), b=_rand(8, seed=4), rm=_rand(4, seed=5), rv=_rand(4, seed=6).abs() + 0.5,
                          g4=_rand(4, seed=7), b4=_rand(4, seed=8)), [(2, 5, 8), (2, 4, 3, 3)]),
    "linalg": (_linalg, dict(w=_rand(5, 8, seed=3), bias=_rand(5, seed=4)), [(2, 3, 8), (2, 4, 8), (2, 8, 3)]),
    "layout": (_layout, {}, [(2, 6, 8)]),
    "conv": (_conv, dict(w=_rand(4, 3, 3, 3, seed=3), b=_rand(4, seed=4)), [(1, 3, 7, 7)]),
    "attention": (_attention, dict(mask=_rand(5, 5, seed=3)), [(1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)]),
}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_operators_match_eager(group):
    fn, params, shapes = GROUPS[group]
    model = Fn(fn, **params).eval()
    inputs = [_rand(*s, seed=k + 1) for k, s in enumerate(shapes)]
    got, prog, _ = _via_from_torch(model, *inputs)
    with torch.no_grad():
        want = model(*inputs)
    _close(got, want)
    assert all(prog.arrays[n].role == "input" for n in prog.arrays if n.startswith("p_")), "parameters are inputs"


def test_parameters_are_bound_at_call_time():
    lin = nn.Linear(8, 4).eval()
    x = _rand(3, 8)
    prog, binding = pf.from_torch(lin, x)
    assert {n: prog.arrays[n].concrete_shape({}) for n in binding.tensors} == {"p_weight": (4, 8), "p_bias": (4,)}
    assert sorted(binding.tensors) == ["p_bias", "p_weight"] and binding.tensors["p_weight"] is lin.weight
    exe = compile_program(prog).exe
    with torch.no_grad():
        lin.weight.mul_(2.0)  # the binding sees the update: no copy of the weights was taken
        _close(binding(exe, x), lin(x))


# ----- whole blocks -----------------------------------------------------------------------------------------
class HandBlock(nn.Module):
    """A pre-written transformer encoder block: fused QKV projection, heads by view/transpose, post-norm."""

    def __init__(self, d=16, heads=2, ff=32):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1) @ v
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.copy_(_rand(4, seed=11))
            self.bn.running_var.copy_(_rand(4, seed=12).abs() + 0.5)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def _blocks():
    torch.manual_seed(0)
    return {
        # (sizes with work enough per kernel for threads: tiny work runs serially, in source order)
        "mlp": (nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).eval(), (1, 32, 16)),
        "encoder_layer": (nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True, activation="gelu").eval(), (1, 32, 16)),
        "hand_block": (HandBlock().eval(), (1, 32, 16)),
        "conv_bn_relu": (ConvBnRelu().eval(), (1, 3, 24, 24)),
    }


@functools.cache
def _from_torch_block(name):
    """One compilation per block for the tests below (the encoder layer's takes several seconds)."""
    model, shape = _blocks()[name]
    x = _rand(*shape)
    return (model, x, *_via_from_torch(model, x))


@pytest.mark.parametrize("name", ["mlp", "encoder_layer", "hand_block", "conv_bn_relu"])
def test_block_from_torch(name):
    model, x, got, prog, compiled = _from_torch_block(name)
    with torch.no_grad():
        _close(got, model(x), atol=BLOCK_ATOL)
    assert compiled.fusion == "smart" and compiled.kernels < len(prog.statements)


@pytest.mark.parametrize("name", ["mlp", "encoder_layer", "hand_block", "conv_bn_relu"])
def test_block_torch_compile(name):
    model, shape = _blocks()[name]
    x = _rand(*shape)
    pf.torch_report(reset=True)
    partitions(reset=True)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="polyfuse")(x)
        _close(got, model(x), atol=BLOCK_ATOL)
    report = pf.torch_report()
    assert report["compiled"] and not report["eager"], report
    assert len(partitions(reset=True)) == 1  # the whole block is one polyfuse Program


def test_transformer_fuses_across_operators():
    """The encoder layer's Program has fewer kernels than the ATen operators it came from, and explain()
    names fused kernels holding statements of different operators."""
    model, x, _, prog, compiled = _from_torch_block("encoder_layer")
    aten_ops = [n for n in torch.export.export(model, (x,)).graph.nodes if n.op == "call_function"]
    assert compiled.kernels < len(aten_ops), (compiled.kernels, len(aten_ops))
    fused_lines = [line for line in compiled.explain.splitlines() if ": fused" in line]
    assert fused_lines, compiled.explain
    texts = {s.name: s.text for s in prog.statements}
    kernels = [line.split(":", 1)[1].replace(" ", "").split(",") for line in compiled.explain.splitlines()
               if line.strip().startswith("kernel") and ":" in line]
    ops_in = [{texts[s].split("=")[1].split("(")[0].strip() for s in k if s in texts} for k in kernels]
    assert any(len(o) > 1 for o in ops_in), (compiled.explain, ops_in)


# ----- partitioning: unsupported operators stay eager -------------------------------------------------------
class WithCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)
        self.emb = nn.Embedding(10, 8)

    def forward(self, idx, x):
        h = F.gelu(self.a(x + self.emb(idx)))
        return torch.softmax(self.b(torch.cumsum(h, dim=-1)), dim=-1)


def test_unsupported_operator_falls_back_to_eager_and_is_reported():
    model = WithCumsum().eval()
    idx, x = torch.tensor([1, 4, 7]), _rand(3, 8)
    pf.torch_report(reset=True)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="polyfuse")(idx, x)
        _close(got, model(idx, x))
    report = pf.torch_report(reset=True)
    assert report["eager"].get("aten.cumsum.default") == 1, report
    assert report["eager"].get("aten.embedding.default") == 1, report
    assert report["compiled"].get("aten._softmax.default") == 1 and report["compiled"].get("aten.gelu.default") == 1, report
    assert pf.torch_report() == {"compiled": {}, "eager": {}}
    with pytest.raises(UnsupportedOperator, match="aten.cumsum.default has no polyfuse lowering"):
        pf.from_torch(lambda v: torch.cumsum(v, dim=-1) * 2.0, x)  # from_torch takes whole models only


def test_import_polyfuse_does_not_import_torch():
    code = "import sys, polyfuse; assert 'torch' not in sys.modules; print(polyfuse.torch_report())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "compiled" in out.stdout, out.stderr


def test_dynamic_dimension_becomes_a_size_param():
    lin = nn.Linear(8, 4).eval()
    prog, binding = pf.from_torch(lambda v: torch.relu(lin(v)) * 2.0, _rand(3, 8),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert len(prog.params) == 1
    exe = compile_program(prog).exe
    for n in (3, 5):
        x = _rand(n, 8, seed=n)
        with torch.no_grad():
            _close(binding(exe, x), torch.relu(lin(x)) * 2.0)


def test_a_scheduled_partition_is_compiled_exactly_as_scheduled():
    """The bounded scheduler's child returns the finished schedule, which is compiled as it is: the code is
    the one ``pf.compile`` builds in-process, register micro-tile included (recompiling its text as an
    explicit schedule had tiled it again, scalar, 25x slower on conv-bn-relu)."""
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU()).eval()
    x = _rand(1, 64, 64)
    prog, binding = pf.from_torch(model, x)
    compiled = compile_program(prog, time_limit=120.0)
    text = compiled.exe.code.text
    assert text == pf.compile(prog, target="c").code.text
    assert "PF_VFMA_f32" in text  # the micro-kernel
    with torch.no_grad():
        _close(binding(compiled.exe, x), model(x))
