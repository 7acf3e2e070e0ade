"""Binding of GPU arrays (``__cuda_array_interface__``) at call time, checked without a GPU."""

import numpy as np
import pytest

import polyfuse as pf
from examples.kernels import add_exp
from polyfuse.runtime.args import DeviceArray, bind


class FakeDeviceArray:
    """Stands in for a torch/cupy tensor: only the interface, pointing at a host buffer."""

    def __init__(self, host: np.ndarray, readonly: bool = False, strides=None):
        self.host = host
        self.__cuda_array_interface__ = {
            "shape": host.shape, "typestr": host.dtype.str, "data": (host.ctypes.data, readonly),
            "strides": strides, "version": 3,
        }


def test_device_arrays_bind_for_cuda_and_infer_sizes():
    a, c = FakeDeviceArray(np.zeros((6, 4), np.float32)), FakeDeviceArray(np.zeros((6, 4), np.float32))
    bound = bind(add_exp, {"A": a, "C": c}, device_arrays=True)
    assert dict(bound.sizes) == {"N": 6, "M": 4}
    assert isinstance(bound.arrays["A"], DeviceArray) and bound.arrays["A"].obj is a


def test_device_array_checks_dtype_layout_and_aliasing():
    a = FakeDeviceArray(np.zeros((6, 4), np.float64))
    with pytest.raises(pf.ShapeError, match="'A'.*float32"):
        bind(add_exp, {"A": a, "C": FakeDeviceArray(np.zeros((6, 4), np.float32))}, device_arrays=True)
    strided = FakeDeviceArray(np.zeros((6, 4), np.float32), strides=(4, 24))
    with pytest.raises(pf.ShapeError, match="C-contiguous"):
        bind(add_exp, {"A": strided, "C": FakeDeviceArray(np.zeros((6, 4), np.float32))}, device_arrays=True)
    with pytest.raises(pf.ShapeError, match="read-only"):
        bind(add_exp, {"A": FakeDeviceArray(np.zeros((6, 4), np.float32)),
                       "C": FakeDeviceArray(np.zeros((6, 4), np.float32), readonly=True)}, device_arrays=True)
    same = FakeDeviceArray(np.zeros((6, 4), np.float32))
    with pytest.raises(pf.ShapeError, match="share memory"):
        bind(add_exp, {"A": same, "C": same}, device_arrays=True)


def test_device_array_rejected_by_c_target():
    a, c = FakeDeviceArray(np.zeros((6, 4), np.float32)), FakeDeviceArray(np.zeros((6, 4), np.float32))
    with pytest.raises(pf.ShapeError, match="GPU array.*C executable"):
        bind(add_exp, {"A": a, "C": c})
