"""Element types, array and scalar annotations, and symbolic size parameters.

``pf.f32[N, M]`` is the annotation of an ``N x M`` float32 array argument; a bare ``pf.f32`` annotates a
scalar argument. ``pf.params("N M")`` creates the symbolic sizes used in shapes and loop bounds.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyfuse.errors import api_boundary, user_source_error


@dataclass(frozen=True)
class DType:
    """A scalar element type: its short name, numpy type and C spelling."""

    name: str
    numpy: Any
    c_name: str

    @property
    def is_float(self) -> bool:
        return self.name.startswith("f")

    @property
    def is_unsigned(self) -> bool:
        return self.name.startswith("u")

    @property
    def bits(self) -> int:
        return np.dtype(self.numpy).itemsize * 8

    @api_boundary
    def __getitem__(self, shape: Any) -> ArrayType:
        """``pf.f32[N, M]``; every extent must be a non-negative int or an affine expression of sizes."""
        if not isinstance(shape, tuple):
            shape = (shape,)
        for extent in shape:
            _check_extent(self, shape, extent)
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
u16 = DType("u16", np.uint16, "unsigned short")
u32 = DType("u32", np.uint32, "unsigned int")
u64 = DType("u64", np.uint64, "unsigned long long")

DTYPES: dict[str, DType] = {d.name: d for d in (f32, f64, i32, i8, i16, i64, u8, u16, u32, u64)}
"""Every element type: the C frontend's ``char``/``signed char`` (i8), ``unsigned char`` (u8), ``short``
(i16), ``unsigned short`` (u16), ``int`` (i32), ``unsigned``/``uint32_t`` (u32), ``long`` (i64), ``unsigned
long``/``uint64_t``/``size_t`` (u64), ``float`` (f32) and ``double`` (f64); the DSL spells them ``pf.i8`` ...
Unsigned types compute modulo 2**bits (numpy's and C's unsigned arithmetic agree)."""
_RANK = {"i8": 0, "u8": 1, "i16": 2, "u16": 3, "i32": 4, "u32": 5, "i64": 6, "u64": 7, "f32": 8, "f64": 9}


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

    @api_boundary
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

    @api_boundary
    def __mul__(self, other: Any) -> SizeExpr:
        if not isinstance(other, (int, np.integer)) or isinstance(other, bool):
            raise user_source_error(
                f"{_size_text(self)} * {_size_text(other)}: sizes may only be multiplied by integer constants (shapes and bounds must stay affine)",
                f"{_size_text(self)} * {_size_text(other)}",
                hint="declare the product as a size of its own, e.g. NM = pf.params('NM')" if isinstance(other, (Param, SizeExpr)) else None,
            )
        k = int(other)
        return SizeExpr(tuple((n, c * k) for n, c in self.terms if c * k), self.constant * k)

    __rmul__ = __mul__


@api_boundary
def params(names: str) -> tuple[Param, ...] | Param:
    """Symbolic sizes, e.g. ``N, M = pf.params("N M")``; a single name returns a single Param.

    Names are separated by spaces or commas; each must be a Python identifier (isl and the generated C
    use it as a variable), not a keyword, and not repeated."""
    if not isinstance(names, str):
        raise user_source_error(f"pf.params expects a string of names such as \"N M\", got {type(names).__name__}", "pf.params")
    out = tuple(Param(n) for n in names.replace(",", " ").split())
    if not out:
        raise user_source_error("pf.params needs at least one name, e.g. pf.params(\"N M\")", "pf.params")
    seen: set[str] = set()
    for p in out:
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name.startswith("__"):
            raise user_source_error(f"pf.params: {p.name!r} is not a valid size name (an identifier such as N or n_rows)", p.name)
        if p.name in seen:
            raise user_source_error(f"pf.params: the size {p.name!r} is named twice", p.name)
        seen.add(p.name)
    return out[0] if len(out) == 1 else out


def _size_text(value: Any) -> str:
    """``2*N + M - 1``: a size expression as written."""
    if not isinstance(value, SizeExpr):
        return repr(value)
    parts = [n if c == 1 else f"{c}*{n}" for n, c in value.terms]
    if value.constant or not parts:
        parts.append(str(value.constant))
    return " + ".join(parts).replace("+ -", "- ")


def _check_extent(dtype: DType, shape: tuple[Any, ...], extent: Any) -> None:
    """An array extent: a non-negative int, a size, or an affine expression of sizes."""
    text = f"{dtype!r}[{', '.join(_size_text(e) for e in shape)}]"
    if isinstance(extent, (Param, SizeExpr)):
        return
    if isinstance(extent, (int, np.integer)) and not isinstance(extent, bool):
        if extent < 0:
            raise user_source_error(f"{text}: the extent {int(extent)} is negative; extents are sizes (>= 0)", text)
        return
    raise user_source_error(
        f"{text}: an extent must be an int or an affine expression of pf.params sizes in the shape, not {type(extent).__name__} {extent!r}",
        text,
    )
