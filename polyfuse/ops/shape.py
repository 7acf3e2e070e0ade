"""Layout operators: ``transpose`` (numpy's axes convention; default reverses the axes)."""

from __future__ import annotations

from collections.abc import Sequence

from polyfuse.errors import ShapeError
from polyfuse.frontend.graph import Tensor
from polyfuse.frontend.lowering import Lowering
from polyfuse.frontend.shapes import shape_text


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """``out[i_0, ..., i_n] = x[...]`` with ``out.shape[k] = x.shape[axes[k]]``."""
    n = x.ndim
    perm = tuple(range(n))[::-1] if axes is None else tuple(a % n if isinstance(a, int) and -n <= a < n else -1 for a in axes)
    if sorted(perm) != list(range(n)):
        raise ShapeError(f"transpose: axes {tuple(axes)!r} are not a permutation of the {n} axes of {shape_text(x.shape)}")
    shape = tuple(x.shape[a] for a in perm)

    def lower(lw: Lowering, out: Tensor, y: str) -> None:
        with lw.nest(shape) as its:
            src = [""] * n
            for k, a in enumerate(perm):
                src[a] = its[k]
            lw.assign(y, its, "=", lambda ld: ld(x, src), f"{y} = transpose({lw.array(x)}, {perm})")

    return x.graph.apply("transpose", [x], shape, x.dtype, lower)
