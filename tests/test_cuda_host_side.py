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
