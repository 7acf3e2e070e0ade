"""Element types, array and scalar annotations, and symbolic size parameters.

``pf.f32[N, M]`` is the annotation of an ``N x M`` float32 array argument; a bare ``pf.f32`` annotates a
scalar argument. ``pf.params("N M")`` creates the symbolic sizes used in shapes and loop bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DType:
    """A scalar element type: its short name, numpy type and C spelling."""

    name: str
    numpy: Any
    c_name: str

    @property
    def is_float(self) -> bool:
        return self.name.startswith("f")

    def __getitem__(self, shape: Any) -> ArrayType:
        if not isinstance(shape, tuple):
            shape = (shape,)
        return ArrayType(self, shape)

    def __repr__(self) -> str:
        return f"pf.{self.name}"


@dataclass(frozen=True)
class ArrayType:
    """The annotation ``dtype[shape]`` of an array argument; shape entries are ints, params or affine
    expressions of params (``N + 1``)."""

    dtype: DType
    shape: tuple[Any, ...]


f32 = DType("f32", np.float32, "float")
f64 = DType("f64", np.float64, "double")
i32 = DType("i32", np.int32, "int")
i8 = DType("i8", np.int8, "signed char")
i16 = DType("i16", np.int16, "short")
i64 = DType("i64", np.int64, "long long")
u8 = DType("u8", np.uint8, "unsigned char")

DTYPES: dict[str, DType] = {d.name: d for d in (f32, f64, i32, i8, i16, i64, u8)}
"""Every element type: the C frontend's ``char``/``signed char`` (i8), ``unsigned char`` (u8), ``short``
(i16), ``int`` (i32), ``long`` (i64), ``float`` (f32) and ``double`` (f64); the DSL spells them ``pf.i8`` ..."""
_RANK = {"i8": 0, "u8": 1, "i16": 2, "i32": 3, "i64": 4, "f32": 5, "f64": 6}


def dtype_of_numpy(dt: Any) -> DType | None:
    """The polyfuse dtype for a numpy dtype, or None when polyfuse has none."""
    for d in DTYPES.values():
        if np.dtype(d.numpy) == np.dtype(dt):
            return d
    return None


def promote(a: DType, b: DType) -> DType:
    """The type of a binary operation on ``a`` and ``b`` in the DSL (float beats int, wider beats narrower).
    The C frontend applies C's own conversions (integer promotion first) before it builds the operation."""
    return a if _RANK[a.name] >= _RANK[b.name] else b


@dataclass(frozen=True)
class Param:
    """A symbolic size. Supports ``+ - *`` by ints so that shapes like ``N + 1`` can be written."""

    name: str

    def __add__(self, other: Any) -> SizeExpr:
        return SizeExpr.of(self) + other

    __radd__ = __add__

    def __sub__(self, other: Any) -> SizeExpr:
        return SizeExpr.of(self) - other

    def __rsub__(self, other: Any) -> SizeExpr:
        return SizeExpr.of(other) - SizeExpr.of(self)

    def __mul__(self, other: Any) -> SizeExpr:
        return SizeExpr.of(self) * other

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SizeExpr:
    """An affine combination of size params: ``constant + sum(coeff * param)``."""

    terms: tuple[tuple[str, int], ...]
    constant: int = 0

    @staticmethod
    def of(value: Any) -> SizeExpr:
        if isinstance(value, SizeExpr):
            return value
        if isinstance(value, Param):
            return SizeExpr(((value.name, 1),))
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return SizeExpr((), int(value))
        raise TypeError(f"a size must be an int or an affine expression of pf.params, not {value!r}")

    def _combine(self, other: Any, sign: int) -> SizeExpr:
        o = SizeExpr.of(other)
        coeffs = dict(self.terms)
        for name, c in o.terms:
            coeffs[name] = coeffs.get(name, 0) + sign * c
        return SizeExpr(tuple((n, c) for n, c in coeffs.items() if c), self.constant + sign * o.constant)

    def __add__(self, other: Any) -> SizeExpr:
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> SizeExpr:
        return self._combine(other, -1)

    def __rsub__(self, other: Any) -> SizeExpr:
        return SizeExpr.of(other)._combine(self, -1)

    def __mul__(self, other: Any) -> SizeExpr:
        if not isinstance(other, (int, np.integer)):
            raise TypeError("sizes may only be multiplied by integer constants (they must stay affine)")
        k = int(other)
        return SizeExpr(tuple((n, c * k) for n, c in self.terms if c * k), self.constant * k)

    __rmul__ = __mul__


def params(names: str) -> tuple[Param, ...] | Param:
    """Symbolic sizes, e.g. ``N, M = pf.params("N M")``; a single name returns a single Param."""
    out = tuple(Param(n) for n in names.replace(",", " ").split())
    if not out:
        raise ValueError("pf.params needs at least one name")
    return out[0] if len(out) == 1 else out
