"""An ATen FX graph to a ``pf.Program``: each node's operator is looked up in the table of
:mod:`polyfuse.frontend.torch.aten` and applied to ``pf.ops`` tensors.

Shapes come from each node's ``meta["val"]`` (the fake tensor torch.export and AOT autograd record);
a symbolic size that is one symbol (a dimension torch marked dynamic) becomes a ``pf.params`` size of that
name, an affine combination of symbols an affine size, anything else is unsupported. After each operator
the converted tensor's shape is checked against torch's: a table entry that disagrees with torch is an
:class:`UnsupportedOperator`, never a wrong program.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

from polyfuse.errors import PolyfuseError, UnsupportedOperator
from polyfuse.frontend.graph import Graph, Tensor
from polyfuse.frontend.shapes import same_size, shape_text
from polyfuse.frontend.torch.aten import TABLE
from polyfuse.ir.program import Program
from polyfuse.types import DType, Param, SizeExpr, f32, f64

DTYPES: dict[torch.dtype, DType] = {torch.float32: f32, torch.float64: f64}


def op_name(node: fx.Node) -> str:
    """The name the table and the report use: ``aten.addmm.default``."""
    return str(node.target) if node.op == "call_function" else node.op


def size(d: Any) -> SizeExpr:
    """A torch size (int or SymInt) as a polyfuse size: a symbol becomes a ``pf.params`` size of its name."""
    if isinstance(d, int):
        return SizeExpr.of(d)
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        if expr.is_Integer:
            return SizeExpr.of(int(expr))
        out = SizeExpr.of(int(expr.as_coeff_Add()[0]))
        for term in expr.as_ordered_terms():
            coeff, rest = term.as_coeff_Mul()
            if term.is_Integer:
                continue
            if not rest.is_Symbol:
                raise UnsupportedOperator(f"size {expr} is not affine in the dynamic dimensions")
            out = out + SizeExpr.of(Param(str(rest))) * int(coeff)
        return out
    raise UnsupportedOperator(f"size {d!r} is not an int")


def tensor_meta(node: fx.Node) -> torch.Tensor:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise UnsupportedOperator(f"{node.name}: no tensor metadata (got {type(val).__name__})")
    return val


def pf_dtype(node: fx.Node, val: torch.Tensor) -> DType:
    dt = DTYPES.get(val.dtype)
    if dt is None:
        raise UnsupportedOperator(f"{node.name}: dtype {val.dtype} (polyfuse takes float32 and float64 tensors)")
    if val.device.type != "cpu":
        raise UnsupportedOperator(f"{node.name}: device {val.device} (this backend compiles CPU tensors)")
    return dt


def check_shape(node: fx.Node, value: Any) -> None:
    """The converted value's shape must be torch's."""
    val = node.meta.get("val")
    outs = [(value, val)] if not isinstance(value, tuple) else list(zip(value, val if isinstance(val, (tuple, list)) else ()))
    for got, want in outs:
        if isinstance(got, Tensor) and isinstance(want, torch.Tensor):
            shape = tuple(size(d) for d in want.shape)
            if len(shape) != got.ndim or not all(same_size(a, b) for a, b in zip(shape, got.shape)):
                raise UnsupportedOperator(f"{op_name(node)}: polyfuse's shape {shape_text(got.shape)} differs from torch's {shape_text(shape)}")


class Converter:
    """Walks one FX graph in order, keeping each node's polyfuse value (a Tensor, a tuple, a number)."""

    def __init__(self, graph: fx.Graph, name: str, attributes: Mapping[str, torch.Tensor] | None = None) -> None:
        self.fx = graph
        self.g = Graph(name)
        self.attributes = attributes or {}
        self.env: dict[fx.Node, Any] = {}
        self.inputs: dict[str, fx.Node] = {}  # program input name -> placeholder or get_attr node
        self.unused: set[str] = set()  # placeholders nothing reads (no array)

    def input(self, node: fx.Node) -> Tensor:
        val = tensor_meta(node)
        name = _identifier(node.name, self.g.inputs)
        self.inputs[name] = node
        return self.g.input(name, tuple(size(d) for d in val.shape), pf_dtype(node, val))

    def value(self, a: Any) -> Any:
        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.value(x) for x in a)
        if isinstance(a, torch.SymInt):
            return size(a)
        return a

    def node(self, node: fx.Node) -> Any:
        """Convert one ``call_function`` node (its arguments are converted already)."""
        if node.target is operator.getitem:
            seq, k = self.value(node.args[0]), node.args[1]
            out = seq[k]
            if out is None:
                raise UnsupportedOperator(f"{node.name}: output {k} of {op_name(node.args[0])} is not computed by polyfuse")
            return out
        entry = TABLE.get(op_name(node))
        if entry is None:
            raise UnsupportedOperator(f"{op_name(node)} has no polyfuse lowering")
        val = node.meta.get("val")
        for v in val if isinstance(val, (tuple, list)) else (val,):
            if isinstance(v, torch.Tensor):
                pf_dtype(node, v)
        args = [self.value(a) for a in node.args]
        kwargs = {k: self.value(v) for k, v in node.kwargs.items()}
        try:
            out = entry(*args, **kwargs)
        except UnsupportedOperator as e:
            raise UnsupportedOperator(f"{op_name(node)}: {e}") from None
        except PolyfuseError as e:
            raise UnsupportedOperator(f"{op_name(node)}: {type(e).__name__}: {e}") from None
        check_shape(node, out)
        return out

    def run(self, outputs: Sequence[fx.Node] | None = None) -> tuple[Program, list[str]]:
        """The Program of the whole graph (or of ``outputs``); returns it and the output names in order."""
        result: list[Any] = []
        for n in self.fx.nodes:
            if n.op in ("placeholder", "get_attr") and not n.users:
                self.unused.add(n.name)  # e.g. a BatchNorm's int64 num_batches_tracked: no array
            elif n.op == "placeholder":
                self.env[n] = self.input(n) if isinstance(n.meta.get("val"), torch.Tensor) else _scalar_input(n)
            elif n.op == "get_attr":
                self.env[n] = self.input(n)
            elif n.op == "call_function":
                self.env[n] = self.node(n)
            elif n.op == "output":
                result = list(n.args[0]) if isinstance(n.args[0], (tuple, list)) else [n.args[0]]
            else:
                raise UnsupportedOperator(f"{n.op} node {n.name} (only ATen call_function graphs are converted)")
        wanted = list(outputs) if outputs is not None else result
        named: dict[str, Tensor] = {}
        for k, o in enumerate(wanted):
            t = self.env.get(o) if isinstance(o, fx.Node) else None
            if not isinstance(t, Tensor):
                raise UnsupportedOperator(f"output {k} ({o}) is not a tensor polyfuse computes")
            named[f"out{k}"] = t
        return self.g.build(**named), list(named)


def _scalar_input(node: fx.Node) -> Any:
    raise UnsupportedOperator(f"input {node.name} is not a tensor ({type(node.meta.get('val')).__name__}); polyfuse takes tensor inputs")


def _identifier(name: str, taken: Mapping[str, Any]) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "arg"
    base = base if base[0].isalpha() else f"a_{base}"
    base = f"in_{base}" if base.startswith("t") and base[1:2].isdigit() or base.startswith("out") else base
    out, k = base, 1
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    return out
