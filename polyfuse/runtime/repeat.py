"""A call that repeats the previous one: the same numpy arrays, sizes and scalars, passed the same way.

Why: binding a call checks every argument (names, shapes against the sizes, dtypes, layouts, aliasing) and
converts it for ctypes: 5 to 40 microseconds of Python, most of a small kernel's time and about 3 % of a
1.4 ms convolution's. Code that calls an executable in a loop on the same arrays, as benchmarks and
training loops do, pays it on every call unless it uses :meth:`~polyfuse.compile.Executable.prepare`.
:class:`LastCall` remembers the previous call's binding and replays it when every argument is the very
same object in the same state, so the checks it passed still hold.

What "the same" means (:meth:`LastCall.matches`): the same positional count and keyword names in the same
order; each array argument the identical ``numpy.ndarray`` object (held by a weak reference, so that a
dead array's identity, reused by a new one, never matches) with the same shape, strides and dtype, and
still writeable where the program writes it; each other argument (a size, a scalar) equal and of the same
type; and the same calling thread. The CUDA target remembers calls on PyTorch CUDA tensors the same way
(the identical ``torch.Tensor``, at the same device address, shape, strides and dtype, not requiring
grad), where binding and launching cost 30-45 microseconds of Python a call on an H200, more than many
kernels take. Anything else (numpy arrays for CUDA, CuPy arrays, a DLPack capsule, an output left to be
allocated) is bound as usual.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np


class LastCall:
    """The binding of one call (module docstring): ``run()`` repeats it; :meth:`returned` is what the call
    returns, rebuilt from the arguments of the call that matched (the caller's own objects)."""

    __slots__ = ("_positional", "_names", "_refs", "_layouts", "_written", "_single", "_thread", "run", "compiled")

    def __init__(self, args: Sequence[Any], kwargs: Mapping[str, Any], written: Sequence[str],
                 signature: Sequence[str], run: Callable[[], None], compiled: Any) -> None:
        self._positional = len(args)
        self._names = tuple(kwargs)
        by_name = dict(zip(signature, range(len(args))))
        by_name.update({name: len(args) + k for k, name in enumerate(self._names)})
        self._written = tuple(by_name[n] for n in written)
        self._single = len(written) == 1
        refs: list[Any] = []
        layouts: list[Any] = []
        for k, value in enumerate(chain(args, kwargs.values())):
            if type(value) is np.ndarray:
                refs.append(weakref.ref(value))
                layouts.append((value.shape, value.strides, value.dtype, k in self._written))
            elif _is_cuda_tensor(value):
                refs.append(weakref.ref(value))
                layouts.append((tuple(value.shape), value.stride(), value.dtype, value.data_ptr()))
            else:
                refs.append(None)
                layouts.append((type(value), value))
        self._refs = tuple(refs)
        self._layouts = tuple(layouts)
        self._thread = threading.get_ident()  # (OpenMP's workers are placed per calling thread, once)
        self.run = run
        self.compiled = compiled

    @staticmethod
    def possible(args: Sequence[Any], kwargs: Mapping[str, Any], written: Sequence[str], signature: Sequence[str],
                 device: bool = False) -> bool:
        """Whether a call can be remembered: every written array is passed, every value is a plain number
        or an array of the kind the target reads in place (numpy arrays for C; PyTorch CUDA tensors for
        CUDA, ``device``)."""
        given = set(signature[:len(args)]) | set(kwargs)
        array = _is_cuda_tensor if device else (lambda v: type(v) is np.ndarray)
        return all(n in given for n in written) and all(
            array(v) or type(v) in (int, float, bool, np.int64, np.int32, np.float32, np.float64)
            for v in chain(args, kwargs.values()))

    def matches(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Whether ``args`` and ``kwargs`` repeat the remembered call (module docstring)."""
        if (len(args) != self._positional or len(kwargs) != len(self._names) or tuple(kwargs) != self._names
                or threading.get_ident() != self._thread):
            return False
        for value, ref, layout in zip(chain(args, kwargs.values()), self._refs, self._layouts):
            if ref is None:
                if type(value) is not layout[0] or value != layout[1]:
                    return False
            elif ref() is not value:
                return False
            elif type(value) is np.ndarray:
                if (value.shape != layout[0] or value.strides != layout[1] or value.dtype is not layout[2]
                        or (layout[3] and not value.flags.writeable)):
                    return False
            elif (value.data_ptr() != layout[3] or value.shape != layout[0] or value.stride() != layout[1]
                  or value.dtype is not layout[2] or value.requires_grad):
                return False
        return True

    def returned(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """What the matching call returns: None, the one written array, or a tuple of them."""
        if not self._written:
            return None
        values = (*args, *kwargs.values())
        if self._single:
            return values[self._written[0]]
        return tuple(values[k] for k in self._written)


def _is_cuda_tensor(value: Any) -> bool:
    """Whether ``value`` is a plain PyTorch CUDA tensor that polyfuse reads in place (not a subclass, not
    requiring grad, strided): the kind ``runtime/arrays.py`` reads through its own attributes."""
    torch = sys.modules.get("torch")
    return (torch is not None and type(value) is torch.Tensor and value.is_cuda and not value.requires_grad
            and value.layout == torch.strided)
