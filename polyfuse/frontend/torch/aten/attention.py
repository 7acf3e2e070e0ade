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


def _linear(x: Tensor, w: Any, b: Any) -> Tensor:
    return ops.add(ops.matmul(x, ops.permute(tensor(w, "weight"), (1, 0))), tensor(b, "bias"))


@aten("aten._transformer_encoder_layer_fwd.default")
def encoder_layer(src: Any, embed_dim: int, num_heads: int, qkv_w: Any, qkv_b: Any, proj_w: Any, proj_b: Any,
                  use_gelu: bool, norm_first: bool, eps: float, ln1_w: Any, ln1_b: Any, ln2_w: Any, ln2_b: Any,
                  ff1_w: Any, ff1_b: Any, ff2_w: Any, ff2_b: Any, mask: Any = None, mask_type: Any = None) -> Tensor:
    """``nn.TransformerEncoderLayer``'s inference fast path (eval mode, no grad, ``batch_first=True``),
    spelled out: self-attention over ``num_heads`` heads, residual, layer norm, feed-forward, residual,
    layer norm (``norm_first``: the norms before each sub-block instead)."""
    x = tensor(src, "src")
    if mask is not None:
        raise unsupported("an attention mask in the encoder-layer fast path")
    if x.ndim != 3 or x.shape[-1].terms or x.shape[-1].constant != embed_dim or embed_dim % num_heads:
        raise unsupported(f"encoder layer on a {x.ndim}-d input with embed_dim={embed_dim}, num_heads={num_heads}")
    b, s = x.shape[0], x.shape[1]
    hd = embed_dim // num_heads

    def attention_block(h: Tensor) -> Tensor:
        qkv = _linear(h, qkv_w, qkv_b)  # (b, s, 3 * embed_dim)
        q, k, v = (ops.permute(ops.reshape(ops.slice_axis(qkv, 2, j * embed_dim, (j + 1) * embed_dim), [b, s, num_heads, hd]),
                               (0, 2, 1, 3)) for j in range(3))
        a = attention(q, k, v)  # (b, heads, s, hd)
        return _linear(ops.reshape(ops.permute(a, (0, 2, 1, 3)), [b, s, embed_dim]), proj_w, proj_b)

    def ff_block(h: Tensor) -> Tensor:
        mid = _linear(h, ff1_w, ff1_b)
        return _linear(ops.gelu(mid, approximate="none") if use_gelu else ops.relu(mid), ff2_w, ff2_b)

    def norm(h: Tensor, w: Any, bias: Any) -> Tensor:
        return ops.layernorm(h, tensor(w), tensor(bias), eps=eps)

    if norm_first:
        x = ops.add(x, attention_block(norm(x, ln1_w, ln1_b)))
        return ops.add(x, ff_block(norm(x, ln2_w, ln2_b)))
    x = norm(ops.add(x, attention_block(x)), ln1_w, ln1_b)
    return norm(ops.add(x, ff_block(x)), ln2_w, ln2_b)
