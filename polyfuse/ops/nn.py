"""Neural-network operators: activations, softmax and layer normalisation.

Activations are one elementwise statement each. ``softmax`` and ``layernorm`` lower to a few row-wise
statements (reductions into per-row temporaries, then elementwise passes); the general scheduler fuses
them under one parallel loop over the rows, so each is a single kernel reading its row from cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from polyfuse.errors import ShapeError
from polyfuse.frontend.formula import Val, binary, const, unary
from polyfuse.frontend.graph import Tensor, elementwise
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import normalize_axes, same_size, shape_text

GELU_C = math.sqrt(2.0 / math.pi)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``."""
    return elementwise("relu", lambda v: binary("max", v, const(0, v.dtype)), x)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return elementwise("sigmoid", lambda v: 1.0 / (1.0 + unary("exp", -v)), x, float_result=True)


def gelu_formula(v: Val) -> Val:
    """The tanh form ``0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``, computed as the equal
    ``x / (1 + exp(-2u))`` (``(1 + tanh(u)) / 2`` is the logistic function of ``2u``).

    Why: one ``exp`` and one division, where the C target runs ``exp`` through explicit AVX-512 vectors
    (``codegen/c_lanes.py``) and ``tanh`` costs an ``expm1``, a division and sign handling. Measured on the
    2-core Emerald Rapids, gelu(x + b) + r at 4096 x 1024 f32, 2 threads, paired rounds: 0.91 of the time
    of the tanh spelling, with a smaller error against float64 (median relative 2.7e-8 against 3.9e-8):
    for negative ``x`` the tanh spelling loses digits in ``1 + tanh(u)``. The limits agree: ``x`` for
    large ``x`` (``exp`` underflows to 0), ``-0`` for large negative ``x`` (``exp`` overflows)."""
    inner = GELU_C * (v + 0.044715 * v * v * v)
    return v / (1.0 + unary("exp", -2.0 * inner))


# Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + t (a2 + ... + t a5)) exp(-z^2), t = 1 / (1 + p z), z >= 0;
# absolute error below 1.5e-7, under float32's resolution of the result.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def gelu_erf_formula(v: Val) -> Val:
    """The exact form ``x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))``, with ``x erf(z) = |x| erf(|z|)`` so that
    only ``erf`` of a non-negative argument (A&S 7.1.26) is needed."""
    ax = unary("abs", v)
    z = ax * (1.0 / math.sqrt(2.0))
    t = 1.0 / (1.0 + _ERF_P * z)
    poly = const(_ERF_A[-1], v.dtype)
    for a in reversed(_ERF_A[:-1]):
        poly = poly * t + a
    erf_abs = 1.0 - t * poly * unary("exp", -(z * z))
    return 0.5 * (v + ax * erf_abs)


def gelu(x: Tensor, approximate: str = "tanh") -> Tensor:
    """GELU: ``approximate="tanh"`` (the default, as ``torch.nn.functional.gelu(x, approximate="tanh")``) or
    ``"none"``, the exact erf form (torch's default)."""
    if approximate not in ("tanh", "none"):
        raise ShapeError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    return elementwise("gelu", gelu_formula if approximate == "tanh" else gelu_erf_formula, x, float_result=True)


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (SiLU, swish)."""
    return elementwise("silu", lambda v: v / (1.0 + unary("exp", -v)), x, float_result=True)


def _rows(op: str, x: Tensor, axis: int) -> tuple[int, Callable[[list[str]], list[str]]]:
    (a,) = normalize_axes(op, axis, x.ndim, x.shape) if isinstance(axis, int) and not isinstance(axis, bool) else (None,)
    if a is None:
        raise ShapeError(f"{op}: axis must be one int, got {axis!r}")
    return a, lambda its: [i for k, i in enumerate(its) if k != a]


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``.

    Lowering (``m``, ``s``: per-row temporaries; ``y``: the result): ``m = -inf``; ``m = max(m, x)``;
    ``y = exp(x - m)``; ``s = 0``; ``s += y``; ``y = y * (1 / s)``. The last multiplies by the row's
    reciprocal, which the C and CUDA compilers hoist out of the row loop, rather than dividing each element
    (as PyTorch's kernels do; within an ulp of the quotient): a vector division costs several times a
    multiplication. Measured on the 2-core EPYC (C, paired rounds): a 4096 x 1024 softmax 6 % faster on one
    and on two threads, 8192 x 4096 (memory-bound) 2 %.
    """
    if not x.dtype.is_float:
        raise ShapeError(f"softmax: needs a float tensor, got {x.dtype.name}")
    a, kept = _rows("softmax", x, axis)
    row_shape = tuple(s for k, s in enumerate(x.shape) if k != a)

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        m = lw.temp(row_shape, x.dtype, "softmax_max")
        s = lw.temp(row_shape, x.dtype, "softmax_sum")
        xa = lw.array(x)
        with lw.nest(row_shape) as its:
            lw.assign(m, its, "=", lambda ld: const(-math.inf, x.dtype), f"{m} = -inf")
        with lw.nest(x.shape) as its:
            lw.assign(m, kept(its), "=", lambda ld: binary("max", ld(m, kept(its)), ld(x, its)), f"{m} = max({m}, {xa})")
        with lw.nest(x.shape) as its:
            lw.assign(y, its, "=", lambda ld: unary("exp", ld(x, its) - ld(m, kept(its))), f"{y} = exp({xa} - {m})")
        with lw.nest(row_shape) as its:
            lw.assign(s, its, "=", lambda ld: const(0.0, x.dtype), f"{s} = 0")
        with lw.nest(x.shape) as its:
            lw.assign(s, kept(its), "+=", lambda ld: ld(y, its), f"{s} += {y}")
        with lw.nest(x.shape) as its:
            lw.assign(y, its, "=", lambda ld: ld(y, its) * (1.0 / ld(s, kept(its))), f"{y} = {y} * (1 / {s})")

    return x.graph.apply("softmax", [x], x.shape, x.dtype, lower)


def layernorm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last axis: ``(x - mean) / sqrt(var + eps) * gamma + beta`` (biased variance).

    ``gamma`` and ``beta`` have the shape of the last axis. Lowering (``s``, ``v``: per-row temporaries,
    ``D``: the row length): ``s = 0``; ``s += x``; ``v = 0``; ``v += (x - s/D)^2``;
    ``y = (x - s/D) * rsqrt(v/D + eps) * gamma + beta``.
    """
    if x.ndim < 1 or not x.dtype.is_float:
        raise ShapeError(f"layernorm: needs a float tensor with at least one dimension, got {shape_text(x.shape)} {x.dtype.name}")
    d = x.shape[-1]
    for what, t in (("gamma", gamma), ("beta", beta)):
        if t is not None and (t.ndim != 1 or not same_size(t.shape[0], d)):
            raise ShapeError(f"layernorm: {what} of shape {shape_text(t.shape)} does not match the last axis of x {shape_text(x.shape)}")
    row_shape = x.shape[:-1]
    inputs = [t for t in (x, gamma, beta) if t is not None]

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        s = lw.temp(row_shape, x.dtype, "ln_sum")
        v = lw.temp(row_shape, x.dtype, "ln_var")
        xa = lw.array(x)

        def centred(ld, its) -> Val:
            return ld(x, its) - ld(s, its[:-1]) / lw.size_value(d, x.dtype)

        with lw.nest(row_shape) as its:
            lw.assign(s, its, "=", lambda ld: const(0.0, x.dtype), f"{s} = 0")
        with lw.nest(x.shape) as its:
            lw.assign(s, its[:-1], "+=", lambda ld: ld(x, its), f"{s} += {xa}")
        with lw.nest(row_shape) as its:
            lw.assign(v, its, "=", lambda ld: const(0.0, x.dtype), f"{v} = 0")
        with lw.nest(x.shape) as its:
            def sq(ld) -> Val:
                c = centred(ld, its)
                return c * c

            lw.assign(v, its[:-1], "+=", sq, f"{v} += ({xa} - mean)^2")
        with lw.nest(x.shape) as its:
            def norm(ld) -> Val:
                r = centred(ld, its) * (1.0 / unary("sqrt", ld(v, its[:-1]) / lw.size_value(d, x.dtype) + eps))
                if gamma is not None:
                    r = r * ld(gamma, its[-1:])
                if beta is not None:
                    r = r + ld(beta, its[-1:])
                return r

            lw.assign(y, its, "=", norm, f"{y} = layernorm({xa})")

    return x.graph.apply("layernorm", inputs, x.shape, x.dtype, lower)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``.

    Lowering (``m``, ``s``: per-row temporaries): ``m = -inf``; ``m = max(m, x)``; ``s = 0``;
    ``s += exp(x - m)``; ``y = x - m - log(s)``.
    """
    if not x.dtype.is_float:
        raise ShapeError(f"log_softmax: needs a float tensor, got {x.dtype.name}")
    a, kept = _rows("log_softmax", x, axis)
    row_shape = tuple(s for k, s in enumerate(x.shape) if k != a)

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        m = lw.temp(row_shape, x.dtype, "lsm_max")
        s = lw.temp(row_shape, x.dtype, "lsm_sum")
        xa = lw.array(x)
        with lw.nest(row_shape) as its:
            lw.assign(m, its, "=", lambda ld: const(-math.inf, x.dtype), f"{m} = -inf")
        with lw.nest(x.shape) as its:
            lw.assign(m, kept(its), "=", lambda ld: binary("max", ld(m, kept(its)), ld(x, its)), f"{m} = max({m}, {xa})")
        with lw.nest(row_shape) as its:
            lw.assign(s, its, "=", lambda ld: const(0.0, x.dtype), f"{s} = 0")
        with lw.nest(x.shape) as its:
            lw.assign(s, kept(its), "+=", lambda ld: unary("exp", ld(x, its) - ld(m, kept(its))), f"{s} += exp({xa} - {m})")
        with lw.nest(x.shape) as its:
            lw.assign(y, its, "=", lambda ld: ld(x, its) - ld(m, kept(its)) - unary("log", ld(s, kept(its))),
                      f"{y} = {xa} - {m} - log({s})")

    return x.graph.apply("log_softmax", [x], x.shape, x.dtype, lower)
