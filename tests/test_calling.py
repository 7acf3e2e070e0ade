"""The calling convention of compiled executables: positional and keyword arguments, outputs allocated and
returned, and arrays from other libraries (``__array_interface__``, DLPack, PyTorch) used without copies."""

import numpy as np
import pytest

import polyfuse as pf
from examples.kernels import add_exp, bicg, jacobi_1d, time_axpy


@pytest.fixture(scope="module")
def add():
    return pf.compile(add_exp, target="c", tile=None)


def expected_add(a):
    return np.exp(a + np.float32(1.0))


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(dtype)


def test_positional_and_allocated_output(add):
    a = rand(6, 4)
    y = add(a)
    assert isinstance(y, np.ndarray) and y.shape == (6, 4) and y.dtype == np.float32
    np.testing.assert_allclose(y, expected_add(a), rtol=1e-6)
    c = np.zeros_like(a)
    assert add(a, c) is c  # passed: written in place and returned
    np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)
    c2 = np.zeros_like(a)
    assert add(a, C=c2) is c2 and add(A=a, C=c2) is c2


def test_a_prepared_call_reruns_on_the_arrays_it_was_bound_to(add):
    a = rand(6, 4)
    c = np.zeros_like(a)
    run = add.prepare(a, C=c)
    assert isinstance(run, pf.PreparedCall) and run() is c
    np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)
    a[:] = 2.0  # the same memory, new values: the next run reads them
    run()
    np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)
    allocated = add.prepare(a)()  # an output not passed is allocated once, at prepare()
    np.testing.assert_allclose(allocated, expected_add(a), rtol=1e-6)
    with pytest.raises(pf.ShapeError):
        add.prepare(a, C=np.zeros((4, 6), np.float32))  # checked once, when bound
    threaded = pf.compile(add_exp, target="c", threads=1).prepare(a, C=np.zeros_like(a))
    np.testing.assert_allclose(threaded(), expected_add(a), rtol=1e-6)


def test_a_prepared_call_keeps_the_temporaries_it_points_into_alive():
    """The C code gets temporaries by address: a PreparedCall outliving its Executable must keep them."""
    import gc

    n = 4096  # work enough for a parallel kernel with its temporary B (fusion none: B is not contracted)
    a = rand(n, 8)
    run = pf.compile(add_exp, target="c", fusion="none").prepare(a)
    gc.collect()
    junk = [np.full((n, 8), 7.0, np.float32) for _ in range(8)]  # would reuse freed buffers
    np.testing.assert_allclose(run(), expected_add(a), rtol=1e-6)
    assert all((j == 7.0).all() for j in junk)  # nothing written into memory the executable had freed


def test_a_repeated_call_reuses_its_binding_and_sees_every_change():
    """Calling again with the very same arrays replays the previous binding (``runtime/repeat.py``); new
    values in the same arrays, new arrays, new shapes, new sizes and scalars, a dead array whose identity a
    new one takes, and an output made read-only are all seen."""
    import gc

    exe = pf.compile(add_exp, target="c", tile=None)
    a, c = rand(6, 4), np.zeros((6, 4), np.float32)
    assert exe(a, C=c) is c and exe(a, C=c) is c
    assert exe._last_call is not None and exe._last_call.matches((a,), {"C": c})
    a[:] = 2.0
    exe(a, C=c)
    np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)
    other = np.zeros_like(c)
    assert exe(a, C=other) is other
    np.testing.assert_allclose(other, expected_add(a), rtol=1e-6)
    assert not exe._last_call.matches((a,), {"C": c})
    b = rand(3, 5, seed=3)
    np.testing.assert_allclose(exe(b, C=np.zeros((3, 5), np.float32)), expected_add(b), rtol=1e-6)
    for seed in range(5):  # the previous call's arrays die; new ones may take their identities
        a = rand(6, 4, seed=seed)
        c = np.zeros((6, 4), np.float32)
        exe(a, C=c)
        np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)
        del a, c
        gc.collect()
    a, c = rand(6, 4), np.zeros((6, 4), np.float32)
    exe(A=a, C=c)
    assert not exe._last_call.matches((a,), {"C": c})  # positional now, keyword before: bound again
    c.flags.writeable = False
    with pytest.raises(pf.ShapeError, match="read-only|writeable"):
        exe(A=a, C=c)
    scalars = pf.compile(time_axpy, target="c", tile=None)
    x, y = rand(8, dtype=np.float64), rand(8, dtype=np.float64, seed=1)
    for alpha, steps in [(2.0, 2), (2.0, 2), (3.0, 2), (3.0, 1), (3, 1)]:
        want, start = y.copy(), y.copy()
        pf.reference(time_axpy)(x=x, y=want, a=float(alpha), T=steps)
        assert scalars(x, y, alpha, T=steps) is y
        np.testing.assert_allclose(y, want, rtol=1e-12, err_msg=f"a={alpha} T={steps} from {start}")


def test_calls_that_cannot_repeat_a_binding_are_bound_each_time():
    """An output left to be allocated gets a new array on every call; a foreign array is not remembered."""
    exe = pf.compile(add_exp, target="c", tile=None)
    a = rand(6, 4)
    first, second = exe(a), exe(a)
    assert first is not second and exe._last_call is None
    np.testing.assert_allclose(second, expected_add(a), rtol=1e-6)
    c = np.zeros_like(a)
    exe(a, memoryview(c))
    assert exe._last_call is None
    np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)


def test_new_shapes_are_inferred_again(add):
    for shape in [(3, 5), (6, 4), (3, 5)]:
        a = rand(*shape)
        np.testing.assert_allclose(add(a), expected_add(a), rtol=1e-6)


def test_several_outputs_come_back_as_a_tuple_in_signature_order():
    exe = pf.compile(bicg, target="c", tile=None)
    a, p, r = rand(5, 3, dtype=np.float64), rand(3, dtype=np.float64, seed=1), rand(5, dtype=np.float64, seed=2)
    s, q = exe(a, p=p, r=r)
    s_ref, q_ref = np.zeros(3), np.zeros(5)
    pf.reference(bicg)(A=a, s=s_ref, q=q_ref, p=p, r=r)
    np.testing.assert_allclose(s, s_ref, rtol=1e-5)
    np.testing.assert_allclose(q, q_ref, rtol=1e-5)


def test_inout_arrays_are_returned_and_sizes_come_by_keyword():
    exe = pf.compile(jacobi_1d, target="c", tile=None)
    a, b = rand(10, dtype=np.float64), rand(10, dtype=np.float64, seed=1)
    want_a, want_b = a.copy(), b.copy()
    pf.reference(jacobi_1d)(A=want_a, B=want_b, T=3)
    got = exe(a, b, T=3)
    assert got[0] is a and got[1] is b
    np.testing.assert_allclose(a, want_a)
    scalars = pf.compile(time_axpy, target="c", tile=None)
    x, y = rand(8, dtype=np.float64), rand(8, dtype=np.float64, seed=1)
    want = y.copy()
    pf.reference(time_axpy)(x=x, y=want, a=2.0, T=2)
    assert scalars(x, y, 2.0, T=2) is y
    np.testing.assert_allclose(y, want, rtol=1e-6)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda exe, a, c: exe(a, c, c), r"add_exp takes 2 positional argument\(s\) \(A, C\), got 3; pass sizes by keyword"),
        (lambda exe, a, c: exe(a, c, C=c), r"argument 'C' of add_exp given both by position and by keyword"),
        (lambda exe, a, c: exe(C=c), r"missing argument 'A' of add_exp: expected float32\[N, M\]"),
        (lambda exe, a, c: exe(a, [[1.0]]), r"argument 'C': expected a numpy array float32\[N, M\], got list"),
        (lambda exe, a, c: exe(a, c.T), r"argument 'C': expected float32\[N=6, M=4\], got float32 \(4, 6\)"),
        (lambda exe, a, c: exe(a, a), r"arguments 'A' and 'C' share memory"),
        (lambda exe, a, c: exe(a, np.zeros((12, 4), np.float32)[::2]), r"C-contiguous.*strides \(32, 4\) B"),
        (lambda exe, a, c: exe(a.astype(np.float64)), r"argument 'A': expected float32\[N=6, M=4\], got float64"),
    ],
)
def test_call_errors(add, call, message):
    a, c = rand(6, 4), np.zeros((6, 4), np.float32)
    with pytest.raises(pf.ShapeError, match=message):
        call(add, a, c)


class Interface:
    """A foreign array exposing only ``__array_interface__`` (like many C-extension arrays)."""

    def __init__(self, array):
        self.array = array
        self.__array_interface__ = array.__array_interface__


class DLPackOnly:
    """A foreign host array exposing only the DLPack protocol."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("wrap", [Interface, DLPackOnly, memoryview])
def test_foreign_host_arrays_are_used_without_a_copy(add, wrap):
    a, c = rand(6, 4), np.zeros((6, 4), np.float32)
    out = wrap(c)
    assert add(wrap(a), out) is out
    np.testing.assert_allclose(c, expected_add(a), rtol=1e-6)  # written through the caller's buffer


def test_gpu_arrays_are_refused_by_the_c_target(add):
    class Gpu:
        __cuda_array_interface__ = {"shape": (6, 4), "typestr": "<f4", "data": (1 << 40, False), "version": 3}

    with pytest.raises(pf.ShapeError, match="GPU array was given to a C executable"):
        add(Gpu())


def test_torch_cpu_tensors_and_dlpack_capsules_share_memory(add):
    torch = pytest.importorskip("torch")
    a = torch.rand(6, 4) + 0.5
    out = torch.zeros(6, 4)
    assert add(a, out) is out
    want = torch.exp(a + 1)
    torch.testing.assert_close(out, want)
    y = add(a)  # allocated: a numpy array
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-6)
    target = torch.zeros(6, 4)
    capsule = torch.utils.dlpack.to_dlpack(target)
    add(torch.utils.dlpack.to_dlpack(a), capsule)
    torch.testing.assert_close(target, want)  # written through the capsule into the tensor's memory


def test_torch_layout_errors(add):
    torch = pytest.importorskip("torch")
    a = torch.rand(6, 4)
    with pytest.raises(pf.ShapeError, match=r"argument 'C'.*C-contiguous.*strides \(4, 24\) B.*contiguous\(\)"):
        add(a, torch.zeros(4, 6).T)
    with pytest.raises(pf.ShapeError, match=r"argument 'A'.*require gradient"):
        add(torch.rand(6, 4, requires_grad=True))
    with pytest.raises(pf.ShapeError, match=r"argument 'A': expected float32\[N=6, M=4\], got float64"):
        add(a.double())
