"""``pf.from_torch(module_or_fn, *example_inputs)``: one ``pf.Program`` for a whole PyTorch model.

``torch.export`` traces the model to an ATen graph whose parameters, buffers and constants are
placeholders; :class:`~polyfuse.frontend.torch.convert.Converter` turns it into a Program with one input
array per placeholder, so weights are never copied into generated code: the returned
:class:`TorchBinding` holds the model's own tensors (live references) and binds them at call time. Where
export fails (code it cannot trace), ``make_fx`` traces the model's ATen operators with the parameters
passed explicitly. Shapes come from the example inputs; dimensions marked dynamic
(``dynamic_shapes=`` as for ``torch.export``) become ``pf.params`` sizes named after torch's symbols.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from torch.export.graph_signature import InputKind, OutputKind

from polyfuse.errors import PolyfuseError, UnsupportedOperator
from polyfuse.frontend.torch.convert import Converter
from polyfuse.ir.program import Program


@dataclass(frozen=True)
class TorchBinding:
    """How a Program from :func:`from_torch` is called: ``inputs`` are the array names of the model's
    arguments in order, ``tensors`` the parameters, buffers and constants bound by array name (the
    model's own tensors, read at call time), ``outputs`` the output array names in the model's order."""

    program: Program
    inputs: tuple[str | None, ...]
    tensors: Mapping[str, torch.Tensor]
    outputs: tuple[str, ...]

    def arrays(self, *inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """Every input array of the Program as a zero-copy numpy view (non-contiguous inputs are copied)."""
        if len(inputs) != len(self.inputs):
            raise PolyfuseError(f"{self.program.name} takes {len(self.inputs)} input tensor(s), got {len(inputs)}")
        out = {name: as_array(t, name) for name, t in zip(self.inputs, inputs) if name is not None}
        out.update((name, as_array(t, name)) for name, t in self.tensors.items())
        return out

    def __call__(self, exe: Any, *inputs: torch.Tensor) -> Any:
        """Run ``exe`` (``pf.compile(program)``) on torch tensors; returns torch tensors (one, or a tuple)."""
        args = self.arrays(*inputs)
        outs = [torch.empty(self.program.arrays[n].concrete_shape(_sizes(self.program, args)), dtype=torch_dtype(self.program, n))
                for n in self.outputs]
        exe(**args, **{n: o.numpy() for n, o in zip(self.outputs, outs)})
        return outs[0] if len(outs) == 1 else tuple(outs)


def as_array(t: Any, name: str) -> np.ndarray:
    """A CPU tensor as a numpy view of its memory (a contiguous copy when it is not contiguous)."""
    if not isinstance(t, torch.Tensor):
        raise PolyfuseError(f"argument {name!r} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise PolyfuseError(f"argument {name!r} is on {t.device}; the C target takes CPU tensors")
    t = t.detach()
    return (t if t.is_contiguous() else t.contiguous()).numpy()


def torch_dtype(program: Program, name: str) -> torch.dtype:
    return {"f32": torch.float32, "f64": torch.float64}[program.arrays[name].dtype.name]


def _sizes(program: Program, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Sizes of the dynamic dimensions, read off the inputs (a dimension that is one symbol alone)."""
    sizes: dict[str, int] = {}
    for name, a in arrays.items():
        for s, n in zip(program.arrays[name].shape, a.shape):
            if len(s.terms) == 1 and s.constant == 0 and s.terms[0][1] == 1:
                sizes[s.terms[0][0]] = int(n)
    return sizes


class _Function(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def from_torch(module_or_fn: Any, *example_inputs: Any, dynamic_shapes: Any = None, name: str | None = None) -> tuple[Program, TorchBinding]:
    """``(program, binding)`` for ``module_or_fn(*example_inputs)`` (a ``torch.nn.Module`` or a function).

    Raises :class:`UnsupportedOperator` naming the first ATen operator the table cannot take. Call the
    result with ``binding(pf.compile(program), *inputs)``, or ``exe(**binding.arrays(*inputs), out0=...)``.
    """
    module = module_or_fn if isinstance(module_or_fn, torch.nn.Module) else _Function(module_or_fn)
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise PolyfuseError("from_torch: example inputs must be tensors")
    label = name or _name(module_or_fn)
    if isinstance(module, _Function) and isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = (tuple(dynamic_shapes),)  # the wrapper's forward(*args) takes them as one tuple
    try:
        ep = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    except Exception as e:  # noqa: BLE001  (any tracing failure: fall back to make_fx)
        if dynamic_shapes is not None:
            raise PolyfuseError(f"from_torch: torch.export failed ({type(e).__name__}: {e}); dynamic shapes need torch.export") from e
        return _from_make_fx(module, example_inputs, label)
    sig = ep.graph_signature
    bad = [s for s in sig.output_specs if s.kind != OutputKind.USER_OUTPUT]
    if bad:
        raise UnsupportedOperator(f"from_torch: the model mutates {', '.join(str(s.target) for s in bad)} (put it in eval mode?)")
    tensors_by_node: dict[str, torch.Tensor] = {}
    user: list[str] = []
    for spec in sig.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            user.append(spec.arg.name)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensors_by_node[spec.arg.name] = _live(module, spec.target, ep.state_dict)
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            tensors_by_node[spec.arg.name] = ep.constants[spec.target]
        else:
            raise UnsupportedOperator(f"from_torch: input {spec.arg.name} of kind {spec.kind.name}")
    return _build(ep.graph_module.graph, label, user, tensors_by_node)


def _live(module: torch.nn.Module, target: str, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The module's own parameter or buffer (so later weight updates are seen), else export's copy."""
    try:
        return module.get_parameter(target)
    except AttributeError:
        try:
            return module.get_buffer(target)
        except AttributeError:
            return state[target]


def _from_make_fx(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], label: str) -> tuple[Program, TorchBinding]:
    from torch.fx.experimental.proxy_tensor import make_fx

    named = dict(module.named_parameters()) | dict(module.named_buffers())
    keys = list(named)

    def call(*flat: torch.Tensor) -> Any:
        state, args = dict(zip(keys, flat[: len(keys)])), flat[len(keys):]
        return torch.func.functional_call(module, state, args)

    with torch.no_grad():
        gm = make_fx(call, tracing_mode="fake")(*named.values(), *example_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = {n.name: named[k] for n, k in zip(placeholders, keys)}
    user = [n.name for n in placeholders[len(keys):]]
    attrs = {n.name: getattr(gm, str(n.target)) for n in gm.graph.nodes if n.op == "get_attr"}
    return _build(gm.graph, label, user, tensors | attrs)


def _build(graph: fx.Graph, label: str, user: list[str], tensors_by_node: Mapping[str, torch.Tensor]) -> tuple[Program, TorchBinding]:
    cx = Converter(graph, label)
    program, outputs = cx.run()
    by_node = {node.name: array for array, node in cx.inputs.items()}
    inputs = tuple(by_node.get(n) for n in user)
    bad = [n for n in user if n not in by_node and n not in cx.unused]
    if bad:
        raise UnsupportedOperator(f"from_torch: {label} has inputs that are not float tensors ({', '.join(bad)})")
    tensors = {by_node[n]: t for n, t in tensors_by_node.items() if n in by_node}
    return program, TorchBinding(program, inputs, tensors, tuple(outputs))


def _name(obj: Any) -> str:
    raw = type(obj).__name__ if isinstance(obj, torch.nn.Module) else getattr(obj, "__name__", "model")
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in raw)
    return out if out and out[0].isalpha() else f"model_{out}"
