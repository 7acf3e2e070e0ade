"""``conv2d``: 2-d convolution (cross-correlation, as in PyTorch) in NCHW layout.

``x: (N, C, H, W)``, ``w: (F, C, KH, KW)``, optional ``bias: (F,)``; ``stride`` and ``padding`` are ints or
pairs. The result has shape ``(N, F, OH, OW)`` with ``OH = (H + 2 ph - KH) // sh + 1``. Lowering::

    y[n, f, oh, ow] = 0                      (or bias[f])
    y[n, f, oh, ow] += x[n, c, oh*sh + kh - ph, ow*sw + kw - pw] * w[f, c, kh, kw]
        for n, f, oh, ow, c, kh, kw  where  0 <= oh*sh + kh - ph < H  and  0 <= ow*sw + kw - pw < W

The padding guard is an affine condition on the update's domain, so no instance reads outside ``x``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from polyfuse.errors import PolyfuseError, ShapeError
from polyfuse.frontend.formula import const
from polyfuse.frontend.graph import Tensor, result_dtype
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import same_size, shape_text
from polyfuse.ir.printer import format_size
from polyfuse.types import SizeExpr


def _pair(op: str, name: str, v: Any) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2 or not all(isinstance(p, int) and not isinstance(p, bool) for p in pair):
        raise PolyfuseError(f"{op}: {name} must be an int or a pair of ints, got {v!r}")
    return pair  # type: ignore[return-value]


def _out_size(h: SizeExpr, k: SizeExpr, s: int, p: int, what: str, xs, ws) -> SizeExpr:
    span = h + 2 * p - k
    if s == 1:
        out = span + 1
    elif span.terms:
        raise ShapeError(f"conv2d: stride {s} needs concrete sizes for the {what} (x {shape_text(xs)}, w {shape_text(ws)})")
    else:
        out = SizeExpr.of(span.constant // s + 1) if span.constant >= 0 else span
    if not out.terms and out.constant <= 0:
        raise ShapeError(f"conv2d: the {what} output size {format_size(out)} is not positive (x {shape_text(xs)}, w {shape_text(ws)})")
    return out


def conv2d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0) -> Tensor:
    if not isinstance(x, Tensor) or not isinstance(w, Tensor):
        raise PolyfuseError("conv2d: x and w must be tensors")
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"conv2d: expects x (N, C, H, W) and w (F, C, KH, KW), got {shape_text(x.shape)} and {shape_text(w.shape)}")
    sh, sw = _pair("conv2d", "stride", stride)
    ph, pw = _pair("conv2d", "padding", padding)
    if sh < 1 or sw < 1 or ph < 0 or pw < 0:
        raise PolyfuseError(f"conv2d: stride must be positive and padding non-negative, got stride={stride!r} padding={padding!r}")
    n, c, h, wd = x.shape
    f, c2, kh, kw = w.shape
    if not same_size(c, c2):
        raise ShapeError(f"conv2d: channels do not match: x {shape_text(x.shape)} has {format_size(c)}, w {shape_text(w.shape)} has {format_size(c2)}")
    if bias is not None and (bias.ndim != 1 or not same_size(bias.shape[0], f)):
        raise ShapeError(f"conv2d: bias of shape {shape_text(bias.shape)} does not match the {format_size(f)} filters of w {shape_text(w.shape)}")
    oh = _out_size(h, kh, sh, ph, "height", x.shape, w.shape)
    ow = _out_size(wd, kw, sw, pw, "width", x.shape, w.shape)
    dtype = result_dtype([x, w])
    shape = (n, f, oh, ow)
    inputs = [x, w] + ([bias] if bias is not None else [])

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        with lw.nest(shape) as its:
            init = (lambda ld: ld(bias, [its[1]])) if bias is not None else (lambda ld: const(0, dtype))
            lw.assign(y, its, "=", init, f"{y} = {'bias' if bias is not None else 0}")
        src, oy, ox = lw.array(x), -ph, -pw
        if (ph or pw) and sh == sw == 1:
            # padding as data movement: a zero-bordered copy of x, so the window loops are rectangular
            # (no min/max bounds of 2-3 iterations around every output element) and vectorise. (Strided
            # convolutions keep the guards: their lane reads are strided anyway, and isl's scheduler
            # takes minutes on the strided copy.)
            src, oy, ox = lw.temp((n, c, h + 2 * ph, wd + 2 * pw), x.dtype, "padded"), 0, 0
            with lw.nest((n, c, h + 2 * ph, wd + 2 * pw)) as its:
                # zeros on the border only: the copy below writes the inside (one pass over the copy's bytes,
                # not two)
                scope = lw.b.scope()
                hh, ww = scope.var(its[2]), scope.var(its[3])
                border = (hh.lt_set(scope.const(ph)) | hh.ge_set(lw.size(h) + ph)
                          | ww.lt_set(scope.const(pw)) | ww.ge_set(lw.size(wd) + pw))
                with lw.b.condition(border):
                    lw.assign(src, its, "=", lambda ld: const(0, x.dtype), f"{src} = 0 (border)")
            with lw.nest((n, c, h, wd)) as its:
                i_n, i_c, i_h, i_w = its
                scope = lw.b.scope()
                lw.assign(src, [i_n, i_c, scope.var(i_h) + ph, scope.var(i_w) + pw], "=", lambda ld: ld(x, its),
                          f"{src}[n, c, h+{ph}, w+{pw}] = {lw.array(x)}[n, c, h, w]")
        # the window loops outside the channel loop: the innermost reduction is the long one (C), which the
        # C target's register micro-tile runs with the accumulators in registers
        with lw.nest((n, f, oh, ow, kh, kw, c)) as its:
            i_n, i_f, i_oh, i_ow, i_kh, i_kw, i_c = its
            scope = lw.b.scope()
            row = scope.var(i_oh) * sh + scope.var(i_kh) + oy
            col = scope.var(i_ow) * sw + scope.var(i_kw) + ox
            zero = scope.const(0)
            guard = row.ge_set(zero) & row.lt_set(lw.size(h)) & col.ge_set(zero) & col.lt_set(lw.size(wd))
            text = f"{y} += {src}[n, c, oh*{sh}+kh{oy:+d}, ow*{sw}+kw{ox:+d}] * {lw.array(w)}[f, c, kh, kw]"
            with lw.b.condition(guard) if src == lw.array(x) and (ph or pw) else contextlib.nullcontext():
                lw.assign(y, [i_n, i_f, i_oh, i_ow], "+=", lambda ld: ld(src, [i_n, i_c, row, col]) * ld(w, [i_f, i_c, i_kh, i_kw]), text)

    return x.graph.apply("conv2d", inputs, shape, dtype, lower)
