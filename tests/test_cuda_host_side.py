"""The CUDA runtime's host side without a GPU: pycuda replaced by a recording stand-in, so the launches a
call makes (kernel, grid, block, arguments), their order, and when the call waits for the device can be
checked in CI. The kernels themselves run on a GPU in ``test_gpu_device.py`` and in the simulator elsewhere.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.workloads import BY_NAME
from examples import kernels as ex
from polyfuse.codegen.host_plan import run_host_plan
from polyfuse.runtime import cuda as cuda_runtime
from polyfuse.runtime import repeat
from polyfuse.runtime.args import Binder


class Log(list):
    """What the stand-in driver was asked to do, in order."""


@pytest.fixture
def driver(monkeypatch) -> Log:
    log = Log()
    drv = types.ModuleType("pycuda.driver")
    drv.mem_alloc = lambda n: log.append(("alloc", n)) or (1 << 20) + len(log) * 4096
    drv.memcpy_htod = lambda buf, host: log.append(("htod", buf))
    drv.memcpy_dtoh = lambda host, buf: log.append(("dtoh", buf))
    drv.Context = types.SimpleNamespace(synchronize=lambda: log.append(("sync",)))

    class Function:
        def __init__(self, name: str) -> None:
            self.name = name

        def prepare(self, formats: str) -> None:
            self.formats = formats

        def prepared_call(self, grid, block, *args) -> None:
            log.append(("launch", self.name, grid, block, args))

    compiler = types.ModuleType("pycuda.compiler")
    compiler.SourceModule = lambda text, **_: types.SimpleNamespace(get_function=Function)
    package = types.ModuleType("pycuda")
    package.driver, package.compiler = drv, compiler
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    monkeypatch.setitem(sys.modules, "pycuda.compiler", compiler)
    monkeypatch.setattr(cuda_runtime, "_require", lambda: None)
    return log


class Device:
    """A device array as PyTorch or CuPy expose one."""

    base = 1 << 30

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.pointer = Device.base
        Device.base += a.nbytes + 256

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "data": (self.pointer, False), "strides": None, "version": 3}


def _launches(log: Log) -> list:
    return [e for e in log if e[0] == "launch"]


def test_device_arrays_queue_their_kernels_without_waiting(driver: Log) -> None:
    w = BY_NAME["mlp"]
    prog = w.program()
    sizes = dict(w.test)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes))
    program = cuda_runtime.load(code)
    arrays = {k: Device(v) for k, v in w.inputs(prog, sizes).items()}
    values = [sizes[a.name] if a.kind == "size" else arrays[a.name] for a in code.signature]
    expected = []
    run_host_plan(code.launch, lambda step, grid, block, env: expected.append((step.kernel, grid, block)), sizes)
    for _ in range(2):  # the second call replays the launches worked out by the first
        driver.clear()
        program(*values)
        assert [(e[1], e[2][:len(g)], e[3][:len(b)]) for e, (_, g, b) in zip(_launches(driver), expected)] == \
            [(k, tuple(g), tuple(b)) for k, g, b in expected]
        assert len(_launches(driver)) == len(expected)
        assert ("sync",) not in driver  # like a PyTorch operation: queued on the legacy default stream
        pointers = {a for e in _launches(driver) for a in e[4] if isinstance(a, int) and a >= 1 << 30}
        assert pointers <= {d.pointer for d in arrays.values()} and pointers


def test_numpy_arguments_wait_for_the_copies_back(driver: Log) -> None:
    sizes = {"N": 9, "M": 7, "K": 5}
    code = pf.codegen(pf.schedule(ex.gemm_acc, target="cuda", params=sizes))
    rng = np.random.default_rng(0)
    args = {"A": rng.random((9, 5), np.float32), "B": rng.random((5, 7), np.float32), "C": np.zeros((9, 7), np.float32)}
    cuda_runtime.load(code)(*(sizes[a.name] if a.kind == "size" else args[a.name] for a in code.signature))
    kinds = [e[0] for e in driver]
    assert kinds.index("dtoh") > max(k for k, e in enumerate(kinds) if e == "launch")  # C comes back after the kernels
    inputs_only = {"A": args["A"], "B": args["B"], "C": Device(args["C"])}  # uploads, nothing copied back
    driver.clear()
    cuda_runtime.load(code)(*(sizes[a.name] if a.kind == "size" else inputs_only[a.name] for a in code.signature))
    assert driver[-1] == ("sync",)  # the uploaded buffers are freed on return: the kernels must be done


def test_a_long_time_loop_is_launched_step_by_step_not_kept(driver: Log, monkeypatch) -> None:
    monkeypatch.setattr(cuda_runtime.CudaProgram, "MAX_REMEMBERED_LAUNCHES", 8)
    sizes = {"N": 20, "T": 12}
    code = pf.codegen(pf.schedule(ex.jacobi_1d, target="cuda", params=sizes))
    program = cuda_runtime.load(code)
    args = {"A": Device(np.zeros(20)), "B": Device(np.zeros(20))}
    values = [sizes[a.name] if a.kind == "size" else args[a.name] for a in code.signature]
    expected = []
    run_host_plan(code.launch, lambda step, grid, block, env: expected.append((step.kernel, dict(env))), sizes)
    assert len(expected) > 8
    for _ in range(2):
        driver.clear()
        program(*values)
        assert [e[1] for e in _launches(driver)] == [k for k, _ in expected]
    assert not program._schedules and program._long


def test_later_calls_pass_the_same_arguments_as_the_first(driver: Log) -> None:
    """From the second call on, launches come from argument templates worked out once per set of sizes
    (``CudaProgram._schedules``): sizes and host iterators fixed, pointers and scalars filled in per call."""
    for prog, sizes in ((ex.gemm, {"N": 9, "M": 7, "K": 5}), (ex.jacobi_1d, {"N": 20, "T": 3})):
        code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes))
        program = cuda_runtime.load(code)
        arrays = {n: Device(np.zeros(prog.arrays[n].concrete_shape(sizes), prog.arrays[n].dtype.numpy)) for n in prog.arguments
                  if n in prog.arrays}
        calls = []
        for alpha in (1.5, 1.5, 2.5):
            values = [sizes[a.name] if a.kind == "size" else alpha if a.kind == "scalar" else arrays[a.name] for a in code.signature]
            driver.clear()
            program(*values)
            calls.append([(e[1], e[2], e[3], tuple(a.item() if hasattr(a, "item") else a for a in e[4])) for e in _launches(driver)])
        assert calls[0] == calls[1] and len(calls[0]) > (1 if prog is ex.gemm else 3), prog.name
        if prog is ex.gemm:  # the new alpha reaches the kernels, nothing else changes
            changed = [(x, y) for c0, c2 in zip(calls[0], calls[2]) for x, y in zip(c0[3], c2[3]) if x != y]
            assert changed and all((x, y) == (1.5, 2.5) for x, y in changed)
        else:
            assert calls[2] == calls[0]


# ----- calls repeated on the same tensors ------------------------------------------------------------------

class FakeTensor(Device):
    """A device array with the attributes of a PyTorch CUDA tensor that a repeated call checks."""

    def __init__(self, a: np.ndarray) -> None:
        super().__init__(a)
        self.requires_grad = False
        self.dtype = a.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.a.itemsize for s in self.a.strides)

    def data_ptr(self) -> int:
        return self.pointer


@pytest.fixture
def binds(driver: Log, monkeypatch) -> list:
    """FakeTensors count as PyTorch CUDA tensors; returns a list that grows by one at each full binding."""
    monkeypatch.setattr(repeat, "_is_cuda_tensor", lambda v: type(v) is FakeTensor)
    calls: list = []
    original = Binder.bind
    monkeypatch.setattr(Binder, "bind", lambda self, values: calls.append(1) or original(self, values))
    return calls


def _compiled(name: str, kind: type, sets: int = 1) -> tuple:
    """Workload ``name`` compiled for CUDA at its test sizes, with ``sets`` sets of its arguments as ``kind``."""
    w = BY_NAME[name]
    prog = w.program()
    sizes = dict(w.test)
    exe = pf.compile(prog, target="cuda", params=sizes)
    return exe, [{k: kind(v) for k, v in w.inputs(prog, sizes).items()} for _ in range(sets)]


def test_a_call_repeated_on_the_same_tensors_replays_its_launches_unbound(driver: Log, binds: list) -> None:
    exe, (args,) = _compiled("mlp", FakeTensor)
    driver.clear()
    out = exe(**args)
    first = _launches(driver)
    assert first and len(binds) == 1
    for count in (2, 2, 2):  # bound and packed by the second call; replayed unbound by the later ones
        driver.clear()
        assert exe(**args) is out is args["y"] and len(binds) == count
        assert _launches(driver) == first and ("sync",) not in driver
    # another tensor at another address is bound, and its address reaches the kernels
    other = dict(args, x=FakeTensor(args["x"].a.copy()))
    for _ in range(2):
        driver.clear()
        exe(**other)
        assert other["x"].pointer in {a for e in _launches(driver) for a in e[4]}
    assert len(binds) == 4
    # the same object at a new address (PyTorch's set_), or reshaped in place: bound (and checked) again
    other["x"].pointer += 1 << 20
    driver.clear()
    exe(**other)
    assert len(binds) == 5 and other["x"].pointer in {a for e in _launches(driver) for a in e[4]}
    other["x"].a = other["x"].a[:, :-1]
    with pytest.raises(pf.ShapeError, match="'x'"):
        exe(**other)
    # a tensor that requires grad is not replayed (the general path decides what to do with it)
    exe(**args)
    exe(**args)
    exe(**args)
    assert len(binds) == 8
    args["w1"].requires_grad = True
    exe(**args)
    assert len(binds) == 9


def test_calls_with_numpy_arrays_or_a_missing_output_are_not_remembered(driver: Log, binds: list) -> None:
    exe, (host,) = _compiled("softmax", np.asarray)
    for _ in range(2):
        exe(**host)  # copied to the device and back at every call
    assert len(binds) == 2 and exe._last_call is None
    x = FakeTensor(host["x"])
    for _ in range(2):
        exe(x=x)  # y allocated by the call
    assert len(binds) == 4 and exe._last_call is None


def test_launches_hand_pycuda_their_arguments_packed_in_the_prepared_format(driver: Log, monkeypatch) -> None:
    """Where pycuda has ``_launch_kernel`` (the launch ``prepared_call`` ends with), the arguments are packed
    by pycuda's own packer and launched without ``prepared_call``'s legacy block-shape call; the launches
    are those ``prepared_call`` would have made."""
    sizes = {"N": 9, "M": 7, "K": 5}
    code = pf.codegen(pf.schedule(ex.gemm, target="cuda", params=sizes))
    arrays = {n: Device(np.zeros(ex.gemm.arrays[n].concrete_shape(sizes), np.float32)) for n in ("A", "B", "C")}
    values = [sizes[a.name] if a.kind == "size" else 1.5 if a.kind == "scalar" else arrays[a.name] for a in code.signature]
    cuda_runtime.load(code)(*values)
    expected = [(e[1], e[2], e[3], tuple(a.item() if hasattr(a, "item") else a for a in e[4])) for e in _launches(driver)]

    class Function:
        texrefs: list = []

        def __init__(self, name: str) -> None:
            self.name = name

        def prepare(self, formats: str) -> None:
            self.arg_format = formats

        def prepared_call(self, *args) -> None:
            raise AssertionError("prepared_call is not used where _launch_kernel exists")

        def _launch_kernel(self, grid, block, buffer, shared, stream) -> None:
            fmt, args = buffer
            assert fmt == self.arg_format and shared == 0 and stream is None
            driver.append(("launch", self.name, grid, block, args))

    packer = types.ModuleType("pycuda._pvt_struct")
    packer.pack = lambda fmt, *args: (fmt, args)
    monkeypatch.setitem(sys.modules, "pycuda._pvt_struct", packer)
    monkeypatch.setattr(sys.modules["pycuda.compiler"], "SourceModule", lambda text, **_: types.SimpleNamespace(get_function=Function))
    program = cuda_runtime.load(code)
    for run in (lambda: program(*values), program.bound(*values)):
        driver.clear()
        run()
        assert [(e[1], e[2], e[3], tuple(a.item() if hasattr(a, "item") else a for a in e[4])) for e in _launches(driver)] == expected


@pytest.fixture
def softmax_packs(driver: Log, monkeypatch) -> tuple:
    """softmax compiled for CUDA at its test sizes, two sets of its arguments as FakeTensors, and a list
    that grows by one each time a call's launches are packed (``CudaProgram.bound``)."""
    exe, sets = _compiled("softmax", FakeTensor, sets=2)
    packed: list = []
    original = cuda_runtime.CudaProgram.bound
    monkeypatch.setattr(cuda_runtime.CudaProgram, "bound", lambda self, *v: packed.append(1) or original(self, *v))
    return exe, sets, packed


def test_calls_alternating_between_two_sets_of_tensors_are_not_packed(binds: list, softmax_packs: tuple) -> None:
    """Packing a call's launches pays off only when the same objects come again: new tensors at every call
    (fresh activations) are bound and launched as usual, never packed."""
    exe, sets, packed = softmax_packs
    for k in range(6):
        exe(**sets[k % 2])
    assert len(binds) == 6 and not packed and exe._last_call is None
    exe(**sets[1])
    exe(**sets[1])
    assert len(binds) == 7 and len(packed) == 1  # the second call on the same objects packs, the third replays


def test_the_benchmarks_recorder_replays_the_launches_of_a_call(driver: Log) -> None:
    """``benchmarks/cuda_acceptance.py``'s kernel times replay one call's launches; a recorder that saw
    none would time nothing (as it did once, when the runtime stopped calling ``prepared_call``)."""
    from benchmarks.cuda_acceptance import Recorder

    sizes = {"N": 9, "M": 7, "K": 5}
    exe = pf.compile(ex.gemm, target="cuda", params=sizes)
    compiled = exe.specialise(sizes)
    arrays = {n: Device(np.zeros(ex.gemm.arrays[n].concrete_shape(sizes), np.float32)) for n in ("A", "B", "C")}
    values = [sizes[a.name] if a.kind == "size" else 1.5 if a.kind == "scalar" else arrays[a.name] for a in compiled.code.signature]
    recorder = Recorder(compiled)
    driver.clear()
    recorder.record(values)
    made = _launches(driver)
    driver.clear()
    recorder.replay()
    assert made and _launches(driver) == made


def test_alternating_with_a_remembered_call_does_not_pack_the_other_set(binds: list, softmax_packs: tuple) -> None:
    """A remembered call on one set of tensors, then two sets alternated: the calls on the remembered set
    replay it, those on the other are bound every time and never packed (a replayed call between two of them
    breaks the repeat)."""
    exe, (a, b), packed = softmax_packs
    exe(**a)
    exe(**a)
    assert len(packed) == 1 and len(binds) == 2
    for _ in range(4):
        exe(**b)
        exe(**a)
    assert len(packed) == 1 and len(binds) == 6


def test_a_prepared_call_on_device_arrays_replays_packed_launches(driver: Log, monkeypatch) -> None:
    """``exe.prepare`` on device arrays packs the launches once: its calls do not go through the loaded
    program's call (no pointer checks, no argument templates), and launch what a plain call launches."""
    exe, (args,) = _compiled("mlp", Device)
    driver.clear()
    exe(**args)
    expected = _launches(driver)
    prepared = exe.prepare(**args)

    def unpacked(self, *values, **kw):
        raise AssertionError("a prepared call on device arrays went through CudaProgram.__call__")

    monkeypatch.setattr(cuda_runtime.CudaProgram, "__call__", unpacked)
    for _ in range(2):
        driver.clear()
        prepared()
        assert _launches(driver) == expected and ("sync",) not in driver
