"""Binding call-time arguments to a Program: shared by every runtime.

``Binder(program)(args, kwargs)`` checks what a caller passed and derives the sizes. Positional arguments
come in signature order (``program.arguments``), keywords by name; sizes no shape determines (a time-step
count ``T``) come as keywords, and passing an inferable one is allowed and checked. Each array argument is
anything :func:`polyfuse.runtime.arrays.as_array` can view without a copy (numpy, ``__array_interface__``,
DLPack, ``__cuda_array_interface__``); the view must have exactly the declared dtype and rank and be
C-contiguous. Its shape gives one affine equation per axis, ``shape_expr(sizes) == array.shape[axis]``.
Equations with a single unknown size are solved until none is left, then every equation is checked, so two
arrays that disagree on ``N`` are reported. Finally the sizes must satisfy ``program.context`` (the
``assume=`` constraints), and no two array arguments the program writes may share memory. Every failure is a
one-line :class:`ShapeError` naming the argument.

With ``allocate=True`` output arrays (role ``output``) that were not passed are allocated (zero-filled
numpy arrays) once the sizes are known. :attr:`Bound.results` holds what an executable returns: every array
the program writes, in signature order, as the caller's own object when it was passed.

The checks that depend only on the arguments' shapes, dtypes and keyword sizes (size inference, the shape
equations, the context) run once per distinct such key and are cached by the :class:`Binder`; later calls
with the same key only check layout, writeability, scalars and aliasing, which keeps the per-call overhead
of a compiled executable to a few microseconds.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import islpy as isl
import numpy as np

from polyfuse.errors import ShapeError
from polyfuse.ir.printer import format_size
from polyfuse.ir.program import Array, Program
from polyfuse.runtime.arrays import DeviceArray, as_array, strides_text
from polyfuse.types import DType, SizeExpr

__all__ = ["Bound", "Binder", "DeviceArray", "bind", "check_params", "describe_array", "gather"]


class Bound(NamedTuple):
    """A checked call: a value for every size param (read-only), the array arguments (numpy arrays or
    :class:`DeviceArray`), the scalar arguments converted to numpy scalars of their declared dtype, the
    arrays' addresses (host or device, by name), the values an executable returns (``results``: the written
    arrays in signature order, as given or as allocated) and ``key``, the sizes as a sorted tuple.

    A named tuple rather than a dataclass: one is made per call, and this is the cheapest immutable record."""

    sizes: Mapping[str, int]
    arrays: Mapping[str, Any]
    scalars: Mapping[str, Any]
    addresses: Mapping[str, int]
    results: tuple[Any, ...]
    key: tuple[tuple[str, int], ...]

    @property
    def returned(self) -> Any:
        """What a call returns: None when the program writes no argument, the one written array, or a tuple."""
        if not self.results:
            return None
        return self.results[0] if len(self.results) == 1 else self.results


def gather(program: Program, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Positional ``args`` (in signature order) and ``kwargs`` merged into one dict by name."""
    names = program.arguments
    if len(args) > len(names):
        raise ShapeError(
            f"{program.name} takes {len(names)} positional argument(s) ({', '.join(names)}), got {len(args)}"
            + (f"; pass sizes by keyword ({', '.join(program.params)})" if program.params else "")
        )
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in values:
            raise ShapeError(f"argument {name!r} of {program.name} given both by position and by keyword")
        values[name] = value
    return values


def bind(program: Program, kwargs: Mapping[str, Any], device_arrays: bool = False, allocate: bool = False) -> Bound:
    """Check ``kwargs`` against ``program``'s signature and infer its sizes; raises :class:`ShapeError`.

    With ``device_arrays`` (the CUDA target), GPU arrays are accepted and bound as :class:`DeviceArray`
    values; otherwise only host memory is. With ``allocate``, missing outputs are allocated.
    """
    return Binder(program, device_arrays, allocate).bind(kwargs)


class Binder:
    """The argument checks of one program for one runtime, with the shape-only checks cached per key."""

    def __init__(self, program: Program, device_arrays: bool = False, allocate: bool = False) -> None:
        self.program = program
        self.device_arrays = device_arrays
        self.allocate = allocate
        self._arrays = [(n, program.arrays[n]) for n in program.arguments if n in program.arrays]
        self._scalars = list(program.scalars.items())
        self._expected = {n: describe_array(a) for n, a in self._arrays}
        self._written = tuple(n for n, a in self._arrays if a.role != "input")
        self._keyword_sizes = tuple(p for p in program.params if p not in program.arguments)
        self._known = set(program.arguments) | set(program.params)
        self._cache: dict[tuple, tuple[Mapping[str, int], tuple[tuple[str, int], ...]]] = {}

    @property
    def written(self) -> tuple[str, ...]:
        """The array arguments the program writes, in signature order (what a call returns)."""
        return self._written

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Bound:
        """Bind positional ``args`` and keyword ``kwargs`` (see :func:`gather`)."""
        return self.bind(gather(self.program, args, kwargs) if args else kwargs)

    def bind(self, values: Mapping[str, Any]) -> Bound:
        """Bind arguments given by name."""
        program = self.program
        if len(values) > len(self._known) or any(name not in self._known for name in values):
            _check_names(program, values, self.allocate)
        arrays: dict[str, Any] = {}
        shapes = []
        for name, array in self._arrays:
            value = values.get(name, _MISSING)
            if value is _MISSING:
                if not (self.allocate and array.role == "output"):
                    _check_names(program, values, self.allocate)
                shapes.append(None)
                continue
            value = as_array(name, value, self.device_arrays, self._expected[name])
            arrays[name] = value
            shapes.append((value.shape, value.dtype))
        for name, _ in self._scalars:
            if name not in values:
                _check_names(program, values, self.allocate)
        key = (tuple(shapes), tuple(values.get(p) for p in self._keyword_sizes))
        try:
            entry = self._cache.get(key)
        except TypeError:  # an unhashable size value: the checks below reject it
            entry = None
            _keyword_sizes(program, values)
        if entry is None:
            entry = self._cache[key] = self._check_shapes(values, arrays)
        sizes, size_key = entry
        addresses: dict[str, int] = {}
        for name, array in self._arrays:
            value = arrays.get(name)
            if value is None:
                value = arrays[name] = np.zeros(array.concrete_shape(sizes), array.dtype.numpy)
            else:
                _check_layout(array, value)
            addresses[name] = value.pointer if isinstance(value, DeviceArray) else value.ctypes.data
        _check_aliasing(program, arrays, addresses)
        scalars = {name: _check_scalar(name, dt, values[name]) for name, dt in self._scalars}
        results = tuple(values[n] if n in values else arrays[n] for n in self._written)
        return Bound(sizes, arrays, scalars, addresses, results, size_key)

    def _check_shapes(self, values: Mapping[str, Any], arrays: Mapping[str, Any]) -> tuple[Mapping[str, int], tuple[tuple[str, int], ...]]:
        """The sizes of a first call with these shapes: inferred, checked against every shape and the context."""
        program = self.program
        for name, value in arrays.items():
            array = program.arrays[name]
            if value.ndim != array.ndim:
                raise ShapeError(f"argument {name!r}: expected {describe_array(array)}, got {_describe_value(value)}")
        sizes, origin = _keyword_sizes(program, values)
        _infer_sizes(program, arrays, sizes, origin)
        for name, value in arrays.items():
            array = program.arrays[name]
            if value.dtype != np.dtype(array.dtype.numpy):
                raise ShapeError(f"argument {name!r}: expected {describe_array(array, sizes)}, got {_describe_value(value)}")
        _check_shapes(program, arrays, sizes, origin)
        missing = [p for p in program.params if p not in sizes]
        if missing:
            p = missing[0]
            raise ShapeError(f"size {p!r} of {program.name} is not determined by any array shape; pass it as a keyword, e.g. {p}=10")
        _check_context(program, sizes)
        ordered = {p: sizes[p] for p in program.params}
        return MappingProxyType(ordered), tuple(sorted(ordered.items()))


_MISSING = object()


def check_params(program: Program, params: Mapping[str, Any] | None, what: str = "params") -> None:
    """Sizes given up front (``params=`` of ``pf.schedule``/``pf.compile``, the CLI's ``--size``): known
    names, non-negative integers, and values the program's assumptions allow; :class:`ShapeError` else."""
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise ShapeError(f"{what} must be a dict of sizes such as {{'N': 1024}}, got {type(params).__name__}")
    for name, value in params.items():
        if name not in program.params:
            sizes = ", ".join(program.params) or "none"
            raise ShapeError(f"{what} names {name!r}, which is not a size of {program.name} (its sizes: {sizes})")
        if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
            raise ShapeError(f"{what}: size {name} must be an integer, got {value!r}")
        if value < 0:
            raise ShapeError(f"{what}: size {name}={int(value)} is negative; sizes are extents and loop counts (>= 0)")
    _check_context(program, {k: int(v) for k, v in params.items()})


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


def _check_names(program: Program, values: Mapping[str, Any], allocate: bool = False) -> None:
    known = set(program.arguments) | set(program.params)
    for name in values:
        if name not in known:
            raise ShapeError(
                f"unknown argument {name!r} for {program.name}: it takes {', '.join(program.arguments)}"
                + (f" and the sizes {', '.join(program.params)}" if program.params else "")
            )
    for name in program.arguments:
        if name not in values:
            if allocate and name in program.arrays and program.arrays[name].role == "output":
                continue
            what = describe_array(program.arrays[name]) if name in program.arrays else f"a {program.scalars[name].name} scalar"
            raise ShapeError(f"missing argument {name!r} of {program.name}: expected {what}")


def _check_layout(array: Array, value: np.ndarray | DeviceArray) -> None:
    """C-contiguous, and writeable when the program writes it (the dtype is checked with the shapes)."""
    if isinstance(value, DeviceArray):
        contiguous, writeable, what = value.c_contiguous, value.writeable, "GPU array"
    else:
        contiguous, writeable, what = value.flags.c_contiguous, value.flags.writeable, "array"
    if not contiguous:
        raise ShapeError(
            f"argument {array.name!r}: expected a C-contiguous {what}, got a strided view {_describe_value(value)} "
            f"with {strides_text(value)} (make it contiguous first: np.ascontiguousarray(x), x.contiguous())"
        )
    if array.role != "input" and not writeable:
        raise ShapeError(f"argument {array.name!r}: the program writes it ({array.role}), but the {what} given is read-only")


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
        if name in sizes:
            point = point.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(point.get_ctx(), sizes[name]))
    if point.is_empty():
        given = ", ".join(f"{p}={sizes[p]}" for p in program.params if p in sizes)
        for a in program.assumptions:  # derived from an access: name it
            if not a.holds(sizes):
                raise ShapeError(f"sizes {given}: {program.name} {a.statement} (line {a.line}) accesses `{a.access}`, which is inside "
                                 f"its array only when {_constraints_text(a.condition)}")
        raise ShapeError(f"sizes {given} violate what {program.name} assumes: {_violated(context, sizes)}")


def _violated(context: isl.Set, sizes: Mapping[str, int]) -> str:
    """The constraints of ``context`` that ``sizes`` break, as text (all of them for a disjunction)."""
    pieces = context.get_basic_sets()
    names = [context.get_dim_name(isl.dim_type.param, k) for k in range(context.dim(isl.dim_type.param))]
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div) or any(n not in sizes for n in names):
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


def _check_aliasing(program: Program, arrays: Mapping[str, Any], addresses: Mapping[str, int]) -> None:
    """Arguments may share memory only when the program writes neither (two names for one input are
    harmless: nothing changes under either). Otherwise a write through one name would change what the
    other reads mid-run, which the schedule did not account for; copying silently would hide an in-place
    output from the caller, so it is an error. Every array is C-contiguous by now, so two share memory
    exactly when their address ranges overlap."""
    spans = []  # (name, read only, kind of memory, first byte, end) of each non-empty array
    for name, x in arrays.items():
        nbytes = x.nbytes
        if nbytes:
            spans.append((name, program.arrays[name].role == "input", type(x), addresses[name], addresses[name] + nbytes))
    for i, (a, a_input, a_type, a_lo, a_hi) in enumerate(spans):
        for b, b_input, b_type, b_lo, b_hi in spans[i + 1 :]:
            if a_type is b_type and not (a_input and b_input) and a_lo < b_hi and b_lo < a_hi:
                raise ShapeError(f"arguments {a!r} and {b!r} share memory; pass distinct arrays (e.g. {b}=...copy())")


def _evaluate(e: SizeExpr, sizes: Mapping[str, int]) -> int:
    return e.constant + sum(c * sizes[n] for n, c in e.terms)


def _describe_value(value: np.ndarray | DeviceArray) -> str:
    return f"{value.dtype.name} {tuple(value.shape)}"


def _constraints_text(context: isl.Set) -> str:
    """The constraints of a params-only set, for a message: ``N >= 3``."""
    text = context.params().to_str()
    body = text[text.index("{") + 1 : text.rindex("}")]
    return body.split(":", 1)[1].strip() if ":" in body else body.strip()
