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

Element formulas are written with :class:`~polyfuse.frontend.formula.Val` (``formula.py``), shapes follow
numpy's broadcasting (``shapes.py``), lowering functions drive a
:class:`~polyfuse.frontend.lowering.Lowering` (``lowering.py``), and the two primitive lowerings every
operator builds on are here:

* :func:`elementwise`: ``out[I] = f(a[bcast(I)], b[bcast(I)], ...)`` over the broadcast shape;
* :func:`reduction`: ``out[kept(I)] = init`` then ``out[kept(I)] op= f(inputs[I])`` over the full shape.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polyfuse.analysis.checks import check_program
from polyfuse.errors import PolyfuseError, ShapeError, api_boundary
from polyfuse.frontend.formula import Val, binary, cast, const
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import broadcast_shapes, broadcast_subscripts, normalize_axes, shape_text, size_of
from polyfuse.ir.builder import ProgramBuilder
from polyfuse.ir.program import Program
from polyfuse.types import DType, Param, SizeExpr, f32, promote

Size = SizeExpr
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


# ----- the graph ----------------------------------------------------------------------------------------
Lower = Callable[["Lowering", "Tensor", str], None]
ViewIndex = Callable[["Lowering", list], list]


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
    #: for a view (``pf.ops.reshape``, ``permute``, ...): maps its subscripts to those of ``inputs[0]``
    view: ViewIndex | None = None

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
        what = f"input {self.name!r}" if self.lower is None and self.view is None else self.op
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

    @api_boundary
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

    def view(self, op: str, base: Tensor, shape: Sequence[SizeExpr], index: ViewIndex) -> Tensor:
        """A view of ``base``: no array of its own; reading ``view[I]`` reads ``base[index(lw, I)]``.

        ``index`` receives the lowering and the view's subscripts as ``isl.PwAff`` in the reading
        statement's scope, and returns ``base``'s subscripts (quasi-affine: ``//`` and ``%`` by constants).
        """
        if base.graph is not self:
            raise PolyfuseError(f"{op}: {base!r} belongs to graph {base.graph.name!r}, not {self.name!r}")
        return self._add(Tensor(self, tuple(shape), base.dtype, op, (base,), None, view=index))

    def _add(self, t: Tensor) -> Tensor:
        t.index = len(self.tensors)
        t.line = _caller()[1]
        self.tensors.append(t)
        return t

    @api_boundary
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


def reduce_init(kind: str, dtype: DType) -> float | int:
    """The identity a ``kind`` reduction of ``dtype`` starts from: the float infinities, or an integer
    type's own extremes (``pf.ops.max`` of an i32 tensor starts from -2**31)."""
    if dtype.is_float or kind == "sum":
        return REDUCE_INIT[kind]
    info = np.iinfo(np.dtype(dtype.numpy))
    return int(info.min) if kind == "max" else int(info.max)


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
            lw.assign(array, its, "=", lambda ld: const(reduce_init(kind, dtype), dtype), f"{array} = {reduce_init(kind, dtype)} ({op} init)")
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


# A user's tensor expression (`x @ w`, `x.sum()`) is a public entry point: its errors end at the user's line.
_OPERATORS = {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__neg__", "__matmul__", "__rmatmul__", "__getitem__"}
for _name, _method in list(vars(Tensor).items()):
    if callable(_method) and (_name in _OPERATORS or not _name.startswith("_")):
        setattr(Tensor, _name, api_boundary(_method))

__all__ = ["Graph", "Lowering", "Param", "Tensor", "Val", "broadcast_shapes", "elementwise", "reduction"]
