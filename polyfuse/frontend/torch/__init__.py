"""PyTorch models in: ``pf.from_torch`` and the ``torch.compile(model, backend="polyfuse")`` backend.

Importing this package does not import torch (``import polyfuse`` must stay fast and work without it): the
two entry points below import their implementation, and torch with it, on first use.

* :func:`from_torch` (``export.py``): ``torch.export`` (``make_fx`` where export cannot) gives an ATen
  graph, :mod:`~polyfuse.frontend.torch.convert` maps each ATen operator onto ``pf.ops`` through the table
  in :mod:`~polyfuse.frontend.torch.aten` (one module per operator family) and builds one ``pf.Program``.
* ``backend.py``: the dynamo backend. Under AOT autograd every ATen node the table can take is grouped
  into partitions, each compiled by polyfuse; the rest runs eagerly around them.
* :func:`torch_report` (``report.py``): which ATen operators were compiled and which were left to eager.
"""

from __future__ import annotations

from typing import Any

from polyfuse.frontend.torch.report import torch_report


def from_torch(module_or_fn: Any, *example_inputs: Any, **options: Any) -> tuple[Any, Any]:
    """``(program, binding)`` for a ``torch.nn.Module`` or function called on ``example_inputs``.

    See :func:`polyfuse.frontend.torch.export.from_torch`; torch is imported here, on first use.
    """
    from polyfuse.frontend.torch.export import from_torch as build  # lazy: importing torch takes a second

    return build(module_or_fn, *example_inputs, **options)


__all__ = ["from_torch", "torch_report"]
