"""2-d convolution (``conv2d``, ``convolution``): NCHW, stride and padding; dilation 1, one group, not
transposed (anything else stays in PyTorch)."""

from __future__ import annotations

from typing import Any

from polyfuse import ops
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.torch.aten.registry import aten, ints, tensor, unsupported


def _pair(v: Any, what: str) -> tuple[int, int]:
    p = ints(v, what)
    if len(p) == 1:
        return p[0], p[0]
    if len(p) != 2:
        raise unsupported(f"{what} {v!r} (2-d convolutions only)")
    return p[0], p[1]


def _conv(x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Tensor:
    x, w = tensor(x), tensor(w, "weight")
    if x.ndim != 4 or w.ndim != 4:
        raise unsupported(f"a {x.ndim}-d convolution (2-d NCHW only)")
    if isinstance(padding, str):
        raise unsupported(f"padding={padding!r}")
    if _pair(dilation, "dilation") != (1, 1):
        raise unsupported(f"dilation {dilation!r}")
    if groups != 1:
        raise unsupported(f"groups={groups}")
    return ops.conv2d(x, w, None if b is None else tensor(b, "bias"), stride=_pair(stride, "stride"), padding=_pair(padding, "padding"))


@aten("aten.conv2d.default")
def conv2d(x: Any, w: Any, b: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    return _conv(x, w, b, stride, padding, dilation, groups)


@aten("aten.convolution.default")
def convolution(x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int) -> Tensor:
    if transposed:
        raise unsupported("transposed convolution")
    return _conv(x, w, b, stride, padding, dilation, groups)
