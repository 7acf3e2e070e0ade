"""Exact sums of slice counts over the chambers of a polytope: the fast path of ``footprint.count_points``.

Slicing a bounded polytope ``P = { (t, x) : A x <= b + c t }`` (one basic set, no integer divisions) along
``t`` gives slices ``P_t`` whose vertices are affine functions of ``t`` on each *chamber*, an interval of
``t`` over which the vertex set keeps its combinatorial type (isl's parametric vertex enumeration,
``isl_basic_set_compute_vertices`` with ``t`` a parameter, gives the chambers and their vertices). On the
integer points inside a chamber, the number of points of ``P_t`` is a quasi-polynomial in ``t`` of degree
at most ``dim x``, whose period divides the least common multiple of the denominators of the vertices'
coordinates (parametric Ehrhart theory: Clauss and Loechner, McMullen). So on each residue class of the
chamber's interior modulo that period it *is* a polynomial of degree ``dim x``: ``dim x + 1`` slice counts
determine it, and its sum over the class follows from its forward differences (Newton's formula). The
chambers' end points are counted slice by slice.

Each class is checked at one more slice (its last) before its sum is taken; a mismatch (which the theory
excludes) makes :func:`sum_over_chambers` give up (``None``), and the caller counts the slices its own way.
The cost is about ``(dim x + 2) x period`` slice counts per chamber instead of one per slice: cholesky's
footprint of ``{ (k, i, j) : k < j < i < 1024 }`` in 4 slices rather than a thousand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import islpy as isl

MAX_CLASSES = 64
"""Give up (``None``) where a chamber's period exceeds this: slicing every class would cost more."""

MAX_CHAMBERS = 32
"""Give up where the slices change shape more often than this (each chamber costs a few slice counts)."""


def sum_over_chambers(s: isl.Set, lo: int, hi: int, at: Callable[[int], int]) -> int | None:
    """``sum(at(t) for t in range(lo, hi + 1))`` for the slices ``at(t)`` of ``s`` (a parameter-free
    bounded set) along dimension 0, or ``None`` where ``s`` is not one basic set without integer divisions
    (or has too many chambers, or too long a period): see the module docstring."""
    flat = s.flatten() if s.is_wrapping() else s
    if flat.n_basic_set() != 1:
        return None
    piece = flat.get_basic_sets()[0]
    if piece.dim(isl.dim_type.div) != 0:
        return None
    degree = piece.dim(isl.dim_type.set) - 1
    chambers = _chambers(piece)
    if chambers is None:
        return None
    covered = lo
    for a, z, _ in sorted(chambers):
        if a > covered:
            return None  # (cannot happen: the closed chambers cover the slices' range; counted otherwise then)
        covered = max(covered, z + 1)
    if covered <= hi:
        return None
    ends = sorted({v for a, z, _ in chambers for v in (a, z) if lo <= v <= hi})
    total = sum(at(v) for v in ends)
    for a, z, period in chambers:
        first, last = max(a + 1, lo), min(z - 1, hi)  # the chamber's interior (its ends are counted above)
        if first > last:
            continue
        for r in range(period):
            start = first + r
            if start > last:
                break
            n = (last - start) // period + 1
            part = _sum_polynomial(lambda j, start=start: at(start + period * j), n, degree)
            if part is None:
                return None
            total += part
    return total


def _chambers(piece: isl.BasicSet) -> list[tuple[int, int, int]] | None:
    """``(a, z, period)`` per chamber of ``piece`` sliced along dimension 0: the chamber is the integer
    interval ``[a, z]`` (ends included; its interior is what the chamber's polynomial covers) and the
    period the lcm of its vertices' denominators."""
    param = piece.move_dims(isl.dim_type.param, 0, isl.dim_type.set, 0, 1)
    vertices = param.compute_vertices()
    if vertices.get_n_vertices() > 4 * MAX_CHAMBERS:
        return None
    out: list[tuple[int, int, int]] = []

    def cell(c: isl.Cell) -> None:  # (a cell lives only during the callback: everything is read here)
        periods = [1]

        def vertex(v: isl.Vertex) -> None:
            expr = v.get_expr()
            for k in range(expr.dim(isl.dim_type.out)):
                den = int(expr.get_at(k).get_denominator_val().to_python())
                periods[0] = periods[0] * den // math.gcd(periods[0], den)

        c.foreach_vertex(vertex)
        out.append((*_interval(c.get_domain()), periods[0]))

    vertices.foreach_cell(cell)
    if len(out) > MAX_CHAMBERS or any(period > MAX_CLASSES for _, _, period in out):
        return None
    return out


def _sum_polynomial(value: Callable[[int], int], n: int, degree: int) -> int | None:
    """``sum(value(j) for j in range(n))`` for ``value`` a polynomial of degree at most ``degree`` in ``j``
    (``None`` when it is not one at ``j = n - 1``, the check)."""
    if n <= degree + 2:
        return sum(value(j) for j in range(n))
    samples = [value(j) for j in range(degree + 1)]
    diffs = []  # forward differences at 0: p(j) = sum_k diffs[k] * C(j, k)
    row = samples
    while row:
        diffs.append(row[0])
        row = [b - a for a, b in zip(row, row[1:])]
    if value(n - 1) != sum(d * math.comb(n - 1, k) for k, d in enumerate(diffs)):
        return None
    return sum(d * math.comb(n, k + 1) for k, d in enumerate(diffs))


def _interval(domain: isl.BasicSet) -> tuple[int, int]:
    """The integer interval ``[ceil(lo), floor(hi)]`` of a chamber, a rational interval of the one parameter
    read off its constraints (isl's ``dim_min_val`` is wrong on such rational sets)."""
    lo: Fraction | None = None
    hi: Fraction | None = None
    for c in domain.get_constraints():
        a = _fraction(c.get_coefficient_val(isl.dim_type.param, 0))
        b = _fraction(c.get_constant_val())
        if a == 0:
            continue
        bound = -b / a  # a t + b >= 0 (or == 0)
        if c.is_equality() or a > 0:
            lo = bound if lo is None else max(lo, bound)
        if c.is_equality() or a < 0:
            hi = bound if hi is None else min(hi, bound)
    if lo is None or hi is None:
        raise ValueError(f"unbounded chamber {domain}")
    return math.ceil(lo), math.floor(hi)


def _fraction(v: isl.Val) -> Fraction:
    """A constraint's coefficient (an integer) as a fraction."""
    return Fraction(int(v.to_python()))
