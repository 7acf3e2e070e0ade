"""Lowering graph tensors to statements: :class:`Lowering` drives one
:class:`~polyfuse.ir.builder.ProgramBuilder` through the tensors the outputs need, in creation order, and
gives the operators' lowering functions their vocabulary (loop nests over a shape, temporaries, sizes as
affine functions or values, ``assign`` of an element formula).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import islpy as isl

from polyfuse.frontend.formula import Val, cast, const
from polyfuse.ir.builder import ProgramBuilder
from polyfuse.ir.expr import Expr, IndexValue, Read, format_pw_aff
from polyfuse.types import DType, SizeExpr, f32

if TYPE_CHECKING:
    from polyfuse.frontend.graph import Graph, Tensor


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
            if t.index not in needed or t.lower is None:  # inputs, and views (read through their base)
                continue
            array = owner.get(t.index) or self.temp(t.shape, t.dtype, t.op)
            self.home[t.index] = array
            self.line = t.line
            t.lower(self, t, array)
        for name, t in self.outputs.items():
            if self.home.get(t.index) != name:  # an input, a view, or a tensor given twice: copy it
                self.line = t.line
                with self.nest(t.shape) as its:
                    self.assign(name, its, "=", lambda ld: ld(t, its), f"{name} = {self.array(t)}")

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
        """The array holding ``t``'s value (it has been lowered already; a view's is its base's)."""
        while t.view is not None:
            t = t.inputs[0]
        return self.home[t.index]

    def domain(self) -> isl.Set:
        """The iteration domain at the current point of the nest (views simplify their subscripts in it)."""
        return self.b._current_domain(self.b.scope())

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
                while not isinstance(src, str) and src.view is not None:  # read a view through its base
                    idx, src = src.view(self, idx), src.inputs[0]
                k = read(name, idx, f"{name}[{', '.join(_sub_text(w) for w in where)}]")
                return Val(Read(k, self.b.arrays[name].dtype))

            return cast(build(load), dtype).expr

        self.b.add_statement((array, target, f"{array}[{', '.join(_sub_text(s) for s in subs)}]"), op, make_value, self.line, text)


def _sub_text(s: Any) -> str:
    return str(s) if isinstance(s, (str, int)) else format_pw_aff(s)
