"""Call-time array arguments from any library, seen as numpy arrays or device arrays without copying.

An executable accepts, for each array argument:

* a ``numpy.ndarray``, used as it is;
* an object exposing ``__cuda_array_interface__`` (PyTorch CUDA tensors, CuPy, pycuda GPUArray): a
  :class:`DeviceArray` (the CUDA target uses it in place; the C target rejects it);
* an object exposing ``__dlpack__`` (PyTorch CPU tensors, JAX, CuPy, numpy itself): on the CPU a numpy
  view of the same memory (``numpy.from_dlpack``), on a CUDA device a :class:`DeviceArray`;
* a DLPack capsule (what ``torch.utils.dlpack.to_dlpack`` returns): the same, read from the capsule;
* an object exposing ``__array_interface__`` (or the buffer protocol): ``numpy.asarray``, a view.

None of these copies data, so outputs written by the compiled code are visible through the caller's
object. Whether the view fits (dtype, shape, strides, writeability) is checked afterwards by
:mod:`polyfuse.runtime.args`; a value none of the above describes is a :class:`ShapeError`.
"""

from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyfuse.errors import ShapeError

DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST, DLPACK_CUDA_MANAGED = 1, 2, 3, 13
_CPU_DEVICES = (DLPACK_CPU, DLPACK_CUDA_HOST)
_CAPSULE_TYPE = "PyCapsule"


@dataclass(frozen=True)
class DeviceArray:
    """A GPU array (``__cuda_array_interface__`` or DLPack on a CUDA device), seen through the same checks
    as a numpy array: shape, dtype, C-contiguity, writeability. The CUDA runtime uses it in place."""

    obj: Any
    shape: tuple[int, ...]
    dtype: np.dtype
    pointer: int
    c_contiguous: bool
    writeable: bool
    strides: tuple[int, ...] | None = None

    @staticmethod
    def of(obj: Any) -> DeviceArray:
        """The device array described by ``obj.__cuda_array_interface__``."""
        iface = obj.__cuda_array_interface__
        shape = tuple(int(d) for d in iface["shape"])
        dtype = np.dtype(iface["typestr"])
        strides = iface.get("strides")
        strides = None if strides is None else tuple(int(s) for s in strides)
        pointer, readonly = iface["data"]
        return DeviceArray(obj, shape, dtype, int(pointer or 0), _is_c_contiguous(shape, strides, dtype.itemsize), not readonly, strides)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        """The interface of the array this stands for (made up from the fields for a DLPack tensor)."""
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.pointer, not self.writeable),
                "strides": self.strides, "version": 3}


def as_array(name: str, value: Any, device_arrays: bool, expected: str = "") -> np.ndarray | DeviceArray:
    """``value`` as a numpy array (host memory) or, when ``device_arrays``, a :class:`DeviceArray`,
    sharing memory with it; :class:`ShapeError` when it is not an array polyfuse can read without a copy
    (``expected``, the declared type such as ``float32[N, M]``, goes into that message)."""
    if isinstance(value, np.ndarray):
        return value
    tensor = _torch_cuda_tensor(value)
    if tensor is not None:
        return _device(name, tensor, device_arrays)
    if hasattr(value, "__cuda_array_interface__"):
        return _device(name, DeviceArray.of(value), device_arrays)
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        device = _device_type(name, value)
        if device in _CPU_DEVICES:
            return _from_dlpack(name, value)
        if device in (DLPACK_CUDA, DLPACK_CUDA_MANAGED):
            return _device(name, _dlpack_device_array(name, value, _export(name, value)), device_arrays)
        raise ShapeError(f"argument {name!r}: a DLPack tensor on device type {device} (polyfuse reads CPU and CUDA memory)")
    if type(value).__name__ == _CAPSULE_TYPE:
        tensor = _read_capsule(name, value)
        if tensor.device in _CPU_DEVICES:
            return np.asarray(_HostTensor(tensor, value))
        if tensor.device in (DLPACK_CUDA, DLPACK_CUDA_MANAGED):
            return _device(name, tensor.device_array(value), device_arrays)
        raise ShapeError(f"argument {name!r}: a DLPack capsule on device type {tensor.device} (polyfuse reads CPU and CUDA memory)")
    if hasattr(value, "__array_interface__") or _has_buffer(value):
        try:
            return np.asarray(value)
        except (TypeError, ValueError, BufferError) as e:
            raise ShapeError(f"argument {name!r}: cannot view {type(value).__name__} as an array: {e}") from None
    raise ShapeError(
        f"argument {name!r}: expected a numpy array {expected}".rstrip() + f", got {type(value).__name__} (objects exposing "
        "__array_interface__, __dlpack__ or __cuda_array_interface__ are accepted too)"
    )


def strides_text(value: np.ndarray | DeviceArray) -> str:
    """``strides (4, 24) B``: the layout of a value, for a message about a strided view."""
    strides = value.strides
    return "strides unknown" if strides is None else f"strides {tuple(int(s) for s in strides)} B"


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-contiguous array of ``shape``."""
    out, step = [], itemsize
    for extent in reversed(shape):
        out.append(step)
        step *= int(extent)
    return tuple(reversed(out))


# ----- helpers ------------------------------------------------------------------------------------

_TORCH_DTYPES = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "int8": "|i1", "int16": "<i2", "int32": "<i4",
                 "int64": "<i8", "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "bool": "|b1"}
"""numpy's name of each PyTorch dtype that ``__cuda_array_interface__`` describes (by the dtype's name)."""
_TORCH_SEEN: dict[Any, np.dtype] = {}  # PyTorch dtype -> numpy dtype, as met


def _torch_cuda_tensor(value: Any) -> DeviceArray | None:
    """A plain PyTorch CUDA tensor read through its own attributes, else None (anything else, a subclass, a
    tensor that requires grad: the general path, with PyTorch's own errors). The same fields as its
    ``__cuda_array_interface__``, which PyTorch builds in Python at several microseconds a call: a call's
    host time counts where kernels take tens of microseconds."""
    torch = sys.modules.get("torch")
    if torch is None or type(value) is not torch.Tensor or not value.is_cuda or value.requires_grad or value.layout != torch.strided:
        return None
    dtype = _TORCH_SEEN.get(value.dtype)
    if dtype is None:
        typestr = _TORCH_DTYPES.get(str(value.dtype).rpartition(".")[2])
        if typestr is None:
            return None
        dtype = _TORCH_SEEN[value.dtype] = np.dtype(typestr)
    shape = tuple(value.shape)
    contiguous = value.is_contiguous()
    strides = None if contiguous else tuple(s * dtype.itemsize for s in value.stride())
    pointer = value.data_ptr() if value.numel() else 0
    return DeviceArray(value, shape, dtype, pointer, _is_c_contiguous(shape, strides, dtype.itemsize), True, strides)


def _device(name: str, array: DeviceArray, device_arrays: bool) -> DeviceArray:
    if not device_arrays:
        raise ShapeError(
            f"argument {name!r}: a GPU array was given to a C executable; pass host memory "
            "(a numpy array, a CPU tensor) or compile with target='cuda'"
        )
    return array


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    """Whether ``strides`` (bytes; None means C order) describe a C-contiguous layout; axes of extent 1
    may have any stride, and an empty array is contiguous."""
    if strides is None or math.prod(shape) <= 1:
        return True
    return all(s == e for s, e, n in zip(strides, c_strides(shape, itemsize), shape) if n > 1)


def _device_type(name: str, value: Any) -> int:
    try:
        return int(value.__dlpack_device__()[0])
    except Exception as e:  # any library's failure to describe itself
        raise ShapeError(f"argument {name!r}: its __dlpack_device__ failed: {e}") from None


def _export(name: str, value: Any) -> Any:
    try:
        return value.__dlpack__()
    except Exception as e:  # e.g. torch: "Can't export tensors that require gradient, use tensor.detach()"
        raise ShapeError(f"argument {name!r}: cannot share its memory through DLPack: {e}") from None


def _from_dlpack(name: str, value: Any) -> np.ndarray:
    try:
        return np.from_dlpack(value)
    except Exception as e:  # BufferError, TypeError, RuntimeError depending on the producer
        raise ShapeError(f"argument {name!r}: cannot share its memory through DLPack: {e}") from None


def _has_buffer(value: Any) -> bool:
    try:
        memoryview(value).release()
    except TypeError:
        return False
    return True


class _HostTensor:
    """A DLPack capsule's host memory as an ``__array_interface__``; the numpy view made from it keeps this
    object, hence the capsule and the producer's memory, alive. (``numpy.from_dlpack`` would mark the view
    of an unversioned capsule read-only, so outputs could not be written through it.)"""

    def __init__(self, tensor: _TensorInfo, capsule: Any) -> None:
        self.capsule = capsule
        self.__array_interface__ = {"shape": tensor.shape, "typestr": tensor.dtype.str, "strides": tensor.strides,
                                    "data": (tensor.pointer, not tensor.writeable), "version": 3}


# The C structs of the DLPack ABI (dlpack.h, versions 0.x and 1.x), read with ctypes.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_READ_ONLY_FLAG = 1
_CAPSULE_NAMES = (b"dltensor", b"dltensor_versioned")
_pythonapi = ctypes.pythonapi
_pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
_pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
_pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class _TensorInfo:
    device: int
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # bytes
    dtype: np.dtype
    writeable: bool

    def device_array(self, owner: Any) -> DeviceArray:
        contiguous = _is_c_contiguous(self.shape, self.strides, self.dtype.itemsize)
        return DeviceArray(owner, self.shape, self.dtype, self.pointer, contiguous, self.writeable, self.strides)


def _read_capsule(name: str, capsule: Any) -> _TensorInfo:
    """The tensor a DLPack capsule describes (it stays unconsumed: its owner keeps the memory alive)."""
    kind = _pythonapi.PyCapsule_GetName(capsule)
    if kind not in _CAPSULE_NAMES:
        raise ShapeError(f"argument {name!r}: a capsule that is not an unused DLPack tensor (its name is {kind!r})")
    address = _pythonapi.PyCapsule_GetPointer(capsule, kind)
    writeable = True
    if kind == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(address)
        tensor, writeable = managed.dl_tensor, not managed.flags & _READ_ONLY_FLAG
    else:
        tensor = _DLTensor.from_address(address)
    codes = {0: "i", 1: "u", 2: "f"}
    if tensor.dtype.code not in codes or tensor.dtype.lanes != 1:
        raise ShapeError(f"argument {name!r}: a DLPack tensor of an element type polyfuse has no dtype for")
    dtype = np.dtype(f"{codes[tensor.dtype.code]}{tensor.dtype.bits // 8}")
    shape = tuple(int(tensor.shape[k]) for k in range(tensor.ndim))
    strides = None if not tensor.strides else tuple(int(tensor.strides[k]) * dtype.itemsize for k in range(tensor.ndim))
    pointer = int(tensor.data or 0) + int(tensor.byte_offset)
    return _TensorInfo(int(tensor.device.device_type), pointer, shape, strides, dtype, writeable)


def _dlpack_device_array(name: str, owner: Any, capsule: Any) -> DeviceArray:
    return _read_capsule(name, capsule).device_array((owner, capsule))
