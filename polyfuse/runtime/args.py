"""Binding call-time keyword arguments to a Program: shared by every runtime.

``bind(program, kwargs)`` checks what a caller passed and derives the sizes. Each array argument must be a
C-contiguous ``numpy.ndarray`` of exactly the declared dtype and rank; its shape gives one affine equation
per axis, ``shape_expr(sizes) == array.shape[axis]``. Equations with a single unknown size are solved
until none is left, then every equation is checked, so two arrays that disagree on ``N`` are reported.
Sizes no shape determines (a time-step count ``T``) come as keywords; passing an inferable one is allowed
and checked. Finally the sizes must satisfy ``program.context`` (the ``assume=`` constraints), and no two
array arguments may share memory. Every failure is a one-line :class:`ShapeError` naming the argument.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import islpy as isl
import numpy as np

from polyfuse.errors import ShapeError
from polyfuse.ir.printer import format_size
from polyfuse.ir.program import Array, Program
from polyfuse.types import DType, SizeExpr


@dataclass(frozen=True)
class Bound:
    """A checked call: a value for every size param, the array arguments, and the scalar arguments converted
    to numpy scalars of their declared dtype."""

    sizes: Mapping[str, int]
    arrays: Mapping[str, np.ndarray]
    scalars: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("sizes", "arrays", "scalars"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


@dataclass(frozen=True)
class DeviceArray:
    """A GPU array given by a ``__cuda_array_interface__`` object (PyTorch, CuPy, pycuda), seen through the
    same checks as a numpy array: shape, dtype, C-contiguity, writeability. The CUDA runtime uses it in place."""

    obj: Any
    shape: tuple[int, ...]
    dtype: np.dtype
    pointer: int
    c_contiguous: bool
    writeable: bool

    @staticmethod
    def of(obj: Any) -> DeviceArray:
        iface = obj.__cuda_array_interface__
        shape = tuple(int(d) for d in iface["shape"])
        dtype = np.dtype(iface["typestr"])
        strides = iface.get("strides")
        c_strides = tuple(int(np.prod(shape[k + 1 :], dtype=np.int64)) * dtype.itemsize for k in range(len(shape)))
        contiguous = strides is None or tuple(strides) == c_strides or int(np.prod(shape, dtype=np.int64)) <= 1
        pointer, readonly = iface["data"]
        return DeviceArray(obj, shape, dtype, int(pointer or 0), contiguous, not readonly)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return self.obj.__cuda_array_interface__


def bind(program: Program, kwargs: Mapping[str, Any], device_arrays: bool = False) -> Bound:
    """Check ``kwargs`` against ``program``'s signature and infer its sizes; raises :class:`ShapeError`.

    With ``device_arrays`` (the CUDA target), arrays exposing ``__cuda_array_interface__`` are accepted and
    bound as :class:`DeviceArray` values; otherwise only numpy arrays are.
    """
    _check_names(program, kwargs)
    arrays = {
        name: _check_rank(program.arrays[name], kwargs[name], device_arrays)
        for name in program.arguments
        if name in program.arrays
    }
    scalars = {name: _check_scalar(name, dt, kwargs[name]) for name, dt in program.scalars.items()}
    sizes, origin = _keyword_sizes(program, kwargs)
    _infer_sizes(program, arrays, sizes, origin)
    for name, value in arrays.items():
        _check_layout(program.arrays[name], value, sizes)
    _check_shapes(program, arrays, sizes, origin)
    missing = [p for p in program.params if p not in sizes]
    if missing:
        p = missing[0]
        raise ShapeError(f"size {p!r} of {program.name} is not determined by any array shape; pass it as a keyword, e.g. {p}=10")
    _check_context(program, sizes)
    _check_aliasing(program, arrays)
    return Bound({p: sizes[p] for p in program.params}, arrays, scalars)


def describe_array(array: Array, sizes: Mapping[str, int] | None = None) -> str:
    """``float32[N=64, M=32]``: the declared type, with known size values filled in."""
    dims = []
    for e in array.shape:
        text = format_size(e)
        if sizes is not None and e.terms and all(n in sizes for n, _ in e.terms):
            text += f"={_evaluate(e, sizes)}"
        dims.append(text)
    return f"{np.dtype(array.dtype.numpy).name}[{', '.join(dims)}]"


# ----- steps --------------------------------------------------------------------------------------


def _check_names(program: Program, kwargs: Mapping[str, Any]) -> None:
    known = set(program.arguments) | set(program.params)
    for name in kwargs:
        if name not in known:
            raise ShapeError(
                f"unknown argument {name!r} for {program.name}: it takes {', '.join(program.arguments)}"
                + (f" and the sizes {', '.join(program.params)}" if program.params else "")
            )
    for name in program.arguments:
        if name not in kwargs:
            what = describe_array(program.arrays[name]) if name in program.arrays else f"a {program.scalars[name].name} scalar"
            raise ShapeError(f"missing argument {name!r} of {program.name}: expected {what}")


def _check_rank(array: Array, value: Any, device_arrays: bool = False) -> np.ndarray | DeviceArray:
    """``value`` if it is a numpy (or, when allowed, device) array of ``array``'s rank."""
    if device_arrays and not isinstance(value, np.ndarray) and hasattr(value, "__cuda_array_interface__"):
        value = DeviceArray.of(value)
    elif not isinstance(value, np.ndarray):
        if hasattr(value, "__cuda_array_interface__"):
            raise ShapeError(f"argument {array.name!r}: a GPU array was given to a C executable; pass a numpy array (or compile with target='cuda')")
        raise ShapeError(f"argument {array.name!r}: expected a numpy array {describe_array(array)}, got {type(value).__name__}")
    if value.ndim != array.ndim:
        raise ShapeError(f"argument {array.name!r}: expected {describe_array(array)}, got {_describe_value(value)}")
    return value


def _check_layout(array: Array, value: np.ndarray, sizes: Mapping[str, int]) -> None:
    """Exactly the declared dtype, C-contiguous, and writeable when the program writes it."""
    if value.dtype != np.dtype(array.dtype.numpy):
        raise ShapeError(f"argument {array.name!r}: expected {describe_array(array, sizes)}, got {_describe_value(value)}")
    if isinstance(value, DeviceArray):
        if not value.c_contiguous:
            raise ShapeError(f"argument {array.name!r}: expected a C-contiguous GPU array, got a strided view {_describe_value(value)} (call .contiguous())")
        if array.role != "input" and not value.writeable:
            raise ShapeError(f"argument {array.name!r}: the program writes it ({array.role}), but the GPU array given is read-only")
        return
    if not value.flags.c_contiguous:
        raise ShapeError(f"argument {array.name!r}: expected a C-contiguous array, got a strided view {_describe_value(value)} (pass np.ascontiguousarray(...))")
    if array.role != "input" and not value.flags.writeable:
        raise ShapeError(f"argument {array.name!r}: the program writes it ({array.role}), but the array given is read-only")


def _check_scalar(name: str, dtype: DType, value: Any) -> Any:
    """``value`` as a numpy scalar of ``dtype``; integers may not be given fractional values."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if ok and not dtype.is_float and not isinstance(value, numbers.Integral):
        ok = float(value).is_integer()
    if not ok:
        raise ShapeError(f"argument {name!r}: expected a {np.dtype(dtype.numpy).name} scalar, got {value!r}")
    return dtype.numpy(value)


def _keyword_sizes(program: Program, kwargs: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    for p in program.params:
        if p in kwargs and p not in program.arguments:
            v = kwargs[p]
            if not isinstance(v, numbers.Integral) or isinstance(v, (bool, np.bool_)):
                raise ShapeError(f"size {p!r}: expected an integer, got {v!r}")
            sizes[p] = int(v)
            origin[p] = "passed as a keyword"
    return sizes, origin


def _infer_sizes(program: Program, arrays: Mapping[str, np.ndarray], sizes: dict[str, int], origin: dict[str, str]) -> None:
    """Solve ``coeff * p + rest == extent`` for every shape entry with one unknown size ``p``."""
    progress = True
    while progress:
        progress = False
        for name, value in arrays.items():
            for axis, (e, extent) in enumerate(zip(program.arrays[name].shape, value.shape)):
                unknown = [(n, c) for n, c in e.terms if n not in sizes]
                if len(unknown) != 1:
                    continue
                p, c = unknown[0]
                rest = e.constant + sum(k * sizes[n] for n, k in e.terms if n != p)
                if (extent - rest) % c:
                    raise ShapeError(
                        f"argument {name!r}: expected {describe_array(program.arrays[name], sizes)}, got {_describe_value(value)}: "
                        f"no integer {p} gives {format_size(e)} = {extent}"
                    )
                sizes[p] = (extent - rest) // c
                origin[p] = f"from argument {name!r} axis {axis}"
                progress = True


def _check_shapes(program: Program, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int], origin: Mapping[str, str]) -> None:
    for name, value in arrays.items():
        array = program.arrays[name]
        for e, extent in zip(array.shape, value.shape):
            if all(n in sizes for n, _ in e.terms) and _evaluate(e, sizes) != extent:
                why = "; ".join(f"{n}={sizes[n]} {origin[n]}" for n, _ in e.terms)
                raise ShapeError(
                    f"argument {name!r}: expected {describe_array(array, sizes)}, got {_describe_value(value)}" + (f" ({why})" if why else "")
                )


def _check_context(program: Program, sizes: Mapping[str, int]) -> None:
    """The sizes must be a point of ``program.context``; the message lists the constraints they break."""
    context = program.context.params()
    point = context
    for k in range(point.dim(isl.dim_type.param)):
        name = point.get_dim_name(isl.dim_type.param, k)
        point = point.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(point.get_ctx(), sizes[name]))
    if point.is_empty():
        given = ", ".join(f"{p}={sizes[p]}" for p in program.params)
        raise ShapeError(f"sizes {given} violate what {program.name} assumes: {_violated(context, sizes)}")


def _violated(context: isl.Set, sizes: Mapping[str, int]) -> str:
    """The constraints of ``context`` that ``sizes`` break, as text (all of them for a disjunction)."""
    pieces = context.get_basic_sets()
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div):
        return _constraints_text(context)
    broken = []
    for c in pieces[0].get_constraints():
        value = c.get_constant_val().to_python() + sum(
            c.get_coefficient_val(isl.dim_type.param, k).to_python() * sizes[context.get_dim_name(isl.dim_type.param, k)]
            for k in range(context.dim(isl.dim_type.param))
        )
        if (value != 0) if c.is_equality() else (value < 0):
            only = isl.BasicSet.universe(context.get_space()).add_constraint(c)
            broken.append(_constraints_text(isl.Set.from_basic_set(only)))
    return " and ".join(broken) or _constraints_text(context)


def _check_aliasing(program: Program, arrays: Mapping[str, np.ndarray]) -> None:
    """Arguments may share memory only when the program writes neither (two names for one input are
    harmless: nothing changes under either). Otherwise a write through one name would change what the
    other reads mid-run, which the schedule did not account for; copying silently would hide an in-place
    output from the caller, so it is an error."""
    names = list(arrays)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if program.arrays[a].role == "input" and program.arrays[b].role == "input":
                continue
            if _overlap(arrays[a], arrays[b]):
                raise ShapeError(f"arguments {a!r} and {b!r} share memory; pass distinct arrays (e.g. {b}=...copy())")


# ----- helpers ------------------------------------------------------------------------------------


def _overlap(x: np.ndarray | DeviceArray, y: np.ndarray | DeviceArray) -> bool:
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return bool(np.shares_memory(x, y))
    if isinstance(x, DeviceArray) and isinstance(y, DeviceArray):
        return x.pointer < y.pointer + y.nbytes and y.pointer < x.pointer + x.nbytes and x.nbytes > 0 and y.nbytes > 0
    return False


def _evaluate(e: SizeExpr, sizes: Mapping[str, int]) -> int:
    return e.constant + sum(c * sizes[n] for n, c in e.terms)


def _describe_value(value: np.ndarray) -> str:
    return f"{value.dtype.name} {tuple(value.shape)}"


def _constraints_text(context: isl.Set) -> str:
    """The constraints of a params-only set, for a message: ``N >= 3``."""
    text = context.params().to_str()
    body = text[text.index("{") + 1 : text.rindex("}")]
    return body.split(":", 1)[1].strip() if ":" in body else body.strip()
