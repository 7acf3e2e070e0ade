"""Exact point counts of bounded integer sets at concrete sizes: the traffic model's counter.

isl's own scan (``isl_set_count_val``) enumerates every dimension but the last, which is far too slow on
the footprints the tile search and smart fusion ask about (a tile index and the elements it covers, at a
representative size of 1024 or more). :func:`count_points` therefore first takes the set apart where that
is exact -- independent factors, dimensions the others determine, pieces that do not overlap -- and sums
slices over the chambers of a polytope (``chambers.py``) or along the leading dimension, and scans only
what is left small. ``footprint.py`` defines what is counted.
"""

from __future__ import annotations

import math

import islpy as isl

from polyfuse.cost.chambers import sum_over_chambers

SCAN_ROWS = 20_000
"""Above this many scanned rows :func:`count_points` slices the leading dimension instead of scanning."""


def _drop_params(s: isl.Set) -> isl.Set:
    n = s.dim(isl.dim_type.param)
    return s.project_out(isl.dim_type.param, 0, n) if n else s


def _bounds(s: isl.Set, k: int) -> tuple[int, int]:
    lo, hi = s.dim_min_val(k), s.dim_max_val(k)
    if not (lo.is_int() and hi.is_int()):
        raise ValueError(f"unbounded set while counting footprints: {s}")
    return int(lo.to_python()), int(hi.to_python())


def _rows(s: isl.Set, limit: int) -> int:
    """The rows isl's scan of ``s`` visits (every dimension but the last), or more than ``limit``."""
    rows = 1
    for k in range(s.dim(isl.dim_type.set) - 1):
        lo, hi = _bounds(s, k)
        rows *= hi - lo + 1
        if rows > limit:
            break
    return rows


MAX_PERIOD = 64
"""Slices are summed by residue classes of at most this period; a set whose slice counts may have a longer
period has every slice counted (see :func:`count_points`)."""


def count_points(s: isl.Set) -> int:
    """The exact number of integer points of the bounded, parameter-free set ``s``.

    A set whose dimensions fall into groups that no constraint links (a tile index and the array index it
    bounds; a box) is the product of its groups' counts (:func:`_count_factored`). Otherwise small sets
    are scanned by isl (``count_val``: every dimension but the last is enumerated). Larger ones first lose
    the dimensions the others determine (:func:`_without_determined_dims`: a tile index given by the element
    it covers), are split into groups of pieces that do not meet (:func:`_overlapping_groups`), then into
    disjoint basic sets (:func:`_disjoint_pieces`); a polytope left is summed
    slice by slice along dimension 0 over its chambers (``chambers.py``: exact, a few slices per chamber).
    Otherwise (integer divisions, too many chambers) it is sliced along dimension 0 (``[lo, hi]``) as
    follows. The count of slice ``t`` is a quasi-polynomial in ``t``: a
    polynomial on each residue class of ``t`` modulo a period that divides the least common multiple
    ``P`` of the other dimensions' coefficients and of the integer divisions' (:func:`_period`; 1 for a
    tile footprint ``32t <= e < 32t + 32``, 3 for the multiples of 3 it holds). The interior slices of
    each residue class are summed by :func:`_sum_slices`: a run whose counts lie on a line at seven
    sample points (its ends, their neighbours, its quartiles and middle: equal counts for
    translation-invariant interior tiles, a line for triangular domains) is taken to lie on that line
    throughout, which is exact where the slice count is concave, as the lengths of a convex set's slices
    are; other runs are bisected (a skewed band: constant in the middle, linear near each end), down to
    counting every slice of short runs. Where ``P`` exceeds :data:`MAX_PERIOD` every slice is counted.
    """
    s = _drop_params(s)
    if s.is_empty():
        return 0
    if s.dim(isl.dim_type.set) <= 1:
        return int(s.count_val().to_python())
    rows = _rows(s, SCAN_ROWS) if s.n_basic_set() > 2 else None  # (a factored set needs no rows)
    if rows is not None and rows > SCAN_ROWS:
        apart = _overlapping_groups(s)
        if apart is not None:
            return sum(count_points(group) for group in apart)
    product = _count_factored(s)
    if product is not None:
        return product
    if (rows if rows is not None else _rows(s, SCAN_ROWS)) <= SCAN_ROWS:
        return int(s.count_val().to_python())
    fewer = _without_determined_dims(s)
    if fewer is not None:
        return count_points(fewer)
    pieces = _disjoint_pieces(s)
    if pieces is not None:
        return sum(count_points(piece) for piece in pieces)
    lo, hi = _bounds(s, 0)
    ctx = s.get_ctx()

    def at(v: int) -> int:
        return count_points(s.fix_val(isl.dim_type.set, 0, isl.Val.int_from_si(ctx, v)).project_out(isl.dim_type.set, 0, 1))

    if hi - lo + 1 > 8:
        exact = sum_over_chambers(s, lo, hi, at)
        if exact is not None:
            return exact
    period = _period(s)
    if hi - lo + 1 <= 8 or period > MAX_PERIOD:
        return sum(at(v) for v in range(lo, hi + 1))
    total = 0
    for r in range(period):
        n = (hi - (lo + r)) // period + 1 if lo + r <= hi else 0
        if n <= 0:
            continue
        first = lo + r

        def term(j: int, first: int = first) -> int:
            return at(first + period * j)

        total += _sum_slices(term, 0, n - 1, term(0), term(n - 1))
    return total


def _without_determined_dims(s: isl.Set) -> isl.Set | None:
    """``s`` with every dimension that the others determine projected out (a tile index given by the
    element it covers, ``t = floor(e / 32)``; an element index equal to an iterator), or ``None`` when no
    dimension is determined. Exact: a dimension is dropped only where the map from the other dimensions to
    it is single-valued, so the projection has exactly as many points; and it leaves fewer dimensions to
    scan or slice (cholesky's footprint at 1024: 20 s sliced, 0.4 s after dropping its two tile indices)."""
    flat = s.flatten() if s.is_wrapping() else s
    dropped = False
    k = flat.dim(isl.dim_type.set) - 1
    while k >= 0 and flat.dim(isl.dim_type.set) > 1:
        if isl.Map.from_domain(flat).move_dims(isl.dim_type.out, 0, isl.dim_type.in_, k, 1).is_single_valued():
            flat, dropped = flat.project_out(isl.dim_type.set, k, 1), True
        k -= 1
    return flat if dropped else None


def _overlapping_groups(s: isl.Set) -> list[isl.Set] | None:
    """The basic sets of ``s`` grouped so that no two groups share a point (pieces linked by overlaps,
    directly or through others, form one group), each group as a set; ``None`` when they form one group.
    The groups' counts add up, and each is simpler than the union: a stencil's footprint is one piece per
    neighbour read (``A[i - 1][j]``, ``A[i][j + 1]``, ...), and pieces whose element is a different function
    of the tile never meet, so each group keeps the equalities that let its element dimensions be dropped
    (heat-3d's footprints: 280 ms to make the seven pieces disjoint, 60 ms in five groups)."""
    flat = s.flatten() if s.is_wrapping() else s
    pieces = [isl.Set.from_basic_set(b) for b in flat.get_basic_sets()]
    if len(pieces) <= 1:
        return None
    groups = _Groups(len(pieces))
    for a in range(len(pieces)):
        for b in range(a + 1, len(pieces)):
            if groups.root(a) != groups.root(b) and not pieces[a].intersect(pieces[b]).is_empty():
                groups.link([a, b])
    members: dict[int, isl.Set] = {}
    for k, piece in enumerate(pieces):
        r = groups.root(k)
        members[r] = members[r].union(piece) if r in members else piece
    return list(members.values()) if len(members) > 1 else None


class _Groups:
    """Items ``0 .. n - 1`` in groups that :meth:`link` joins (union-find); :meth:`root` names an item's group."""

    def __init__(self, n: int) -> None:
        self._up = list(range(n))

    def root(self, k: int) -> int:
        while self._up[k] != k:
            k = self._up[k]
        return k

    def link(self, items: list[int]) -> None:
        for k in items[1:]:
            self._up[self.root(k)] = self.root(items[0])


def _disjoint_pieces(s: isl.Set) -> list[isl.Set] | None:
    """The basic sets of ``s`` made disjoint, each as a set, when there are several (their counts add up,
    and each may lose dimensions the union does not determine: a footprint's ``A[o0, i0]`` part), else
    ``None``."""
    flat = s.flatten() if s.is_wrapping() else s
    if flat.n_basic_set() <= 1:
        return None
    pieces = flat.make_disjoint().get_basic_sets()
    return [isl.Set.from_basic_set(p) for p in pieces] if len(pieces) > 1 else None


def _period(s: isl.Set) -> int:
    """The least common multiple of the absolute coefficients of every dimension but 0 and of every integer
    division in the constraints of ``s``, and of the divisions' denominators: a multiple of the period of
    its slice counts along dimension 0."""
    flat = s.flatten() if s.is_wrapping() else s
    period = 1
    for piece in flat.get_basic_sets():
        n, nd = piece.dim(isl.dim_type.set), piece.dim(isl.dim_type.div)
        values = []
        for c in piece.get_constraints():
            values += [c.get_coefficient_val(isl.dim_type.set, k) for k in range(1, n)]
            values += [c.get_coefficient_val(isl.dim_type.div, d) for d in range(nd)]
        for d in range(nd):
            try:
                values.append(piece.get_div(d).get_denominator_val())
            except isl.Error:
                pass  # an unknown division: its constraints' coefficients count
        for v in values:
            k = abs(int(v.to_python())) if v.is_int() else 1
            if k > 1:
                period = period * k // math.gcd(period, k)
                if period > MAX_PERIOD:
                    return period
    return period


def _sum_slices(at, a: int, z: int, ca: int, cz: int) -> int:
    """``sum(at(v) for v in range(a, z + 1))`` given ``ca = at(a)`` and ``cz = at(z)`` (see
    :func:`count_points`)."""
    n = z - a + 1
    if n <= 2:
        return ca + (cz if n == 2 else 0)
    if n <= 8:
        return ca + cz + sum(at(v) for v in range(a + 1, z))
    mid = (a + z) // 2
    q1, q3 = (a + mid) // 2, (mid + z) // 2
    cm = at(mid)
    if (cz - ca) % (z - a) == 0:
        slope = (cz - ca) // (z - a)
        if cm == ca + slope * (mid - a) and all(at(v) == ca + slope * (v - a) for v in (q1, q3, a + 1, z - 1)):
            return n * (ca + cz) // 2
    return _sum_slices(at, a, mid, ca, cm) + _sum_slices(at, mid + 1, z, at(mid + 1), cz)


def _count_factored(s: isl.Set) -> int | None:
    """The points of ``s`` as a sum over disjoint basic sets of products of independent factors (groups of
    dimensions that no constraint or integer division links, e.g. a tile index and the array index it
    bounds), each counted on its own; ``None`` when some piece does not factor. Exact, and far cheaper than
    scanning or slicing the whole set (a 7-d stencil footprint: 0.5 s scanned, milliseconds factored)."""
    flat = s.flatten() if s.is_wrapping() else s
    pieces = flat.get_basic_sets()
    groups = [_independent_dims(piece) for piece in pieces]
    if any(len(g) == 1 for g in groups):
        return None
    if len(pieces) > 1:
        pieces = flat.make_disjoint().get_basic_sets()
        groups = [_independent_dims(piece) for piece in pieces]
        if any(len(g) == 1 for g in groups):
            return None
    total = 0
    n = flat.dim(isl.dim_type.set)
    for piece, piece_groups in zip(pieces, groups):
        product = 1
        for group in piece_groups:
            factor = isl.Set.from_basic_set(piece)
            for k in reversed(range(n)):
                if k not in group:
                    factor = factor.project_out(isl.dim_type.set, k, 1)
            product *= count_points(factor)
            if product == 0:
                break
        total += product
    return total


def _independent_dims(piece: isl.BasicSet) -> list[set[int]]:
    """The groups of set dimensions of ``piece`` that no constraint links, directly or through an
    integer division (a division links the dimensions of its definition and of the constraints using it)."""
    n, nd = piece.dim(isl.dim_type.set), piece.dim(isl.dim_type.div)
    groups = _Groups(n + nd)  # set dimensions, then divisions
    link = groups.link
    for c in piece.get_constraints():
        link([k for k in range(n) if not c.get_coefficient_val(isl.dim_type.set, k).is_zero()]
             + [n + d for d in range(nd) if not c.get_coefficient_val(isl.dim_type.div, d).is_zero()])
    for d in range(nd):
        try:
            div = piece.get_div(d)
        except isl.Error:
            continue  # an unknown division (an existential variable): only its constraints (above) link it
        if div.is_nan():
            continue
        link([n + d] + [k for k in range(n) if not div.get_coefficient_val(isl.dim_type.in_, k).is_zero()]
             + [n + e for e in range(nd) if not div.get_coefficient_val(isl.dim_type.div, e).is_zero()])
    out: dict[int, set[int]] = {}
    for k in range(n):
        out.setdefault(groups.root(k), set()).add(k)
    return list(out.values())


def count_relation(rel: isl.UnionMap) -> int:
    """The number of ``(t, e)`` pairs of a union map, each map counted as its wrapped set."""
    total = 0
    maps: list[isl.Map] = []
    rel.foreach_map(maps.append)
    for m in maps:
        total += count_points(m.wrap())
    return total


def count_set(uset: isl.UnionSet) -> int:
    sets: list[isl.Set] = []
    uset.foreach_set(sets.append)
    return sum(count_points(s) for s in sets)
