"""Scaled dot-product attention, decomposed: ``softmax(q @ k^T * scale + mask) @ v`` (the transpose a
view), so its matrix products, scaling and softmax fuse with the projections around them like any other
statements. Boolean masks, causal masking and dropout stay in PyTorch."""

from __future__ import annotations

import math
from typing import Any

from polyfuse import ops
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.torch.aten.registry import aten, tensor, unsupported


def attention(q: Any, k: Any, v: Any, mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: Any = None, enable_gqa: bool = False) -> Tensor:
    q, k, v = tensor(q, "query"), tensor(k, "key"), tensor(v, "value")
    if dropout_p:
        raise unsupported("attention dropout")
    if is_causal:
        raise unsupported("causal attention")
    if enable_gqa:
        raise unsupported("grouped-query attention")
    if q.ndim < 2 or k.ndim != q.ndim:
        raise unsupported(f"attention on {q.ndim}-d and {k.ndim}-d tensors")
    d = q.shape[-1]
    if scale is None:
        if d.terms:
            raise unsupported("attention with a dynamic head dimension and no scale")
        scale = 1.0 / math.sqrt(d.constant)
    perm = list(range(k.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    s = ops.mul(ops.matmul(q, ops.permute(k, perm)), float(scale))
    if mask is not None:
        m = tensor(mask, "attn_mask")
        if not m.dtype.is_float:
            raise unsupported("a boolean attention mask")
        s = ops.add(s, m)
    return ops.matmul(ops.softmax(s, axis=-1), v)


aten("aten.scaled_dot_product_attention.default")(attention)


@aten("aten._scaled_dot_product_flash_attention_for_cpu.default")
def flash_cpu(q: Any, k: Any, v: Any, dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask: Any = None,
              scale: Any = None) -> tuple[Any, ...]:
    return attention(q, k, v, attn_mask, dropout_p, is_causal, scale), None
