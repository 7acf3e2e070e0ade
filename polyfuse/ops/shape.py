"""Layout operators.

``transpose`` copies (one statement). The others are *views*: they record no statement and own no array;
an operator that reads a view reads its base at translated subscripts, so reshapes, permutations and
broadcasts between two computations cost nothing and never stand between the statements the scheduler
fuses. Every view is defined on logical (row-major) element order, like numpy's ``reshape``, so it is
correct whatever layout the base had in the framework the graph came from.

* ``reshape(x, shape)``: ``y[J] = x[delinearise(linearise(J, shape), x.shape)]``. Dimensions kept whole
  pass their subscript through and size-1 dimensions read 0; only groups of dimensions that are split or
  merged go through ``L // stride % size``, which :meth:`isl.PwAff.gist` on the reading statement's domain
  usually reduces back to an affine subscript. Merged or split groups need constant sizes.
* ``permute(x, axes)``: ``y[i_0, ..., i_n] = x[...]`` with ``y.shape[k] = x.shape[axes[k]]``.
* ``expand(x, shape)``: numpy's ``broadcast_to`` (size-1 dimensions read index 0).
* ``slice_axis(x, axis, start, stop, step)`` and ``select(x, axis, index)``: ``y[.., i, ..] = x[.., start +
  step * i, ..]``; ``select`` drops the axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import islpy as isl

from polyfuse.errors import ShapeError
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import is_one, normalize_axes, same_size, shape_text, size_of
from polyfuse.types import SizeExpr


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """``out[i_0, ..., i_n] = x[...]`` with ``out.shape[k] = x.shape[axes[k]]`` (a copy; see ``permute``)."""
    n = x.ndim
    perm = _perm("transpose", x, axes)
    shape = tuple(x.shape[a] for a in perm)

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        with lw.nest(shape) as its:
            src = [""] * n
            for k, a in enumerate(perm):
                src[a] = its[k]
            lw.assign(y, its, "=", lambda ld: ld(x, src), f"{y} = transpose({lw.array(x)}, {perm})")

    return x.graph.apply("transpose", [x], shape, x.dtype, lower)


def _perm(op: str, x: Tensor, axes: Sequence[int] | None) -> tuple[int, ...]:
    n = x.ndim
    perm = tuple(range(n))[::-1] if axes is None else tuple(a % n if isinstance(a, int) and -n <= a < n else -1 for a in axes)
    if sorted(perm) != list(range(n)):
        raise ShapeError(f"{op}: axes {tuple(axes or ())!r} are not a permutation of the {n} axes of {shape_text(x.shape)}")
    return perm


# ----- views ---------------------------------------------------------------------------------------------
def permute(x: Tensor, axes: Sequence[int]) -> Tensor:
    """A view with ``y.shape[k] = x.shape[axes[k]]`` (``torch.permute``; no copy)."""
    perm = _perm("permute", x, axes)

    def index(lw: Lowering, subs: list) -> list:
        src: list = [None] * len(perm)
        for k, a in enumerate(perm):
            src[a] = subs[k]
        return src

    return x.graph.view("permute", x, tuple(x.shape[a] for a in perm), index)


def expand(x: Tensor, shape: Sequence[Any]) -> Tensor:
    """A view broadcasting ``x`` to ``shape`` (numpy's ``broadcast_to``; size-1 dimensions stretch)."""
    out = tuple(size_of(s) for s in shape)
    off = len(out) - x.ndim
    if off < 0 or any(not is_one(d) and not same_size(d, out[off + k]) for k, d in enumerate(x.shape)):
        raise ShapeError(f"expand: {shape_text(x.shape)} cannot be broadcast to {shape_text(out)}")

    def index(lw: Lowering, subs: list) -> list:
        return [lw.index([0])[0] if is_one(d) and not is_one(out[off + k]) else subs[off + k] for k, d in enumerate(x.shape)]

    return x.graph.view("expand", x, out, index)


def slice_axis(x: Tensor, axis: int, start: int, stop: int | None = None, step: int = 1) -> Tensor:
    """A view of ``x[..., start:stop:step, ...]`` along ``axis`` (``start``, ``stop`` non-negative ints)."""
    (a,) = normalize_axes("slice", axis, x.ndim, x.shape)
    size = x.shape[a]
    if stop is None:
        if size.terms:
            raise ShapeError(f"slice: axis {axis} of {shape_text(x.shape)} is symbolic; give stop")
        stop = size.constant
    if not size.terms:
        stop = min(stop, size.constant)
    if step < 1 or start < 0 or stop < start:
        raise ShapeError(f"slice: bad range {start}:{stop}:{step} on axis {axis} of {shape_text(x.shape)}")
    shape = x.shape[:a] + (SizeExpr.of(-(-(stop - start) // step)),) + x.shape[a + 1:]

    def index(lw: Lowering, subs: list) -> list:
        return subs[:a] + [subs[a] * step + start] + subs[a + 1:]

    return x.graph.view("slice", x, shape, index)


def select(x: Tensor, axis: int, i: int) -> Tensor:
    """A view of ``x`` at index ``i`` of ``axis`` (that axis dropped; ``torch.select``)."""
    (a,) = normalize_axes("select", axis, x.ndim, x.shape)
    size = x.shape[a]
    if i < 0 and not size.terms:
        i += size.constant
    if i < 0 or (not size.terms and i >= size.constant):
        raise ShapeError(f"select: index {i} is out of range for axis {axis} of {shape_text(x.shape)}")

    def index(lw: Lowering, subs: list) -> list:
        return subs[:a] + [lw.index([i])[0]] + subs[a:]

    return x.graph.view("select", x, x.shape[:a] + x.shape[a + 1:], index)


def reshape(x: Tensor, shape: Sequence[Any]) -> Tensor:
    """A view of ``x`` with ``shape`` in row-major element order (one entry may be -1: inferred)."""
    out = _resolve_shape(x, shape)
    groups = _groups(x.shape, out)
    if any(sum(1 for k in xs if not is_one(x.shape[k])) > 1 for xs, _ in groups):
        return _merge_copy(x, out, groups)

    def index(lw: Lowering, subs: list) -> list:
        src: list = []
        dom = None
        for xs, os in groups:
            if len(xs) == 1 and len(os) == 1 and same_size(x.shape[xs[0]], out[os[0]]):
                src.append(subs[os[0]])
                continue
            if not os:  # size-1 dimensions of x
                src.extend(lw.index([0]) * len(xs))
                continue
            sizes = [out[k].constant for k in os]
            lin = lw.index([0])[0]
            for k, n in zip(os, sizes):
                lin = lin * n + subs[k]
            dom = lw.domain() if dom is None else dom
            inner = math.prod(x.shape[k].constant for k in xs)
            for k in xs:
                n = x.shape[k].constant
                inner //= n
                part = _floordiv(lin, inner)
                if k != xs[0]:
                    part = part.mod_val(n)
                src.append(part.gist(dom).coalesce())
        return src

    return x.graph.view("reshape", x, out, index)


def _merge_copy(x: Tensor, out: tuple[SizeExpr, ...], groups: list[tuple[list[int], list[int]]]) -> Tensor:
    """A reshape that merges dimensions, as a copy over ``x``'s index space: the merged subscript
    ``sum(i_k * stride_k)`` is affine when written, where reading it back as a view would take ``//`` and
    ``%`` (quasi-affine accesses that make isl's scheduler far slower)."""

    def lower(lw: Lowering, t: Tensor, y: str) -> None:
        with lw.nest(x.shape) as its:
            subs: list = []
            for xs, os in groups:
                if not os:
                    continue
                if not xs:
                    subs.extend(lw.index([0]))
                    continue
                lin = lw.index([0])[0]
                for k in xs:
                    lin = lin * x.shape[k].constant + lw.index([its[k]])[0] if len(xs) > 1 else lw.index([its[k]])[0]
                inner = math.prod(out[k].constant for k in os) if len(os) > 1 else 1
                for k in os:
                    if len(os) == 1:
                        subs.append(lin)
                        continue
                    n = out[k].constant
                    inner //= n
                    part = _floordiv(lin, inner)
                    subs.append(part if k == os[0] else part.mod_val(n))
            lw.assign(y, subs, "=", lambda ld: ld(x, its), f"{y} = reshape({lw.array(x)})")

    return x.graph.apply("reshape", [x], out, x.dtype, lower)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """A view without the size-1 axes (``axis``: only those; a listed axis that is not of size 1 is kept)."""
    axes = normalize_axes("squeeze", axis, x.ndim, x.shape)
    return reshape(x, [s for k, s in enumerate(x.shape) if not (k in axes and is_one(s))])


def unsqueeze(x: Tensor, axis: int) -> Tensor:
    """A view with a size-1 axis inserted at ``axis`` (``-1``: last)."""
    n = x.ndim + 1
    if not -n <= axis < n:
        raise ShapeError(f"unsqueeze: axis {axis} is out of range for {shape_text(x.shape)}")
    a = axis % n
    return reshape(x, list(x.shape[:a]) + [1] + list(x.shape[a:]))


def _floordiv(pa: isl.PwAff, n: int) -> isl.PwAff:
    if n == 1:
        return pa
    return pa.scale_down_val(isl.Val.int_from_si(pa.get_ctx(), n)).floor()


def _resolve_shape(x: Tensor, shape: Sequence[Any]) -> tuple[SizeExpr, ...]:
    dims = list(shape)
    if sum(1 for d in dims if isinstance(d, int) and d == -1) > 1:
        raise ShapeError(f"reshape: at most one -1 in {tuple(shape)!r}")
    if any(isinstance(d, int) and d == -1 for d in dims):
        known = [size_of(d) for d in dims if not (isinstance(d, int) and d == -1)]
        if any(s.terms for s in x.shape) or any(s.terms for s in known):
            raise ShapeError(f"reshape: -1 in {tuple(shape)!r} needs constant sizes, {shape_text(x.shape)} has symbolic ones")
        total, rest = math.prod(s.constant for s in x.shape), math.prod(s.constant for s in known)
        if rest == 0 or total % rest:
            raise ShapeError(f"reshape: cannot reshape {shape_text(x.shape)} to {tuple(shape)!r}")
        dims = [total // rest if isinstance(d, int) and d == -1 else d for d in dims]
    try:
        return tuple(size_of(d) for d in dims)
    except TypeError as e:
        raise ShapeError(f"reshape: shape {tuple(shape)!r}: {e}") from None


def _groups(src: Sequence[SizeExpr], dst: Sequence[SizeExpr]) -> list[tuple[list[int], list[int]]]:
    """Pairs (source axes, destination axes) of equal element count, in order; size-1 axes stand alone."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    bad = ShapeError(f"reshape: cannot reshape {shape_text(src)} to {shape_text(dst)}")
    while i < len(src) or j < len(dst):
        if i < len(src) and is_one(src[i]):
            groups.append(([i], []))
            i += 1
        elif j < len(dst) and is_one(dst[j]):
            groups.append(([], [j]))
            j += 1
        elif i < len(src) and j < len(dst) and same_size(src[i], dst[j]):
            groups.append(([i], [j]))
            i, j = i + 1, j + 1
        elif i < len(src) and j < len(dst):
            xs, os = [i], [j]
            if src[i].terms or dst[j].terms:
                raise ShapeError(f"reshape: {shape_text(src)} to {shape_text(dst)} splits or merges symbolic sizes (only constant ones can be)")
            px, po = src[i].constant, dst[j].constant
            i, j = i + 1, j + 1
            while px != po:
                if px < po and i < len(src) and not src[i].terms:
                    px, i = px * src[i].constant, i + 1
                    xs.append(i - 1)
                elif po < px and j < len(dst) and not dst[j].terms:
                    po, j = po * dst[j].constant, j + 1
                    os.append(j - 1)
                else:
                    raise bad
            groups.append((xs, os))
        else:
            raise bad
    return groups
