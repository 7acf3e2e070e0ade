"""The CUDA runtime: compile generated CUDA with pycuda, run the host plan, launch prepared kernels.

This is the only module that imports pycuda, and it does so lazily: ``import polyfuse`` works without
pycuda or a GPU, :func:`available` says whether this runtime can be used, and :func:`load` raises
:class:`RuntimeUnavailable` ("...: no pycuda" / "...: no CUDA device") when it cannot.

A loaded program is called with its arguments in ``code.signature`` order (sizes, then the program's
arguments). numpy arrays are copied to the device once per call, and those the program writes (outputs,
inouts) are copied back once after the last launch; objects exposing ``__cuda_array_interface__`` (PyTorch,
CuPy, pycuda GPUArray) are used in place after checking their dtype, shape and contiguity. Temporaries
that are not registers get device buffers, allocated once per set of sizes.

Kernels go to the legacy default stream, the one PyTorch and CuPy use unless told otherwise, so work on
device arrays is ordered with theirs. A call that copies nothing back returns once its kernels are queued,
as a PyTorch operation does (synchronise, or read a result, before timing it on the host); a call with
numpy outputs returns after copying them back. The sequence of launches (kernel, grid, block, host
iterators) depends on the sizes only and is worked out once per set of sizes; :meth:`CudaProgram.bound`
packs a whole call's launches once, for calls repeated on the same device arrays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from polyfuse.codegen.code import Code
from polyfuse.codegen.host_plan import HostPlan, KernelArg, Launch, run_host_plan
from polyfuse.errors import CodegenError, RuntimeUnavailable, ShapeError
from polyfuse.runtime.arrays import DeviceArray
from polyfuse.schedule.model import Schedule

NVCC_OPTIONS = ("-O3", "-std=c++17")
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
_FORMAT = {"f32": "f", "f64": "d", "i32": "i", "i8": "b", "i16": "h", "i64": "q", "u8": "B", "u16": "H", "u32": "I", "u64": "Q"}


@lru_cache(maxsize=1)
def _device_status() -> str:
    """"" when pycuda and a device are usable (a context is made current), else why not."""
    try:
        import pycuda.driver as drv
    except ImportError:
        return "no pycuda"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA device"
        try:
            import pycuda.autoprimaryctx  # noqa: F401 - makes the primary context current
        except ImportError:
            import pycuda.autoinit  # noqa: F401
    except Exception as e:  # the driver reports missing hardware in several ways
        return f"no CUDA device ({e})"
    return ""


def available() -> bool:
    """Whether pycuda is importable and a CUDA device is present (answer cached)."""
    return _device_status() == ""


def unavailable_reason() -> str:
    """Why this runtime cannot be used here ("no pycuda", "no CUDA device ..."), or "" when it can."""
    return _device_status()


def device_name() -> str:
    """The current device's name and compute capability (part of the autotuning cache key)."""
    _require()
    import pycuda.driver as drv

    dev = drv.Context.get_device()
    major, minor = dev.compute_capability()
    return f"{dev.name()} (sm_{major}{minor})"


def to_device(a: np.ndarray) -> Any:
    """A device copy of ``a`` (a pycuda GPUArray: usable in place as an argument of a loaded program)."""
    _require()
    import pycuda.gpuarray as gpuarray

    return gpuarray.to_gpu(np.ascontiguousarray(a))


def _require() -> None:
    status = _device_status()
    if status:
        raise RuntimeUnavailable(f"the CUDA target cannot run here: {status}")


def load(code: Code, sched: Schedule | None = None) -> CudaProgram:
    """A callable that runs ``code`` (target ``"cuda"``) on its arguments in ``code.signature`` order.

    ``sched`` is accepted for symmetry with the other runtimes; the host plan carries all that is needed.
    """
    _require()
    if code.target != "cuda" or not isinstance(code.launch, HostPlan):
        raise CodegenError("the CUDA runtime needs CUDA code with a host plan (polyfuse.codegen.cuda.generate_cuda)")
    return CudaProgram(code)


class CudaProgram:
    """A compiled CUDA module with its prepared kernels and the host plan that launches them."""

    def __init__(self, code: Code) -> None:
        from pycuda.compiler import SourceModule

        self.code = code
        self.plan: HostPlan = code.launch
        self.arrays = {a.name: a for a in self.plan.arrays}
        try:
            module = SourceModule(code.text, no_extern_c=True, options=list(NVCC_OPTIONS))
        except Exception as e:
            raise CodegenError(f"nvcc failed on the generated CUDA: {e}") from None
        self._functions: dict[str, Any] = {}
        for launch in self.plan.launches():
            if launch.kernel not in self._functions:
                fn = module.get_function(launch.kernel)
                fn.prepare("".join(_format(a) for a in launch.args))
                self._functions[launch.kernel] = fn
        self._launchers = {name: _Launcher(fn) for name, fn in self._functions.items()}
        self._temporaries: dict[tuple, dict[str, Any]] = {}
        self._schedules: dict[tuple, list[tuple[str, tuple[int, int, int], tuple[int, int, int], tuple]]] = {}  # sizes -> launches
        self._long: set[tuple] = set()  # sizes whose launch sequence is too long to keep
        self._dtypes = {a.name: np.dtype(a.dtype.numpy) for a in code.signature if a.kind == "array"}
        self._shapes: dict[tuple, dict[str, tuple[int, ...]]] = {}  # sizes -> each array's shape

    def __call__(self, *values: Any, timer: Callable[[str, float], None] | None = None) -> None:
        """Run on ``values`` in ``code.signature`` order. With ``timer`` (``exe.profile``), every launch is
        synchronised and ``timer(kernel function name, seconds)`` told its host-measured time."""
        import pycuda.driver as drv

        signature = self.code.signature
        if len(values) != len(signature):
            raise ShapeError(f"{self.code.entry or 'program'} takes {len(signature)} arguments, got {len(values)}")
        sizes = {a.name: int(v) for a, v in zip(signature, values) if a.kind == "size"}
        scalars = {a.name: v for a, v in zip(signature, values) if a.kind == "scalar"}
        key = tuple(sorted(sizes.items()))
        shapes = self._shapes.get(key)
        if shapes is None:
            shapes = self._shapes[key] = {name: array.concrete_shape(sizes) for name, array in self.arrays.items()}
        pointers: dict[str, Any] = {}
        copies: list[tuple[np.ndarray, Any]] = []
        uploaded = False  # device buffers of numpy arguments, freed on return: wait for the kernels first
        for a, v in zip(signature, values):
            if a.kind != "array":
                continue
            if a.name not in self.arrays:
                continue  # no kernel touches it (e.g. only in a contracted form)
            shape, dtype = shapes[a.name], self._dtypes[a.name]
            if type(v) is DeviceArray or hasattr(v, "__cuda_array_interface__"):
                pointers[a.name] = _device_pointer(a.name, v, dtype, shape)
            elif isinstance(v, np.ndarray):
                if v.dtype != dtype or v.shape != shape or not v.flags.c_contiguous:
                    raise ShapeError(f"argument {a.name!r}: expected a C-contiguous {dtype.name} {shape}, got {v.dtype.name} {v.shape}")
                buf = drv.mem_alloc(max(v.nbytes, 1))
                drv.memcpy_htod(buf, v)
                uploaded = True
                pointers[a.name] = buf
                if self._writes(a.name):
                    copies.append((v, buf))
            else:
                raise ShapeError(f"argument {a.name!r}: expected a numpy array or a device array, got {type(v).__name__}")
        pointers.update(self._temps(sizes))

        launchers = self._launchers

        def launch(kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], template: tuple) -> None:
            args = _arguments(template, pointers, scalars)
            if timer is None:
                launchers[kernel](grid, block, args)
                return
            drv.Context.synchronize()
            start = time.perf_counter()
            launchers[kernel](grid, block, args)
            drv.Context.synchronize()
            timer(kernel, time.perf_counter() - start)

        self._each_launch(sizes, launch)
        for host, buf in copies:
            drv.memcpy_dtoh(host, buf)  # synchronises with the launches before it
        if uploaded and not copies:
            drv.Context.synchronize()

    def bound(self, *values: Any) -> Callable[[], None] | None:
        """A function that repeats the call on ``values`` (as for :meth:`__call__`) with each launch's
        arguments converted and packed once: what :class:`~polyfuse.runtime.repeat.LastCall` replays when the
        same device arrays are passed again, so that such a call costs its launches and little more. None
        where a call needs work of its own each time: a numpy argument (copied to the device and back), or
        a launch sequence too long to keep."""
        signature = self.code.signature
        if len(values) != len(signature) or any(isinstance(v, np.ndarray) for v in values):
            return None
        sizes = {a.name: int(v) for a, v in zip(signature, values) if a.kind == "size"}
        scalars = {a.name: v for a, v in zip(signature, values) if a.kind == "scalar"}
        shapes = {name: array.concrete_shape(sizes) for name, array in self.arrays.items()}
        pointers: dict[str, Any] = {a.name: _device_pointer(a.name, v, self._dtypes[a.name], shapes[a.name])
                                    for a, v in zip(signature, values) if a.kind == "array" and a.name in self.arrays}
        pointers.update(self._temps(sizes))
        steps: list[Callable[[], None]] = []

        def keep(kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], template: tuple) -> None:
            steps.append(self._launchers[kernel].packed(grid, block, _arguments(template, pointers, scalars)))

        self._each_launch(sizes, keep)
        if tuple(sorted(sizes.items())) in self._long:
            return None
        steps_ = tuple(steps)

        def run() -> None:
            for step in steps_:
                step()

        return run

    MAX_REMEMBERED_LAUNCHES = 1 << 14
    """Launch sequences up to this long are kept per set of sizes; a longer one (a time loop of many steps
    around its kernels) is worked out again by the host plan at each call rather than held in memory."""

    def _each_launch(self, sizes: Mapping[str, int], launch: Callable[..., None]) -> None:
        """Call ``launch(kernel, grid, block, argument template)`` for every launch at ``sizes``, in order
        (:func:`_template`: the arguments as far as the sizes and host iterators fix them)."""
        key = tuple(sorted(sizes.items()))
        known = self._schedules.get(key)
        if known is None and key not in self._long:
            found: list = []

            def note(step: Launch, grid: tuple[int, ...], block: tuple[int, ...], env: Mapping[str, int]) -> None:
                _check_extents(step, grid, block)
                if len(found) <= self.MAX_REMEMBERED_LAUNCHES:
                    found.append((step.kernel, _pad3(grid), _pad3(block), _template(step.args, env)))

            if run_host_plan(self.plan, note, sizes) <= self.MAX_REMEMBERED_LAUNCHES:
                known = self._schedules[key] = found
            else:
                self._long.add(key)
        if known is None:
            def checked(step: Launch, grid: tuple[int, ...], block: tuple[int, ...], env: Mapping[str, int]) -> None:
                _check_extents(step, grid, block)
                launch(step.kernel, _pad3(grid), _pad3(block), _template(step.args, env))

            run_host_plan(self.plan, checked, sizes)
            return
        for kernel, grid, block, template in known:
            launch(kernel, grid, block, template)

    def _writes(self, name: str) -> bool:
        return any(a.name == name and a.written for la in self.plan.launches() for a in la.args)

    def _temps(self, sizes: Mapping[str, int]) -> dict[str, Any]:
        """Device buffers of the temporaries the kernels take (arrays that are not in the signature)."""
        import pycuda.driver as drv

        key = tuple(sorted(sizes.items()))
        if key not in self._temporaries:
            given = {a.name for a in self.code.signature}
            out = {}
            for name, array in self.arrays.items():
                if name not in given:
                    count = int(np.prod(array.concrete_shape(sizes), dtype=np.int64))
                    out[name] = drv.mem_alloc(max(count * np.dtype(array.dtype.numpy).itemsize, 1))
            self._temporaries[key] = out
        return self._temporaries[key]


class _Launcher:
    """Launches of one prepared kernel. pycuda's ``prepared_call`` imports its packer, sets the legacy block
    shape (a driver call that ``cuLaunchKernel`` does not need) and walks its texture references at every
    launch; here the arguments are packed in the prepared format and given to the launch that call ends
    with, pycuda's ``_launch_kernel`` (the legacy default stream, no dynamic shared memory). pycuda builds
    without it (or kernels with texture references) go through ``prepared_call``."""

    __slots__ = ("_function", "_launch", "_pack", "_format")

    def __init__(self, function: Any) -> None:
        self._function = function
        self._launch = getattr(function, "_launch_kernel", None)
        self._format = getattr(function, "arg_format", None)
        self._pack = None
        if self._launch is not None and self._format is not None and not getattr(function, "texrefs", None):
            try:
                from pycuda._pvt_struct import pack  # the packer prepared_call uses (numpy scalars, allocations)
            except ImportError:
                pack = None
            self._pack = pack

    def __call__(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[Any]) -> None:
        if self._pack is None:
            self._function.prepared_call(grid, block, *args)
        else:
            self._launch(grid, block, self._pack(self._format, *args), 0, None)

    def packed(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[Any]) -> Callable[[], None]:
        """A function making this launch with these arguments, packed now."""
        if self._pack is None:
            function, args = self._function, tuple(args)
            return lambda: function.prepared_call(grid, block, *args)
        launch, buffer = self._launch, self._pack(self._format, *args)
        return lambda: launch(grid, block, buffer, 0, None)


_ARRAY, _VALUE, _SCALAR = 0, 1, 2


def _template(args: Sequence[KernelArg], env: Mapping[str, int]) -> tuple[tuple[int, Any, str], ...]:
    """A launch's arguments as far as the sizes fix them: ``(_VALUE, value, "")`` for a size or host
    iterator, ``(_ARRAY, name, "")`` for a pointer and ``(_SCALAR, numpy type, name)`` for a scalar, both
    filled in at each call."""
    out = []
    for a in args:
        if a.kind == "array":
            out.append((_ARRAY, a.name, ""))
        elif a.kind == "scalar":
            out.append((_SCALAR, np.dtype(a.dtype.numpy).type, a.name))
        else:
            out.append((_VALUE, np.int64(env[a.name]), ""))
    return tuple(out)


def _arguments(template: tuple, pointers: Mapping[str, Any], scalars: Mapping[str, Any]) -> list[Any]:
    """A launch's arguments from its :func:`_template`, this call's pointers and scalars filled in."""
    return [pointers[x] if k == _ARRAY else x if k == _VALUE else x(scalars[name]) for k, x, name in template]


def _format(a: KernelArg) -> str:
    if a.kind == "array":
        return "P"
    if a.kind == "scalar":
        return _FORMAT[a.dtype.name]
    return "q"


def _pad3(extents: Sequence[int]) -> tuple[int, int, int]:
    e = tuple(int(x) for x in extents) + (1, 1, 1)
    return (e[0], e[1], e[2])


def _check_extents(step: Launch, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
    if len(grid) > 3 or len(block) > 3 or math.prod(block) > MAX_THREADS or any(g > m for g, m in zip(grid, MAX_GRID)):
        raise CodegenError(f"kernel {step.kernel}: launch grid {grid} block {block} exceeds CUDA's limits")


def _device_pointer(name: str, value: Any, dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """The device address of a ``__cuda_array_interface__`` array, after checking it matches."""
    if type(value) is DeviceArray and value.dtype == dtype and value.shape == shape and value.c_contiguous:
        return value.pointer  # (read and checked by the binder already)
    iface = value.__cuda_array_interface__
    got_shape = tuple(int(s) for s in iface["shape"])
    got_dtype = np.dtype(iface["typestr"])
    if got_dtype != dtype or got_shape != shape:
        raise ShapeError(f"argument {name!r}: expected a device array {dtype.name} {shape}, got {got_dtype.name} {got_shape}")
    strides = iface.get("strides")
    if strides is not None:
        expected = tuple(math.prod(got_shape[k + 1 :]) * dtype.itemsize for k in range(len(got_shape)))
        if any(s != e for s, e, n in zip(strides, expected, got_shape) if n > 1):
            raise ShapeError(f"argument {name!r}: expected a C-contiguous device array, got strides {tuple(strides)}")
    ptr, readonly = iface["data"]
    return int(ptr)
