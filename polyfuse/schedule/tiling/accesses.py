"""Array accesses as affine functions of the statement's iterators: what the loop-shape passes ask of an
access (is it one affine piece? how does its flat address move along a loop?).

The register micro-tiles asked first (``microtile.py``); row-wise kernels, streaming stores, locality
ratings, accumulator forwarding, pivots and the printers ask the same questions, so the answers live here.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

Coefficients = tuple[tuple[tuple[int, ...], Mapping[str, int], int], ...]
"""Per array dimension: (coefficient of each statement iterator, coefficient of each size, constant)."""


def single_multi_aff(relation: isl.Map) -> isl.MultiAff | None:
    """``relation`` as one multi-affine function, or ``None`` when it takes several pieces."""
    pma = isl.PwMultiAff.from_map(relation)
    if pma.n_piece() != 1:
        return None
    pieces: list[isl.MultiAff] = []
    pma.foreach_piece(lambda _set, ma: pieces.append(ma))
    return pieces[0]


def access_coefficients(relation: isl.Map) -> Coefficients | None:
    """The access as one affine function per array dimension, or ``None`` when it is not a single affine
    piece without integer divisions (then no micro-tile)."""
    ma = single_multi_aff(relation)
    if ma is None:
        return None
    out = []
    for d in range(ma.dim(isl.dim_type.out)):
        aff = ma.get_at(d)
        if aff.dim(isl.dim_type.div) > 0:
            return None
        its = tuple(_int(aff.get_coefficient_val(isl.dim_type.in_, k)) for k in range(aff.dim(isl.dim_type.in_)))
        params = {aff.get_dim_name(isl.dim_type.param, p): _int(aff.get_coefficient_val(isl.dim_type.param, p))
                  for p in range(aff.dim(isl.dim_type.param))}
        if None in its or None in params.values():
            return None
        out.append((its, {p: c for p, c in params.items() if c}, _int(aff.get_constant_val())))
    return tuple(out)


def _int(v: isl.Val) -> int | None:
    return int(v.to_python()) if v.is_int() else None


def stride_along(coeffs: Coefficients, d: int) -> str:
    """How the flat (row-major) address moves when iterator ``d`` steps: "zero", "one" (only the last
    dimension, by 1) or "other"."""
    steps = [c[0][d] for c in coeffs]
    if not any(steps):
        return "zero"
    if steps[-1] == 1 and not any(steps[:-1]):
        return "one"
    return "other"
