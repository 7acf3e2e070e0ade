"""The ops graph: ``pf.Graph`` records tensor operations and ``g.build(**outputs)`` lowers them to a Program.

A :class:`Tensor` is a node of the graph: a graph input (``g.input(name, shape, dtype)``) or the value of an
operation on other tensors (``x @ w + b``, ``pf.ops.softmax(y)``). Nothing is computed when an operation is
called; it only records the tensor's shape (sizes are ints or affine expressions of ``pf.params``), its
dtype, and how to *lower* it: a function that describes loops and statements to a
:class:`~polyfuse.ir.builder.ProgramBuilder`, exactly as the DSL and C frontends do.

``g.build(y=t)`` lowers every tensor the outputs depend on, in the order they were created: graph inputs
become input arrays, the outputs by keyword become output arrays (written directly by the operation that
computes them), and every other tensor becomes a temporary array. No operation is special-cased later:
fusing the statements and contracting the temporaries is the general scheduler's job.

Element formulas are written with :class:`Val`, a thin operator-overloading wrapper over
:mod:`polyfuse.ir.expr` nodes, and the two primitive lowerings every operator builds on are here:

* :func:`pointwise`: ``out[I] = f(a[bcast(I)], b[bcast(I)], ...)`` over the broadcast shape (numpy rules);
* :func:`reduction`: ``out[kept(I)] = init`` then ``out[kept(I)] op= f(inputs[I])`` over the full shape.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import islpy as isl

from polyfuse.analysis.checks import check_program
from polyfuse.errors import PolyfuseError, ShapeError
from polyfuse.ir.builder import ProgramBuilder
from polyfuse.ir.expr import Binary, Cast, Const, Expr, IndexValue, Read, Unary, format_pw_aff
from polyfuse.ir.printer import format_size
from polyfuse.ir.program import Program
from polyfuse.types import DType, Param, SizeExpr, f32, promote

Size = SizeExpr
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


# ----- sizes and shapes ---------------------------------------------------------------------------------
def size_of(value: Any) -> SizeExpr:
    """``value`` (an int, a ``pf.params`` size or an affine expression of them) as a :class:`SizeExpr`."""
    if isinstance(value, bool):
        raise TypeError("a size cannot be a bool")
    return SizeExpr.of(value)


def same_size(a: SizeExpr, b: SizeExpr) -> bool:
    return a.constant == b.constant and dict(a.terms) == dict(b.terms)


def is_one(s: SizeExpr) -> bool:
    return not s.terms and s.constant == 1


def shape_text(shape: Sequence[SizeExpr]) -> str:
    return "(" + ", ".join(format_size(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(op: str, *shapes: tuple[SizeExpr, ...]) -> tuple[SizeExpr, ...]:
    """The numpy broadcast of ``shapes`` (right-aligned; a dimension of size 1 stretches)."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[SizeExpr] = []
    for k in range(ndim):
        dim: SizeExpr | None = None
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if dim is None or is_one(dim):
                dim = d
            elif not is_one(d) and not same_size(d, dim):
                raise ShapeError(f"{op}: shapes {' and '.join(shape_text(s) for s in shapes)} cannot be broadcast together "
                                 f"(dimension {k - ndim}: {format_size(dim)} vs {format_size(d)})")
        out.append(dim if dim is not None else SizeExpr.of(1))
    return tuple(out)


def normalize_axes(op: str, axis: int | Sequence[int] | None, ndim: int, shape: Sequence[SizeExpr]) -> tuple[int, ...]:
    """Non-negative, sorted, distinct axes; ``None`` means every axis."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool) or not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a!r} is out of range for a tensor of shape {shape_text(shape)} ({ndim} dimensions)")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r} for shape {shape_text(shape)}")
    return tuple(sorted(out))


# ----- element formulas ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Val:
    """An element formula: wraps an :class:`Expr` with ``+ - * /`` and unary minus; numbers take its type."""

    expr: Expr

    @property
    def dtype(self) -> DType:
        return self.expr.dtype

    def _other(self, o: Any) -> Val:
        return o if isinstance(o, Val) else const(o, self.dtype)

    def _bin(self, op: str, a: Val, b: Val) -> Val:
        dt = promote(a.dtype, b.dtype)
        return Val(Binary(op, cast(a, dt).expr, cast(b, dt).expr, dt))

    def __add__(self, o: Any) -> Val:
        return self._bin("+", self, self._other(o))

    def __radd__(self, o: Any) -> Val:
        return self._bin("+", self._other(o), self)

    def __sub__(self, o: Any) -> Val:
        return self._bin("-", self, self._other(o))

    def __rsub__(self, o: Any) -> Val:
        return self._bin("-", self._other(o), self)

    def __mul__(self, o: Any) -> Val:
        return self._bin("*", self, self._other(o))

    def __rmul__(self, o: Any) -> Val:
        return self._bin("*", self._other(o), self)

    def __truediv__(self, o: Any) -> Val:
        return self._bin("/", self, self._other(o))

    def __rtruediv__(self, o: Any) -> Val:
        return self._bin("/", self._other(o), self)

    def __neg__(self) -> Val:
        return Val(Unary("neg", self.expr, self.dtype))


def const(value: float | int, dtype: DType) -> Val:
    return Val(Const(float(value) if dtype.is_float else int(value), dtype))


def cast(v: Val, dtype: DType) -> Val:
    if v.dtype == dtype:
        return v
    if isinstance(v.expr, Const):
        return const(v.expr.value, dtype)
    return Val(Cast(v.expr, dtype))


def unary(op: str, v: Val) -> Val:
    """``exp``, ``log``, ``sqrt``, ``tanh``, ``abs``, ``neg`` of a float value."""
    return Val(Unary(op, v.expr, v.dtype))


def binary(op: str, a: Val, b: Val | float) -> Val:
    """``max``, ``min``, ``pow`` (or an arithmetic operator) of two values."""
    b = a._other(b)
    return a._bin(op, a, b)


# ----- the graph ----------------------------------------------------------------------------------------
Lower = Callable[["Lowering", "Tensor", str], None]


@dataclass(eq=False)
class Tensor:
    """A value of a :class:`Graph`: its shape, dtype, and the operation that computes it (None: an input).

    Supports ``+ - * /`` (numpy broadcasting, Python numbers) and ``@`` (``pf.ops.matmul``).
    """

    graph: Graph
    shape: tuple[SizeExpr, ...]
    dtype: DType
    op: str
    inputs: tuple[Tensor, ...] = ()
    lower: Lower | None = None
    name: str | None = None
    index: int = 0
    line: int = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __add__(self, o: Any) -> Tensor:
        return elementwise("add", lambda a, b: a + b, self, o)

    def __radd__(self, o: Any) -> Tensor:
        return elementwise("add", lambda a, b: a + b, o, self)

    def __sub__(self, o: Any) -> Tensor:
        return elementwise("sub", lambda a, b: a - b, self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return elementwise("sub", lambda a, b: a - b, o, self)

    def __mul__(self, o: Any) -> Tensor:
        return elementwise("mul", lambda a, b: a * b, self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return elementwise("mul", lambda a, b: a * b, o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return elementwise("div", lambda a, b: a / b, self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return elementwise("div", lambda a, b: a / b, o, self)

    def __neg__(self) -> Tensor:
        return elementwise("neg", lambda a: -a, self)

    def __matmul__(self, o: Any) -> Tensor:
        return self.graph.matmul_hook(self, o)

    def __rmatmul__(self, o: Any) -> Tensor:
        return self.graph.matmul_hook(o, self)

    def __repr__(self) -> str:
        what = f"input {self.name!r}" if self.lower is None else self.op
        return f"<pf.Tensor {what} {shape_text(self.shape)} {self.dtype.name}>"

    __hash__ = object.__hash__


class Graph:
    """A graph of tensor operations; ``build(**outputs)`` returns a :class:`Program` (see the module doc)."""

    #: set by :mod:`polyfuse.ops.linalg` so that ``a @ b`` works without a circular import
    matmul_hook: Callable[[Any, Any], Tensor]

    def __init__(self, name: str = "graph") -> None:
        if not name.isidentifier():
            raise PolyfuseError(f"a graph name must be an identifier, not {name!r}")
        self.name = name
        self.filename, self.line = _caller()
        self.tensors: list[Tensor] = []
        self.inputs: dict[str, Tensor] = {}

    def input(self, name: str, shape: Sequence[Any] | Any, dtype: DType = f32) -> Tensor:
        """A graph input array ``name`` of ``shape`` (ints or ``pf.params`` sizes) and ``dtype``."""
        if not isinstance(name, str) or not name.isidentifier():
            raise PolyfuseError(f"an input name must be an identifier, not {name!r}")
        if name in self.inputs:
            raise PolyfuseError(f"graph {self.name!r} already has an input named {name!r}")
        if not isinstance(dtype, DType):
            raise PolyfuseError(f"input {name!r}: dtype must be pf.f32, pf.f64 or pf.i32, not {dtype!r}")
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        try:
            sizes = tuple(size_of(d) for d in dims)
        except TypeError as e:
            raise ShapeError(f"input {name!r}: shape {shape!r}: {e}") from None
        t = self._add(Tensor(self, sizes, dtype, "input", name=name))
        self.inputs[name] = t
        return t

    def apply(self, op: str, inputs: Sequence[Tensor], shape: Sequence[SizeExpr], dtype: DType, lower: Lower) -> Tensor:
        """A new tensor computed by ``lower`` from ``inputs`` (used by the operators in ``pf.ops``)."""
        for t in inputs:
            if t.graph is not self:
                raise PolyfuseError(f"{op}: {t!r} belongs to graph {t.graph.name!r}, not {self.name!r}")
        return self._add(Tensor(self, tuple(shape), dtype, op, tuple(inputs), lower))

    def _add(self, t: Tensor) -> Tensor:
        t.index = len(self.tensors)
        t.line = _caller()[1]
        self.tensors.append(t)
        return t

    def build(self, **outputs: Tensor) -> Program:
        """The Program computing ``outputs`` (by keyword: each becomes an output array of that name)."""
        if not outputs:
            raise PolyfuseError(f"graph {self.name!r}: build() needs at least one output, e.g. g.build(y=t)")
        for name, t in outputs.items():
            if not isinstance(t, Tensor) or t.graph is not self:
                raise PolyfuseError(f"output {name!r} must be a tensor of graph {self.name!r}, got {t!r}")
            if name in self.inputs:
                raise PolyfuseError(f"output {name!r} has the name of an input of graph {self.name!r}")
        params: list[str] = []
        for t in self.inputs.values():
            for s in t.shape:
                params.extend(p for p, _ in s.terms if p not in params)
        b = ProgramBuilder(self.name, params, self.filename, self.line)
        for t in self.inputs.values():
            b.add_array(t.name, t.shape, t.dtype, "input", argument=True)
        for name, t in outputs.items():
            b.add_array(name, t.shape, t.dtype, "output", argument=True)
        Lowering(self, b, outputs).run()
        return check_program(b.build())


class Lowering:
    """Lowers the tensors the outputs need, in creation order, through one ProgramBuilder."""

    def __init__(self, graph: Graph, builder: ProgramBuilder, outputs: Mapping[str, Tensor]) -> None:
        self.graph = graph
        self.b = builder
        self.outputs = dict(outputs)
        self.home: dict[int, str] = {t.index: t.name for t in graph.inputs.values()}  # tensor -> its array
        self._names = itertools.count()
        self.line = 0

    def run(self) -> None:
        needed = self._needed()
        owner: dict[int, str] = {}
        for name, t in self.outputs.items():
            if t.lower is not None and t.index not in owner:
                owner[t.index] = name
        for t in self.graph.tensors:
            if t.index not in needed or t.lower is None:
                continue
            array = owner.get(t.index) or self.temp(t.shape, t.dtype, t.op)
            self.home[t.index] = array
            self.line = t.line
            t.lower(self, t, array)
        for name, t in self.outputs.items():
            if self.home[t.index] != name:  # an input or a tensor given twice: copy it
                self.line = t.line
                with self.nest(t.shape) as its:
                    self.assign(name, its, "=", lambda ld: ld(t, its), f"{name} = {self.home[t.index]}")

    def _needed(self) -> set[int]:
        seen: set[int] = set()
        stack = list(self.outputs.values())
        while stack:
            t = stack.pop()
            if t.index not in seen:
                seen.add(t.index)
                stack.extend(t.inputs)
        return seen

    # ----- helpers for the operators' lowerings ---------------------------------------------------
    def array(self, t: Tensor) -> str:
        """The array holding ``t``'s value (it has been lowered already)."""
        return self.home[t.index]

    def temp(self, shape: Sequence[SizeExpr], dtype: DType, hint: str) -> str:
        """A fresh temporary array."""
        while True:
            name = f"t{next(self._names)}_{hint}"
            if name not in self.b.arrays:
                break
        self.b.add_array(name, tuple(shape), dtype, "temp", argument=False)
        return name

    def size(self, s: SizeExpr) -> isl.PwAff:
        """``s`` as an affine function in the current scope."""
        scope = self.b.scope()
        out = scope.const(s.constant)
        for p, c in s.terms:
            out = out + scope.var(p) * c
        return out

    @contextmanager
    def nest(self, shape: Sequence[SizeExpr], first: int = 0) -> Iterator[list[str]]:
        """Loops ``for i_k in range(shape[k])``, outermost first; yields their iterator names."""
        names = [f"i{first + k}" for k in range(len(shape))]
        with self._loops(names, list(shape)):
            yield names

    @contextmanager
    def _loops(self, names: list[str], shape: list[SizeExpr]) -> Iterator[None]:
        if not names:
            yield
            return
        with self.b.loop(names[0], self.b.scope().const(0), self.size(shape[0])):
            with self._loops(names[1:], shape[1:]):
                yield

    def size_value(self, s: SizeExpr, dtype: DType) -> Val:
        """The size ``s`` as a value of ``dtype`` in the current scope (a constant when it is one)."""
        if not s.terms:
            return const(s.constant, dtype)
        return cast(Val(IndexValue(self.size(s))), dtype)

    def count(self, sizes: Iterable[SizeExpr], dtype: DType = f32) -> Val:
        """The product of ``sizes`` as a value of ``dtype`` (constant factors folded)."""
        n, parts = 1, []
        for s in sizes:
            if s.terms:
                parts.append(self.size_value(s, dtype))
            else:
                n *= s.constant
        out = const(n, dtype) if n != 1 or not parts else parts.pop(0)
        for v in parts:
            out = out * v
        return out

    def index(self, subs: Sequence[str | int | isl.PwAff]) -> list[isl.PwAff]:
        """Subscripts in the current scope: iterator names, ints, or affine functions."""
        scope = self.b.scope()
        out = []
        for s in subs:
            if isinstance(s, str):
                out.append(scope.var(s))
            elif isinstance(s, int):
                out.append(scope.const(s))
            else:
                out.append(s)
        return out

    def assign(self, array: str, subs: Sequence[Any], op: str, build: Callable[[Callable[..., Val]], Val], text: str) -> None:
        """``array[subs] op build(load)`` at the current point; ``load(tensor_or_array, subs)`` reads an element."""
        dtype = self.b.arrays[array].dtype
        target = self.index(subs)

        def make_value(read: Callable[[str, Sequence[isl.PwAff], str], int]) -> Expr:
            def load(src: Tensor | str, where: Sequence[Any]) -> Val:
                name = src if isinstance(src, str) else self.array(src)
                idx = self.index(where)
                k = read(name, idx, f"{name}[{', '.join(_sub_text(w) for w in where)}]")
                return Val(Read(k, self.b.arrays[name].dtype))

            return cast(build(load), dtype).expr

        self.b.add_statement((array, target, f"{array}[{', '.join(_sub_text(s) for s in subs)}]"), op, make_value, self.line, text)


def _sub_text(s: Any) -> str:
    return str(s) if isinstance(s, (str, int)) else format_pw_aff(s)


def _caller() -> tuple[str, int]:
    """The file and line of the innermost frame outside polyfuse (where the user called us)."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            frame = frame.f_back
        if frame is None:
            return "<graph>", 0
        return frame.f_code.co_filename, frame.f_lineno
    finally:
        del frame


# ----- the two primitive lowerings ---------------------------------------------------------------------
def broadcast_subscripts(shape: Sequence[SizeExpr], out_shape: Sequence[SizeExpr], its: Sequence[str]) -> list[str | int]:
    """The subscripts of a tensor of ``shape`` broadcast to ``out_shape`` indexed by ``its``."""
    off = len(out_shape) - len(shape)
    return [0 if is_one(d) and not is_one(out_shape[off + k]) else its[off + k] for k, d in enumerate(shape)]


def as_tensors(op: str, operands: Sequence[Any]) -> tuple[Graph, list[Tensor | float | int]]:
    graph = next((o.graph for o in operands if isinstance(o, Tensor)), None)
    if graph is None:
        raise PolyfuseError(f"{op}: at least one operand must be a pf.Tensor")
    for o in operands:
        if not isinstance(o, (Tensor, int, float)) or isinstance(o, bool):
            raise PolyfuseError(f"{op}: operands are tensors or Python numbers, not {type(o).__name__}")
    return graph, list(operands)


def result_dtype(operands: Sequence[Any], float_result: bool = False) -> DType:
    dts = [o.dtype for o in operands if isinstance(o, Tensor)]
    dt = dts[0]
    for d in dts[1:]:
        dt = promote(dt, d)
    if not dt.is_float and (float_result or any(isinstance(o, float) for o in operands)):
        dt = f32
    return dt


def elementwise(op: str, fn: Callable[..., Val], *operands: Any, float_result: bool = False) -> Tensor:
    """``fn`` applied elementwise to ``operands`` (tensors, broadcast; Python numbers) as one statement."""
    graph, ops = as_tensors(op, operands)
    tensors = [o for o in ops if isinstance(o, Tensor)]
    shape = broadcast_shapes(op, *(t.shape for t in tensors))
    dtype = result_dtype(ops, float_result)

    def lower(lw: Lowering, out: Tensor, array: str) -> None:
        with lw.nest(out.shape) as its:
            def build(load: Callable[..., Val]) -> Val:
                args = [cast(load(o, broadcast_subscripts(o.shape, out.shape, its)), dtype) if isinstance(o, Tensor) else const(o, dtype)
                        for o in ops]
                return fn(*args)

            names = ", ".join(lw.array(o) if isinstance(o, Tensor) else repr(o) for o in ops)
            lw.assign(array, its, "=", build, f"{array} = {op}({names})")

    return graph.apply(op, tensors, shape, dtype, lower)


REDUCE_INIT = {"sum": 0.0, "max": -math.inf, "min": math.inf}


def reduction(op: str, kind: str, fn: Callable[..., Val], operands: Sequence[Tensor], axis: Any, keepdims: bool,
              dtype: DType | None = None, finish: Callable[[Val, Val], Val] | None = None) -> Tensor:
    """``kind``-reduce (``"sum"``, ``"max"``, ``"min"``) of ``fn(*operands)`` (broadcast) over ``axis``.

    Lowers to an init statement ``out[kept] = init`` and an update over the full shape:
    ``out[kept] += f(...)`` for sums, ``out[kept] = max(out[kept], f(...))`` for max and min. With
    ``finish``, a third statement ``out[kept] = finish(out[kept], count)`` follows, where ``count`` is the
    number of reduced elements (a mean divides by it).
    """
    graph, ops = as_tensors(op, operands)
    shape = broadcast_shapes(op, *(t.shape for t in ops))
    axes = normalize_axes(op, axis, len(shape), shape)
    dtype = dtype or result_dtype(ops)
    out_shape = tuple(SizeExpr.of(1) if k in axes else s for k, s in enumerate(shape) if keepdims or k not in axes)

    def kept(its: Sequence[str]) -> list[str | int]:
        return [0 if k in axes else i for k, i in enumerate(its) if keepdims or k not in axes]

    def lower(lw: Lowering, out: Tensor, array: str) -> None:
        with lw.nest(out.shape) as its:
            lw.assign(array, its, "=", lambda ld: const(REDUCE_INIT[kind], dtype), f"{array} = {REDUCE_INIT[kind]} ({op} init)")
        with lw.nest(shape) as its:
            target = kept(its)

            def value(load: Callable[..., Val]) -> Val:
                args = [cast(load(t, broadcast_subscripts(t.shape, shape, its)), dtype) for t in ops]
                return fn(*args)

            names = ", ".join(lw.array(t) for t in ops)
            if kind == "sum":
                lw.assign(array, target, "+=", value, f"{array} += {op}({names})")
            else:
                lw.assign(array, target, "=", lambda ld: binary(kind, ld(array, target), value(ld)), f"{array} = {kind}({array}, {op}({names}))")
        if finish is not None:
            with lw.nest(out.shape) as its:
                def done(load: Callable[..., Val]) -> Val:
                    return finish(load(array, its), lw.count((shape[k] for k in axes), dtype))

                lw.assign(array, its, "=", done, f"{array} = finish {op}({array})")

    return graph.apply(op, list(ops), out_shape, dtype, lower)


__all__ = ["Graph", "Lowering", "Param", "Tensor", "Val", "broadcast_shapes", "elementwise", "reduction"]
