"""``torch.compile(model, backend="polyfuse")``: the dynamo backend, registered under the
``torch_dynamo_backends`` entry point.

AOT autograd turns each graph dynamo captures into an ATen graph (parameters are its inputs). Each ATen
node is *probed*: converted on its own, on fresh inputs of its arguments' shapes, through the table of
:mod:`polyfuse.frontend.torch.aten`. The nodes that convert are grouped by torch's capability-based
partitioner into maximal partitions that keep the graph acyclic; each partition becomes one
``pf.Program``, compiled by polyfuse for the C target (all the partition's operators fused by the
scheduler as it sees fit), and replaces its nodes; every other node (embedding lookups, integer and
random operators, ...) runs in eager PyTorch around the compiled partitions. A partition that polyfuse
fails to compile stays eager too: the backend never fails a model that runs in eager mode.
``pf.torch_report()`` counts what was compiled and what was not.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
import torch.fx as fx
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from polyfuse.errors import PolyfuseError, UnsupportedOperator
from polyfuse.frontend.torch import report
from polyfuse.frontend.torch.compiling import DEFAULT_TIME_LIMIT, compile_program
from polyfuse.frontend.torch.convert import Converter, op_name, tensor_meta
from polyfuse.frontend.torch.export import as_array

LOG = logging.getLogger("polyfuse.torch")

#: operators that compute nothing: a partition of only these is left to PyTorch (it is free there)
NON_COMPUTE = {
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default", "aten.transpose.int",
    "aten.t.default", "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
    "aten.squeeze.default", "aten.select.int", "aten.slice.Tensor", "aten.split.Tensor", "aten.split_with_sizes.default",
    "aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.contiguous.default", "aten.unflatten.int",
    "aten.flatten.using_ints", "aten.unbind.int", "aten.dropout.default", "aten._to_copy.default",
}


class _Probe(OperatorSupportBase):
    """Whether each node converts on its own; remembers why not."""

    def __init__(self) -> None:
        self.values: dict[fx.Node, Any] = {}
        self.reasons: dict[str, str] = {}

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node in self.values:
            return self.values[node] is not None
        value = None
        try:
            value = self._convert(node)
        except PolyfuseError as e:
            self.reasons.setdefault(op_name(node), str(e))
        self.values[node] = value
        return value is not None

    def _convert(self, node: fx.Node) -> Any:
        cx = Converter(fx.Graph(), "probe")
        if node.target is operator.getitem:
            parent = node.args[0]
            if isinstance(parent, fx.Node) and parent not in self.values:  # the partitioner walks users first
                self.is_node_supported(None, parent)
            if not isinstance(parent, fx.Node) or self.values.get(parent) is None:
                raise UnsupportedOperator("an output of an operator left to eager")
            cx.env[parent] = self.values[parent]
            return cx.node(node)
        for a in node.all_input_nodes:
            cx.env[a] = cx.input(a)
        return cx.node(node)


class CompiledPartition(torch.nn.Module):
    """One partition as a polyfuse executable: torch tensors in (numpy views), torch tensors out."""

    def __init__(self, gm: fx.GraphModule, metas: list[torch.Tensor], name: str, time_limit: float | None) -> None:
        super().__init__()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for n, m in zip(placeholders, metas):
            n.meta["val"] = m
        cx = Converter(gm.graph, name)
        self.program, self.outputs = cx.run()
        by_node = {node.name: array for array, node in cx.inputs.items()}
        self.inputs = [by_node.get(n.name) for n in placeholders]  # None: an input the program does not read
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.single = not isinstance(out_node.args[0], (tuple, list))
        self.out_meta = [(tuple(int(d) for d in tensor_meta(o).shape), tensor_meta(o).dtype)
                         for o in ([out_node.args[0]] if self.single else out_node.args[0])]
        self.compiled = compile_program(self.program, time_limit)  # now, not on the first call
        self.exe = self.compiled.exe
        report.record_partition({"program": name, "statements": len(self.program.statements), "fusion": self.compiled.fusion,
                                 "kernels": self.compiled.kernels, "seconds": round(self.compiled.seconds, 2)})

    def forward(self, *args: torch.Tensor) -> Any:
        arrays = {name: as_array(t, name) for name, t in zip(self.inputs, args) if name is not None}
        outs = [torch.empty(shape, dtype=dtype) for shape, dtype in self.out_meta]
        self.exe(**arrays, **{n: o.numpy() for n, o in zip(self.outputs, outs)})
        return outs[0] if self.single else tuple(outs)


def partition_and_compile(gm: fx.GraphModule, time_limit: float | None = DEFAULT_TIME_LIMIT) -> fx.GraphModule:
    """``gm`` with its supported partitions replaced by polyfuse executables (the rest left as it is);
    ``time_limit``: seconds per scheduler run (see :func:`~polyfuse.frontend.torch.compiling.compile_program`)."""
    probe = _Probe()
    partitioner = CapabilityBasedPartitioner(gm, probe, allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions()
                  if any(n.op == "call_function" and n.target is not operator.getitem and op_name(n) not in NON_COMPUTE for n in p.nodes)]
    fused = partitioner.fuse_partitions(partitions) if partitions else gm
    compiled: list[str] = []
    eager: list[str] = []
    reasons = dict(probe.reasons)
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        names = [op_name(n) for n in sub.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
        metas = [a.meta.get("val") for a in node.args]
        try:
            setattr(fused, node.target, CompiledPartition(sub, metas, f"polyfuse_{node.target}", time_limit))
            compiled.extend(names)
        except PolyfuseError as e:  # the partition stays an eager submodule
            LOG.warning("polyfuse backend: partition %s left to eager: %s", node.target, e)
            for n in names:
                reasons.setdefault(n, f"its partition failed to compile: {e}")
            eager.extend(names)
    for node in fused.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            eager.append(op_name(node))
    fused.recompile()
    report.record(compiled, eager, {k: v for k, v in reasons.items() if k in set(eager)})
    return fused


def polyfuse_backend(gm: fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None) -> Any:
    """The dynamo backend: AOT autograd to ATen, then :func:`partition_and_compile` on the forward graph
    (and on the inference graph); backward graphs, where autograd needs them, run eagerly.

    ``torch.compile(model, backend="polyfuse", options={"schedule_time_limit": 300})`` sets the seconds
    each scheduler run may take (default :data:`~polyfuse.frontend.torch.compiling.DEFAULT_TIME_LIMIT`;
    ``None``: unbounded)."""
    opts = dict(options or {})
    time_limit = opts.pop("schedule_time_limit", DEFAULT_TIME_LIMIT)
    if opts:
        raise PolyfuseError(f"unknown polyfuse backend option(s): {', '.join(sorted(opts))} (known: schedule_time_limit)")

    def forward(fw: fx.GraphModule, inputs: list[Any]) -> Any:
        return make_boxed_func(partition_and_compile(fw, time_limit).forward)

    def backward(bw: fx.GraphModule, inputs: list[Any]) -> Any:
        return make_boxed_func(bw.forward)

    return aot_autograd(fw_compiler=forward, bw_compiler=backward, inference_compiler=forward)(gm, example_inputs)
