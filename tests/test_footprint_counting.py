"""``count_points`` (the traffic model's counter) is exact on the sets the tile search meets: factored
through integer divisions, sliced with bisection over runs of slices, or scanned. The oracle is isl's own
point scan on the whole set (slow, but exact)."""

from __future__ import annotations

import importlib

import islpy as isl
import pytest

import polyfuse as pf

counting = importlib.import_module("polyfuse.cost.counting")

SETS = [
    # a box: one factor per dimension
    "{ [i, j, k] : 0 <= i < 300 and 0 <= j < 200 and 0 <= k < 7 }",
    # a tile index and the element range it covers, twice over (two independent factors)
    "{ [t, u, e, f] : 0 <= t < 64 and 0 <= u < 48 and 32t <= e < 32t + 32 and e < 2000 and 16u <= f < 16u + 16 }",
    # a skewed band's footprint (the fused MLP's w1): constant in the middle, linear at both ends
    "{ [a, b, o0, o1] : 0 <= a <= 63 and 0 <= o0 <= 255 and 16b - o0 <= o1 <= 15 + 16b - o0 and 0 <= o1 <= 1023 }",
    # a footprint with integer divisions linking only some dimensions
    "{ [i0, i1, i2, o0, o1] : 8i0 <= o0 <= 7 + 8i0 and 0 <= o0 <= 511 and 0 <= i2 <= 15 and "
    "-31 + 32i1 - 32i2 <= o1 <= 31 + 32i1 - 32i2 and 0 <= o1 <= 1023 and "
    "((i2 <= 15 and o1 <= 32i1 - 32i2 and 32*floor((-1 + o1)/32) >= -31 - 32i2 + o1) or "
    "(o1 >= -480 + 32i1 and 32i1 - 32i2 <= o1 < 32i1 and 32*floor((o1)/32) < o1)) }",
    # a triangle (an arithmetic series of slices) and a residue class (existential variables)
    "{ [i, j] : 0 <= j <= i < 30000 }",
    "{ [i, j, k] : 0 <= i < 400 and 0 <= j < 100 and 0 <= k < 9 and exists (e : j = 3e + 1) }",
    # a union of overlapping pieces
    "{ [i, j] : 0 <= i < 500 and 0 <= j < 80; [i, j] : 250 <= i < 900 and 40 <= j < 120 }",
]


@pytest.mark.parametrize("text", SETS)
def test_count_points_equals_isl_scan(text):
    s = isl.Set(text)
    assert counting.count_points(s) == int(s.count_val().to_python())


def test_large_sets_are_sliced_and_runs_of_slices_bisected(monkeypatch):
    """The skewed footprint and the triangle are too large to scan: without the chambers' exact sums
    (``cost/chambers.py``), their slices are summed by runs."""
    runs = []
    real = counting._sum_slices
    monkeypatch.setattr(counting, "_sum_slices", lambda *a: runs.append(a[1:3]) or real(*a))
    monkeypatch.setattr(counting, "sum_over_chambers", lambda *a: None)
    for text in (SETS[2], SETS[4]):
        s = isl.Set(text)
        assert counting.count_points(s) == int(s.count_val().to_python())
    assert runs


@pytest.mark.parametrize("text", [
    SETS[2], SETS[4],
    # cholesky's read footprint at n = 1024 once its tile indices are dropped: quadratic slice counts
    "{ [k, i, j] : 0 <= k and i <= 1023 and k < j < i }",
    # vertices at t/2 and t/3: slice counts periodic with period 6
    "{ [t, x, y] : 0 <= t <= 3000 and x >= 0 and y >= 0 and 2x + 3y <= t }",
    # a vertex at t/2 though every coefficient is 1
    "{ [t, x, y] : 0 <= t <= 3000 and 0 <= x and 0 <= y and x + y <= t and x <= y and y <= 1200 }",
])
def test_chambers_sum_slices_exactly(text):
    """Polytopes sliced along dimension 0: the chambers' polynomials (a few slices each) give isl's count."""
    chambers = importlib.import_module("polyfuse.cost.chambers")
    s = isl.Set(text)
    lo, hi = int(s.dim_min_val(0).to_python()), int(s.dim_max_val(0).to_python())
    slices = []

    def at(v):
        slices.append(v)
        return int(s.fix_val(isl.dim_type.set, 0, isl.Val.int_from_si(s.get_ctx(), v)).project_out(isl.dim_type.set, 0, 1)
                   .count_val().to_python())

    assert chambers.sum_over_chambers(s, lo, hi, at) == int(s.count_val().to_python())
    if hi - lo > 1000:
        assert len(slices) < (hi - lo + 1) / 4


def test_determined_dimensions_are_dropped_before_counting():
    """A tile index the element determines (``i1 = floor(o0 / 32)``) is projected out; one that several
    tiles share is kept."""
    s = isl.Set("{ [i0, i1, o0] : 0 <= i0 < 1024 and 32i1 <= o0 <= 31 + 32i1 and i0 < o0 < 1024 }")
    assert counting._without_determined_dims(s).dim(isl.dim_type.set) == 2
    shared = isl.Set("{ [i1, o0] : 0 <= i1 < 32 and 0 <= o0 <= 30 + 32i1 }")
    assert counting._without_determined_dims(shared) is None
    assert counting.count_points(s) == int(s.count_val().to_python())


def test_a_count_periodic_in_the_tile_index_is_not_taken_for_a_constant():
    """Multiples of 3 in 32-element tiles: 11, 11, 10 per tile (period 3). With 20403 tiles the run's
    ends, quartiles and middle all fall on tiles of the same phase; the ends' neighbours do not."""
    s = isl.Set("{ [t, e] : 0 <= t < 20403 and 32t <= e < 32t + 32 and exists (k : e = 3k) }")
    assert counting.count_points(s) == int(s.count_val().to_python())


def test_factoring_sees_through_integer_divisions():
    """``t`` and ``e`` are linked only through ``floor(e / 32)``: the set factors as {t, e} x {u}."""
    piece = isl.Set("{ [t, u, e] : 0 <= t < 10 and 0 <= u < 5 and 0 <= e < 320 and t = floor(e / 32) }").get_basic_sets()[0]
    groups = sorted(sorted(g) for g in counting._independent_dims(piece))
    assert groups == [[0, 2], [1]]


def test_region_counts_are_counted_once_per_region(monkeypatch):
    """The tile search, the variants and smart fusion ask about the same kernels again: counted once."""
    n = pf.params("N")

    @pf.program
    def scale(A: pf.f32[n], B: pf.f32[n]):
        for i in range(n):
            B[i] = A[i] * 2.0

    footprint = importlib.import_module("polyfuse.cost.footprint")
    calls = []
    real = footprint._region_counts
    monkeypatch.setattr(footprint, "_region_counts", lambda *a: calls.append(1) or real(*a))
    first = pf.schedule(scale, target="c", params={"N": 4096}).traffic()
    done = len(calls)
    again = pf.schedule(scale, target="c", params={"N": 4096}).traffic()
    assert again.total_bytes == first.total_bytes == 2 * 4 * 4096
    assert len(calls) == done


def test_pieces_that_never_meet_are_counted_apart():
    """A 5-point stencil's read footprint per tile: one piece per neighbour, each element a different
    function of the tile. The pieces that cannot meet are counted as groups of their own, and the counts
    add up to isl's scan of the union."""
    text = ("{ [t, u, a, b] : 0 <= t < 40 and 0 <= u < 40 and "
            "((a = t and 0 <= b < 400 and 10u <= b < 10u + 10) or (a = t + 1 and 0 <= b < 400 and 10u <= b < 10u + 10) or "
            "(a = t - 1 and 0 <= b < 400 and 10u <= b < 10u + 10) or (a = t and 0 <= b < 400 and 10u - 1 <= b < 10u + 9) or "
            "(a = t + 5 and 0 <= b < 400 and 10u + 1 <= b < 10u + 11)) }")
    s = isl.Set(text)
    groups = counting._overlapping_groups(s)
    assert groups is not None and len(groups) == 4  # (a = t and the shifted b overlap: one group)
    assert sum(int(g.count_val().to_python()) for g in groups) == int(s.count_val().to_python())
    assert counting.count_points(s) == int(s.count_val().to_python())
