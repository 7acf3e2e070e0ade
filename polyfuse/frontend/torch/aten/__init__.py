"""The ATen-to-``pf.ops`` table: ``TABLE["aten.addmm.default"](*args, **kwargs)`` returns the polyfuse
value of that operator applied to converted arguments (``pf.Tensor`` for tensors, Python numbers and lists
as they are), or raises :class:`~polyfuse.errors.UnsupportedOperator` for arguments it does not take.

One module per operator family fills the table through :func:`~polyfuse.frontend.torch.aten.registry.aten`;
to support another operator, add a function to the right family (or a new module imported here)::

    @aten("aten.hardtanh.default")
    def hardtanh(x, lo=-1.0, hi=1.0):
        return ops.minimum(ops.maximum(x, lo), hi)

Both the high-level operators ``torch.export`` keeps (``linear``, ``layer_norm``,
``scaled_dot_product_attention``) and the ones AOT autograd lowers them to (``addmm``,
``native_layer_norm``, ``_scaled_dot_product_flash_attention_for_cpu``) are entries.
"""

from polyfuse.frontend.torch.aten import attention, conv, linalg, norm, pointwise, reduce, shape  # noqa: F401  (fill TABLE)
from polyfuse.frontend.torch.aten.registry import TABLE, aten

__all__ = ["TABLE", "aten"]
