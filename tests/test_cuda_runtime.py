"""The CUDA runtime on a real GPU: every example compiled with target="cuda" matches the reference
interpreter, with numpy arrays (copied) and with PyTorch / CuPy device arrays (used in place).

Every test here needs pycuda and a CUDA device; without them they are skipped with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from examples import kernels as ex
from polyfuse.errors import RuntimeUnavailable, ShapeError
from polyfuse.runtime import cuda as cuda_runtime

SIZES = {"N": 67, "M": 45, "K": 23, "T": 4}
FUSIONS = ("none", "max", "smart")

needs_gpu = pytest.mark.skipif(not cuda_runtime.available(), reason=f"CUDA runtime unusable: {cuda_runtime._device_status() or 'ok'}")
pytestmark = [pytest.mark.gpu, needs_gpu]


def _inputs(prog: pf.Program, sizes: dict, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            out[name] = (rng.random(a.concrete_shape(sizes)) + 0.5).astype(a.dtype.numpy)
        else:
            out[name] = prog.scalars[name].numpy(1.25)
    if prog.name in ("lu", "cholesky"):
        n = sizes["N"]
        a = out["A"]
        out["A"] = (a @ a.T + n * np.eye(n)).astype(a.dtype)
    return out


def _extra(prog: pf.Program, sizes: dict) -> dict:
    """Sizes no shape determines (the time-step count)."""
    return {p: sizes[p] for p in prog.params if p == "T"}


def _check(prog: pf.Program, got: dict, expected: dict, what: str) -> None:
    for name in prog.arguments:
        if name in prog.arrays and prog.arrays[name].role != "input":
            tol = 1e-4 if prog.arrays[name].dtype.name == "f32" else 1e-9
            np.testing.assert_allclose(np.asarray(got[name]), expected[name], rtol=tol, atol=tol, err_msg=f"{what}: {name}")


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("prog", ex.ALL, ids=lambda p: p.name)
def test_numpy_arrays_match_reference(prog: pf.Program, fusion: str) -> None:
    sizes = {p: SIZES[p] for p in prog.params}
    expected = _inputs(prog, sizes)
    pf.reference(prog)(**expected, **_extra(prog, sizes))
    got = _inputs(prog, sizes)
    pf.compile(prog, target="cuda", fusion=fusion)(**got, **_extra(prog, sizes))
    _check(prog, got, expected, f"{prog.name} fusion={fusion}")


def _run_device(prog: pf.Program, to_device, to_host) -> None:
    """Call the loaded program directly with device arrays (``pf.compile``'s binder takes numpy only)."""
    sizes = {p: SIZES[p] for p in prog.params}
    expected = _inputs(prog, sizes)
    pf.reference(prog)(**expected, **_extra(prog, sizes))
    compiled = pf.compile(prog, target="cuda", params=sizes).specialise(sizes)
    host = _inputs(prog, sizes)
    device = {k: to_device(v) if isinstance(v, np.ndarray) else v for k, v in host.items()}
    values = [sizes[a.name] if a.kind == "size" else device[a.name] for a in compiled.code.signature]
    compiled.function(*values)
    _check(prog, {k: to_host(v) if k in prog.arrays else v for k, v in device.items()}, expected, f"{prog.name} in place")


@pytest.mark.parametrize("prog", [ex.add_exp, ex.gemm, ex.jacobi_2d, ex.two_mm], ids=lambda p: p.name)
def test_torch_arrays_in_place(prog: pf.Program) -> None:
    torch = pytest.importorskip("torch")
    _run_device(prog, lambda a: torch.from_numpy(a).cuda(), lambda t: t.cpu().numpy())


@pytest.mark.parametrize("prog", [ex.add_exp, ex.gemm_acc, ex.jacobi_1d], ids=lambda p: p.name)
def test_cupy_arrays_in_place(prog: pf.Program) -> None:
    cp = pytest.importorskip("cupy")
    _run_device(prog, cp.asarray, cp.asnumpy)


def test_wrong_device_array_is_a_shape_error() -> None:
    torch = pytest.importorskip("torch")
    sizes = {"N": 8, "M": 4}
    compiled = pf.compile(ex.add_exp, target="cuda", params=sizes).specialise(sizes)
    bad = {"A": torch.zeros((8, 5), device="cuda"), "C": torch.zeros((8, 4), device="cuda")}
    with pytest.raises(ShapeError):
        compiled.function(*[sizes[a.name] if a.kind == "size" else bad[a.name] for a in compiled.code.signature])
    strided = {"A": torch.zeros((4, 8), device="cuda").t(), "C": torch.zeros((8, 4), device="cuda")}
    with pytest.raises(ShapeError):
        compiled.function(*[sizes[a.name] if a.kind == "size" else strided[a.name] for a in compiled.code.signature])


def test_runtime_unavailable_message_is_clear(monkeypatch) -> None:
    monkeypatch.setattr(cuda_runtime, "_device_status", lambda: "no pycuda")
    with pytest.raises(RuntimeUnavailable, match="no pycuda"):
        cuda_runtime.load(None)


def test_torch_tensors_read_like_their_cuda_array_interface() -> None:
    """The fast path for PyTorch CUDA tensors (``arrays._torch_cuda_tensor``) reads the same fields as the
    tensor's own ``__cuda_array_interface__``; subclasses and tensors that require grad take the general
    path, whose errors are PyTorch's."""
    torch = pytest.importorskip("torch")
    from polyfuse.runtime.arrays import DeviceArray, _torch_cuda_tensor

    base = torch.arange(24, device="cuda", dtype=torch.float32).reshape(4, 6)
    for t in (base, base.t(), base[:, 1:], base[1:3], torch.zeros(0, 5, device="cuda"), base.to(torch.int64),
              base.to(torch.float64), base.to(torch.uint8), base[None], torch.zeros((3, 1, 2), device="cuda")[:, :, :1]):
        fast, slow = _torch_cuda_tensor(t), DeviceArray.of(t)
        assert fast is not None
        assert (fast.shape, fast.dtype, fast.pointer, fast.c_contiguous, fast.writeable) == \
               (slow.shape, slow.dtype, slow.pointer, slow.c_contiguous, slow.writeable), t.shape
    assert _torch_cuda_tensor(torch.nn.Parameter(base.clone())) is None
    assert _torch_cuda_tensor(base.clone().requires_grad_()) is None
    assert _torch_cuda_tensor(base.cpu()) is None


def test_calls_repeated_on_the_same_tensors_see_their_new_contents_and_changes() -> None:
    """A call repeated on the same PyTorch tensors replays its packed launches (``runtime/repeat.py``): new
    values written into those tensors are read, an output is overwritten, and a different tensor, one
    resized in place or one that requires grad is bound as usual."""
    torch = pytest.importorskip("torch")
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["softmax"]
    prog = w.program()
    sizes = {"R": 37, "D": 300}
    exe = pf.compile(prog, target="cuda", params=sizes)
    x = torch.randn(37, 300, device="cuda")
    y = torch.empty(37, 300, device="cuda")
    for _ in range(3):
        assert exe(x=x, y=y) is y
        torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
        x.mul_(2.0).add_(0.5)  # same tensor, new values
    assert exe._last_call is not None
    other = torch.randn(37, 300, device="cuda")
    exe(x=other, y=y)
    torch.testing.assert_close(y, torch.softmax(other, dim=1), rtol=1e-5, atol=1e-6)
    x.resize_(37, 299)
    with pytest.raises(pf.ShapeError, match="'x'"):
        exe(x=x, y=y)
