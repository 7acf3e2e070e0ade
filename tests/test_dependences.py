"""Exact dependence analysis: flow / anti / output relations, distances, carrying loops, reductions.

Every expected relation below is derived by hand from the loop nest (the derivation is in the comment
next to it) and compared with isl ``is_equal``, never with printed text. A brute-force simulation of the
source order at concrete sizes checks the same relations a second, independent way.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

import islpy as isl
import pydot
import pytest

import examples.kernels as K
import polyfuse as pf

# ----- helpers -----------------------------------------------------------------------------------


def _union(rel: isl.Map | isl.UnionMap) -> isl.UnionMap:
    return rel if isinstance(rel, isl.UnionMap) else isl.UnionMap.from_map(rel)


def assert_rel(actual: isl.Map | isl.UnionMap, expected: str, prog: pf.Program) -> None:
    """``actual`` equals the isl text ``expected`` under the program's context."""
    act = _union(actual)
    exp = isl.UnionMap(expected).intersect_params(prog.context)
    assert act.is_equal(exp), f"\nmissing:    {exp.subtract(act).coalesce()}\nunexpected: {act.subtract(exp).coalesce()}"


def dep(prog: pf.Program, kind: str, source: str, sink: str) -> pf.Dependence:
    (d,) = prog.dependences().of_kind(kind).between(source, sink)
    return d


# Interior of an N x N grid, for the stencils.
IN = "1 <= i <= N - 2 and 1 <= j <= N - 2"
IN2 = "1 <= i2 <= N - 2 and 1 <= j2 <= N - 2"


# ----- flow relations, one test per corpus program ------------------------------------------------


def test_add_exp():
    # B[i, j] is written once, by S0[i, j], and read once, by S1[i, j]. A is only read, C only written.
    p = K.add_exp
    deps = p.dependences()
    assert_rel(deps.flow, "[N, M] -> { S0[i, j] -> S1[i, j] : 0 <= i < N and 0 <= j < M }", p)
    assert_rel(deps.anti, "[N, M] -> { }", p)
    assert_rel(deps.output, "[N, M] -> { }", p)
    (d,) = deps
    assert (d.kind, d.source, d.sink, d.array) == ("flow", "S0", "S1", "B")
    # Separate loop nests: no common loop, so the distance is the empty vector and nothing carries it.
    assert d.common_depth == 0 and d.distance == () and d.carried_depth is None and d.loop_independent
    assert not d.is_reduction


def test_gemm():
    # Per (i, j): S0 scales C[i, j], then S1[i, j, 0..K-1] accumulate into it. Each S1 reads the value the
    # previous update left: S0 for k = 0, S1[k - 1] after. A and B are never written.
    p = K.gemm
    deps = p.dependences()
    assert_rel(
        deps.flow,
        "[N, M, K] -> { S0[i, j] -> S1[i, j, 0] : 0 <= i < N and 0 <= j < M and K >= 1;"
        " S1[i, j, k] -> S1[i, j, k + 1] : 0 <= i < N and 0 <= j < M and 0 <= k and k + 1 < K }",
        p,
    )
    # Memory-based: every earlier read/write of C[i, j] against every later update of it.
    every_later = (
        "[N, M, K] -> { S0[i, j] -> S1[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K;"
        " S1[i, j, k] -> S1[i, j, k2] : 0 <= i < N and 0 <= j < M and 0 <= k < k2 < K }"
    )
    assert_rel(deps.anti, every_later, p)
    assert_rel(deps.output, every_later, p)
    chain = dep(p, "flow", "S1", "S1")
    assert chain.is_reduction and chain.distance == (0, 0, 1) and chain.carried_depth == 2
    assert chain.source_accesses == chain.sink_accesses == (0,)
    scale = dep(p, "flow", "S0", "S1")
    # `*=` then `+=` is not one reduction chain.
    assert not scale.is_reduction and scale.distance == (0, 0) and scale.carried_depth is None
    assert all(d.is_reduction for d in deps.between("S1", "S1"))


GEMM_ACC_D = "0 <= i < N and 0 <= j < M"
GEMM_ACC_D2 = "0 <= i2 < N and 0 <= j2 < M"
GEMM_ACC_LT = "(i < i2 or (i = i2 and j < j2))"  # (i, j) strictly before (i2, j2)


def test_gemm_acc_flow():
    # Per (i, j): acc = 0 (S0), acc += ... for k < K (S1), C[i, j] = acc (S2). S2 reads the last update,
    # or S0's zero when the k loop is empty.
    p = K.gemm_acc
    assert_rel(
        p.dependences().flow,
        f"[N, M, K] -> {{ S0[i, j] -> S1[i, j, 0] : {GEMM_ACC_D} and K >= 1;"
        f" S1[i, j, k] -> S1[i, j, k + 1] : {GEMM_ACC_D} and 0 <= k < K - 1;"
        f" S1[i, j, K - 1] -> S2[i, j] : {GEMM_ACC_D} and K >= 1;"
        f" S0[i, j] -> S2[i, j] : {GEMM_ACC_D} and K = 0 }}",
        p,
    )


def test_gemm_acc_scalar_anti_output():
    # The 0-d temporary acc is one memory cell: every read of it is anti-dependent on every later write
    # (S0, S1) and every write output-dependent on every later one. Order: (i, j), then S0 < S1[k] < S2.
    p = K.gemm_acc
    deps = p.dependences()
    d, d2, lt = GEMM_ACC_D, GEMM_ACC_D2, GEMM_ACC_LT
    s1_lt_s1 = f"({lt} or (i = i2 and j = j2 and k < k2))"
    assert_rel(
        deps.anti,
        f"[N, M, K] -> {{ S1[i, j, k] -> S0[i2, j2] : {d} and 0 <= k < K and {d2} and {lt};"
        f" S1[i, j, k] -> S1[i2, j2, k2] : {d} and 0 <= k < K and {d2} and 0 <= k2 < K and {s1_lt_s1};"
        f" S2[i, j] -> S0[i2, j2] : {d} and {d2} and {lt};"
        f" S2[i, j] -> S1[i2, j2, k2] : {d} and {d2} and 0 <= k2 < K and {lt} }}",
        p,
    )
    assert_rel(
        deps.output,
        f"[N, M, K] -> {{ S0[i, j] -> S0[i2, j2] : {d} and {d2} and {lt};"
        f" S0[i, j] -> S1[i2, j2, k2] : {d} and {d2} and 0 <= k2 < K and ({lt} or (i = i2 and j = j2));"
        f" S1[i, j, k] -> S0[i2, j2] : {d} and 0 <= k < K and {d2} and {lt};"
        f" S1[i, j, k] -> S1[i2, j2, k2] : {d} and 0 <= k < K and {d2} and 0 <= k2 < K and {s1_lt_s1} }}",
        p,
    )
    assert {(x.source, x.sink, x.array) for x in deps.of_kind("anti", "output")} <= {
        (a, b, "acc") for a in ("S0", "S1", "S2") for b in ("S0", "S1", "S2")
    }
    # S0 -> S1 is loop-independent within an (i, j) and also carried by both loops.
    s0s1 = dep(p, "output", "S0", "S1")
    assert s0s1.loop_independent and s0s1.carried_depths == (0, 1) and s0s1.carried_depth == 0


def test_two_mm():
    # tmp[i, j] = 0 (S0), += over k < K (S1); D[i, j] *= beta (S2), += tmp[i, k] * C[k, j] over k < M (S3).
    # S3[i, j2, k] reads tmp[i, k], whose final value is S1[i, k, K - 1] (S0[i, k] when K = 0).
    p = K.two_mm
    assert_rel(
        p.dependences().flow,
        "[N, M, K] -> { S0[i, j] -> S1[i, j, 0] : 0 <= i < N and 0 <= j < M and K >= 1;"
        " S1[i, j, k] -> S1[i, j, k + 1] : 0 <= i < N and 0 <= j < M and 0 <= k < K - 1;"
        " S1[i, j, K - 1] -> S3[i, j2, j] : 0 <= i < N and 0 <= j < M and 0 <= j2 < N and K >= 1;"
        " S0[i, j] -> S3[i, j2, j] : 0 <= i < N and 0 <= j < M and 0 <= j2 < N and K = 0;"
        " S2[i, j] -> S3[i, j, 0] : 0 <= i < N and 0 <= j < N and M >= 1;"
        " S3[i, j, k] -> S3[i, j, k + 1] : 0 <= i < N and 0 <= j < N and 0 <= k < M - 1 }",
        p,
    )
    d = dep(p, "flow", "S1", "S3")
    assert d.distance == () and d.carried_depth is None  # different loop nests


def test_atax():
    # y[j] = 0 (S0); per row i < M: tmp[i] = 0 (S1), tmp[i] += (S2, j < N), y[j] += A[i, j] * tmp[i] (S3).
    p = K.atax
    assert_rel(
        p.dependences().flow,
        "[N, M] -> { S0[j] -> S3[0, j] : 0 <= j < N and M >= 1;"
        " S3[i, j] -> S3[i + 1, j] : 0 <= i < M - 1 and 0 <= j < N;"
        " S1[i] -> S2[i, 0] : 0 <= i < M and N >= 1;"
        " S2[i, j] -> S2[i, j + 1] : 0 <= i < M and 0 <= j < N - 1;"
        " S2[i, N - 1] -> S3[i, j] : 0 <= i < M and 0 <= j < N }",
        p,
    )
    y = dep(p, "flow", "S3", "S3")
    assert y.distance == (1, 0) and y.carried_depth == 0 and y.is_reduction
    t = dep(p, "flow", "S2", "S3")  # common loop i only: same i, different j loops
    assert t.common_depth == 1 and t.distance == (0,) and t.carried_depth is None


def test_bicg():
    # s[j] = 0 (S0); per i < N: q[i] = 0 (S1), then per j < M: s[j] += (S2), q[i] += (S3).
    p = K.bicg
    assert_rel(
        p.dependences().flow,
        "[N, M] -> { S0[j] -> S2[0, j] : 0 <= j < M and N >= 1;"
        " S2[i, j] -> S2[i + 1, j] : 0 <= i < N - 1 and 0 <= j < M;"
        " S1[i] -> S3[i, 0] : 0 <= i < N and M >= 1;"
        " S3[i, j] -> S3[i, j + 1] : 0 <= i < N and 0 <= j < M - 1 }",
        p,
    )
    s, q = dep(p, "flow", "S2", "S2"), dep(p, "flow", "S3", "S3")
    assert (s.distance, s.carried_depth) == ((1, 0), 0)
    assert (q.distance, q.carried_depth) == ((0, 1), 1)


JAC1_IN = "1 <= i <= N - 2 and 1 <= i2 <= N - 2 and -1 <= i2 - i <= 1"


def test_jacobi_1d():
    # Per t: S0 writes B[i] from A[i-1..i+1], then S1 writes A[i] from B[i-1..i+1] (1 <= i <= N-2).
    # S1[t, i2] reads B[i2 + {-1, 0, 1}], written by S0 in the same t; S0[t + 1, i2] reads A written by
    # S1 in step t.
    p = K.jacobi_1d
    deps = p.dependences()
    assert_rel(
        deps.flow,
        f"[T, N] -> {{ S0[t, i] -> S1[t, i2] : 0 <= t < T and {JAC1_IN};"
        f" S1[t, i] -> S0[t + 1, i2] : 0 <= t < T - 1 and {JAC1_IN} }}",
        p,
    )
    # S0 reads A before S1 of the same or any later step overwrites it; S1 reads B before any later S0.
    assert_rel(
        deps.anti,
        f"[T, N] -> {{ S0[t, i] -> S1[t2, i2] : 0 <= t <= t2 < T and {JAC1_IN};"
        f" S1[t, i] -> S0[t2, i2] : 0 <= t < t2 < T and {JAC1_IN} }}",
        p,
    )
    assert_rel(
        deps.output,
        "[T, N] -> { S0[t, i] -> S0[t2, i] : 0 <= t < t2 < T and 1 <= i <= N - 2;"
        " S1[t, i] -> S1[t2, i] : 0 <= t < t2 < T and 1 <= i <= N - 2 }",
        p,
    )
    # Only t is common to S0 and S1.
    assert dep(p, "flow", "S0", "S1").distance == (0,) and dep(p, "flow", "S0", "S1").carried_depth is None
    assert dep(p, "flow", "S1", "S0").distance == (1,) and dep(p, "flow", "S1", "S0").carried_depth == 0
    anti = dep(p, "anti", "S0", "S1")
    assert anti.distance is None and anti.carried_depths == (0,) and anti.loop_independent
    out = dep(p, "output", "S0", "S0")
    assert out.distance is None and out.carried_depths == (0,) and out.distance_bounds == ((1, None), (0, 0))


def test_jacobi_2d():
    # As jacobi_1d with a 5-point neighbourhood. The i/j loops of S0 and S1 are different loops, so the
    # S0 -> S1 flow is over the common t loop only, at distance 0: no loop carries it.
    p = K.jacobi_2d
    nb = "((i2 = i and -1 <= j2 - j <= 1) or (j2 = j and -1 <= i2 - i <= 1))"
    assert_rel(
        p.dependences().flow,
        f"[T, N] -> {{ S0[t, i, j] -> S1[t, i2, j2] : 0 <= t < T and {IN} and {IN2} and {nb};"
        f" S1[t, i, j] -> S0[t + 1, i2, j2] : 0 <= t < T - 1 and {IN} and {IN2} and {nb} }}",
        p,
    )
    fwd, back = dep(p, "flow", "S0", "S1"), dep(p, "flow", "S1", "S0")
    assert fwd.common_depth == 1 and fwd.distance == (0,) and fwd.carried_depth is None and fwd.loop_independent
    assert back.distance == (1,) and back.carried_depth == 0 and not back.loop_independent
    out = dep(p, "output", "S1", "S1")  # A[i, j] rewritten in every later step
    assert out.distance is None and out.carried_depths == (0,) and out.distance_bounds == ((1, None), (0, 0), (0, 0))


def test_seidel_2d():
    # In-place 9-point sweep, order (t, i, j). S0[t, i, j] reads A[i + a, j + b]. For (a, b) before (0, 0)
    # in (i, j) order (a = -1, or a = 0 and b = -1) that element was just rewritten in this sweep, by
    # S0[t, i + a, j + b]; otherwise its last writer is the previous sweep, S0[t - 1, i + a, j + b].
    p = K.seidel_2d
    deps = p.dependences()
    same_t = "((i2 = i - 1 and -1 <= j2 - j <= 1) or (i2 = i and j2 = j - 1))"
    prev_t = "((i2 = i and 0 <= j2 - j <= 1) or (i2 = i + 1 and -1 <= j2 - j <= 1))"
    assert_rel(
        deps.flow,
        f"[T, N] -> {{ S0[t, i2, j2] -> S0[t, i, j] : 0 <= t < T and {IN} and {IN2} and {same_t};"
        f" S0[t, i2, j2] -> S0[t + 1, i, j] : 0 <= t < T - 1 and {IN} and {IN2} and {prev_t} }}",
        p,
    )
    # Each read of A[i + a, j + b] against every later write of that element.
    later = "(t < t2 or (t = t2 and (i < i2 or (i = i2 and j < j2))))"
    assert_rel(
        deps.anti,
        f"[T, N] -> {{ S0[t, i, j] -> S0[t2, i2, j2] : 0 <= t < T and 0 <= t2 < T and {IN} and {IN2}"
        f" and -1 <= i2 - i <= 1 and -1 <= j2 - j <= 1 and {later} }}",
        p,
    )
    assert_rel(deps.output, f"[T, N] -> {{ S0[t, i, j] -> S0[t2, i, j] : 0 <= t < t2 < T and {IN} }}", p)
    flow = dep(p, "flow", "S0", "S0")
    # sink - source: (0, 1, {-1,0,1}), (0, 0, 1) in a sweep; (1, 0, {0,-1}), (1, -1, {-1,0,1}) across sweeps.
    assert flow.distance is None
    assert flow.carried_depths == (0, 1, 2) and flow.carried_depth == 0 and not flow.loop_independent
    assert flow.distance_bounds == ((0, 1), (-1, 1), (-1, 1))
    at_size = isl.Set("[T, N] -> { : T = 5 and N = 10 }")
    nine = isl.Set(
        "[T, N] -> { [0, 1, -1]; [0, 1, 0]; [0, 1, 1]; [0, 0, 1]; [1, 0, 0]; [1, 0, -1]; [1, -1, -1]; [1, -1, 0]; [1, -1, 1] }"
    )
    assert flow.distance_set.intersect_params(at_size).is_equal(nine.intersect_params(at_size))


LU_FLOW = (
    "[N] -> {"
    # S0[i, j, k] (k < j < i) updates A[i, j]: the previous update S0[i, j, k - 1].
    " S0[i, j, k] -> S0[i, j, k + 1] : 0 <= k and k + 1 < j and j < i < N;"
    # ... reads A[i, k] (k < j), final after S1[i, k] earlier in this row.
    " S1[i, k] -> S0[i, j, k] : 0 <= k < j < i < N;"
    # ... reads A[k, j] (upper part of row k < i), final after S2[k, j, k - 1]; row 0 is never written.
    " S2[k, j, k - 1] -> S0[i, j, k] : 1 <= k < j < i < N;"
    # S1[i, j] reads A[i, j] (last S0 update, none when j = 0) and the diagonal A[j, j] of row j < i.
    " S0[i, j, j - 1] -> S1[i, j] : 1 <= j < i < N;"
    " S2[j, j, j - 1] -> S1[i, j] : 1 <= j < i < N;"
    # S2[i, j, k] (k < i <= j) updates A[i, j] (previous S2), reads A[i, k] (S1 of this row) and A[k, j].
    " S2[i, j, k] -> S2[i, j, k + 1] : 0 <= k and k + 1 < i and i <= j < N;"
    " S1[i, k] -> S2[i, j, k] : 0 <= k < i <= j < N;"
    " S2[k, j, k - 1] -> S2[i, j, k] : 1 <= k < i <= j < N }"
)


def test_lu():
    p = K.lu
    deps = p.dependences()
    assert_rel(deps.flow, LU_FLOW, p)
    # Every element is written only in the outer iteration of its row; the only reads followed by a later
    # write of the same element are the update chains themselves and S0 before S1 on A[i, j]. The read and
    # write of A[i, j] inside one S1 instance are not ordered against each other.
    chains = (
        "[N] -> { S0[i, j, k] -> S0[i, j, k2] : 0 <= k < k2 < j < i < N;"
        " S0[i, j, k] -> S1[i, j] : 0 <= k < j < i < N;"
        " S2[i, j, k] -> S2[i, j, k2] : 0 <= k < k2 < i <= j < N }"
    )
    assert_rel(deps.anti, chains, p)
    assert_rel(deps.output, chains, p)
    s2 = dep(p, "flow", "S2", "S2")  # (0, 0, 1) along k and (i - k, 0, 1) from an earlier row
    assert s2.distance is None and s2.carried_depths == (0, 2) and s2.carried_depth == 0
    assert not s2.is_reduction  # part of it comes through the read A[k, j], not the update chain
    s1s0 = dep(p, "flow", "S1", "S0")  # S1 and S0 share loops i and j; same i, later j
    assert s1s0.common_depth == 2 and s1s0.distance is None and s1s0.carried_depth == 1
    assert s1s0.source_accesses == (0,) and s1s0.sink_accesses == (1,)  # written A[i, j], read A[i, k]
    assert dep(p, "flow", "S0", "S1").distance == (0, 0)
    assert dep(p, "flow", "S0", "S0").is_reduction
    assert dep(p, "flow", "S2", "S0").distance_bounds == ((2, None),)


def test_cholesky():
    # Rows i in order: S0/S1 finish the strict lower part of row i; S2 accumulates into A[i, i]; S3 takes
    # its square root. Reads of other rows see their final values (S1 for the lower part, S3 the diagonal).
    p = K.cholesky
    assert_rel(
        p.dependences().flow,
        "[N] -> { S0[i, j, k] -> S0[i, j, k + 1] : 0 <= k and k + 1 < j and j < i < N;"
        " S1[i, k] -> S0[i, j, k] : 0 <= k < j < i < N;"  # A[i, k]
        " S1[j, k] -> S0[i, j, k] : 0 <= k < j < i < N;"  # A[j, k]
        " S0[i, j, j - 1] -> S1[i, j] : 1 <= j < i < N;"
        " S3[j] -> S1[i, j] : 0 <= j < i < N;"
        " S2[i, k] -> S2[i, k + 1] : 0 <= k and k + 1 < i < N;"
        " S1[i, k] -> S2[i, k] : 0 <= k < i < N;"
        " S2[i, i - 1] -> S3[i] : 1 <= i < N }",
        p,
    )
    d = dep(p, "flow", "S1", "S0")
    assert d.carried_depths == (0, 1) and d.distance is None


def test_floyd_warshall():
    # S0[k, i, j] reads path[i, j] (last written at step k - 1), path[i, k] and path[k, j]. Within step k,
    # path[i, k] was already rewritten iff (i, k) comes before (i, j), i.e. k < j; path[k, j] iff k < i.
    # Otherwise the value comes from step k - 1 (none at k = 0).
    p = K.floyd_warshall
    assert_rel(
        p.dependences().flow,
        "[N] -> { S0[k, i, j] -> S0[k + 1, i, j] : 0 <= k < N - 1 and 0 <= i < N and 0 <= j < N;"
        " S0[k, i, k] -> S0[k, i, j] : 0 <= k < j < N and 0 <= i < N;"
        " S0[k0, i, k] -> S0[k, i, j] : k0 = k - 1 and 1 <= k < N and 0 <= i < N and 0 <= j <= k;"
        " S0[k, k, j] -> S0[k, i, j] : 0 <= k < i < N and 0 <= j < N;"
        " S0[k0, k, j] -> S0[k, i, j] : k0 = k - 1 and 1 <= k < N and 0 <= i <= k and 0 <= j < N }",
        p,
    )
    d = dep(p, "flow", "S0", "S0")
    assert d.carried_depths == (0, 1, 2) and d.distance_bounds[0] == (0, 1) and not d.is_reduction


def test_triangular():
    p = K.triangular
    assert_rel(
        p.dependences().flow,
        "[N] -> { S0[i] -> S1[i, 0] : 0 <= i < N; S1[i, j] -> S1[i, j + 1] : 0 <= j < i < N }",
        p,
    )
    d = dep(p, "flow", "S1", "S1")
    assert d.distance == (0, 1) and d.carried_depth == 1 and d.is_reduction


def test_stencil_if_has_no_dependences():
    # A is only read; B[i] is written exactly once, by S0 (i = 0 or N - 1) or S1 (the interior).
    p = K.stencil_if
    deps = p.dependences()
    for kind in ("flow", "anti", "output"):
        assert_rel(getattr(deps, kind), "[N] -> { }", p)
    assert len(deps) == 0 and "no dependences" in str(deps)


def test_row_sum():
    p = K.row_sum
    assert_rel(
        p.dependences().flow,
        "[N, M] -> { S0[i] -> S1[i, 0] : 0 <= i < N and M >= 1;"
        " S1[i, j] -> S1[i, j + 1] : 0 <= i < N and 0 <= j < M - 1;"
        " S1[i, M - 1] -> S2[i] : 0 <= i < N and M >= 1;"
        " S0[i] -> S2[i] : 0 <= i < N and M = 0 }",
        p,
    )


def test_modulo_has_no_flow():
    p = K.modulo  # A is only read, B and C written once per element
    deps = p.dependences()
    assert_rel(deps.flow, "[N] -> { }", p)
    assert len(deps) == 0


def test_minmax():
    # N >= 4. S1[i, j] for max(0, i - 2) <= j < min(N, i + 3) accumulates into B[i] after S0[i] zeroes it;
    # S2[i] (3 <= i <= N - 2, a separate loop) scales the final value, left by j = min(i + 2, N - 1).
    p = K.minmax
    deps = p.dependences()
    assert_rel(
        deps.flow,
        "[N] -> { S0[i] -> S1[i, 0] : 0 <= i <= 2;"
        " S0[i] -> S1[i, i - 2] : 3 <= i < N;"
        " S1[i, j] -> S1[i, j + 1] : 0 <= i < N and j >= 0 and j >= i - 2 and j + 1 < N and j + 1 < i + 3;"
        " S1[i, i + 2] -> S2[i] : 3 <= i <= N - 3;"
        " S1[N - 2, N - 1] -> S2[N - 2] : N >= 5 }",
        p,
    )
    assert dep(p, "flow", "S0", "S1").distance == (0,)
    assert dep(p, "flow", "S1", "S2").distance == ()
    assert not dep(p, "flow", "S1", "S2").is_reduction  # `+=` then `*=`
    anti = dep(p, "anti", "S1", "S1")
    assert anti.distance is None and anti.distance_bounds == ((0, 0), (1, 4))


def test_time_axpy():
    p = K.time_axpy
    assert_rel(p.dependences().flow, "[T, N] -> { S0[t, i] -> S0[t + 1, i] : 0 <= t < T - 1 and 0 <= i < N }", p)
    d = dep(p, "flow", "S0", "S0")
    assert d.distance == (1, 0) and d.carried_depth == 0 and d.is_reduction


# ----- independent checks ------------------------------------------------------------------------


def _maps(u: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    u.foreach_map(out.append)
    return out


@pytest.mark.parametrize("prog", K.ALL, ids=lambda p: p.name)
def test_memory_based_equals_lex_order_formula(prog):
    """anti = (reads ; writes^-1) ∩ (source before sink), output likewise, from the flat schedule map."""
    deps = prog.dependences()
    sched = prog.schedule.get_map()
    before = sched.lex_lt_union_map(sched)
    reads = prog.access_relations(("read", "update"))
    writes = prog.access_relations(("write", "update"))
    anti = reads.apply_range(writes.reverse()).intersect(before)
    output = writes.apply_range(writes.reverse()).intersect(before)
    assert deps.anti.is_equal(anti.intersect_params(prog.context))
    assert deps.output.is_equal(output.intersect_params(prog.context))


SIZES = [{"N": 5, "M": 4, "K": 3, "T": 3}, {"N": 4, "M": 1, "K": 0, "T": 2}]


def _points(s: isl.Set) -> list[tuple[int, ...]]:
    pts: list[tuple[int, ...]] = []
    n = s.dim(isl.dim_type.set)
    s.foreach_point(lambda p: pts.append(tuple(int(p.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(n))))
    return pts


def _simulate(prog: pf.Program, fix: isl.Set) -> dict[tuple[str, str], set]:
    """Run the source order at fixed sizes, recording (kind, array) -> {(source instance, sink instance)}."""
    order = []
    for m in _maps(prog.schedule.get_map().intersect_params(fix)):
        n_in = m.dim(isl.dim_type.in_)
        for pt in _points(m.wrap()):
            order.append((pt[n_in:], m.get_tuple_name(isl.dim_type.in_), pt[:n_in]))
    order.sort()
    touched: dict[tuple[str, tuple[int, ...]], list[tuple[str, str, tuple]]] = defaultdict(list)
    for s in prog.statements:
        for a in s.accesses:
            n_in = s.depth
            for pt in _points(a.relation.intersect_params(fix).wrap()):
                touched[(s.name, pt[:n_in])].append((a.kind, a.array, pt[n_in:]))
    last: dict = {}
    readers: dict = defaultdict(set)
    writers: dict = defaultdict(set)
    out: dict[tuple[str, str], set] = defaultdict(set)
    for _, name, it in order:
        inst = (name, it)
        acc = touched[inst]
        for kind, arr, elem in acc:
            if kind in ("read", "update") and (arr, elem) in last:
                out[("flow", arr)].add((last[(arr, elem)], inst))
        for kind, arr, elem in acc:
            if kind in ("read", "update"):
                readers[(arr, elem)].add(inst)
        for kind, arr, elem in acc:
            if kind in ("write", "update"):
                out[("anti", arr)].update((r, inst) for r in readers[(arr, elem)] if r != inst)
                out[("output", arr)].update((w, inst) for w in writers[(arr, elem)] if w != inst)
        for kind, arr, elem in acc:
            if kind in ("write", "update"):
                last[(arr, elem)] = inst
                writers[(arr, elem)].add(inst)
    return out


@pytest.mark.parametrize("sizes", SIZES, ids=["medium", "degenerate"])
@pytest.mark.parametrize("prog", K.ALL, ids=lambda p: p.name)
def test_matches_brute_force_simulation(prog, sizes):
    """Every (kind, array) relation, at concrete sizes, equals what running the source order observes."""
    params = isl.Set.universe(prog.context.get_space())
    for k, name in enumerate(prog.params):
        params = params.fix_val(isl.dim_type.param, k, sizes[name])
    params = params.intersect(prog.context)
    if params.is_empty():
        pytest.skip("sizes outside the program's assumptions")
    expected = _simulate(prog, params)
    actual: dict[tuple[str, str], set] = defaultdict(set)
    for d in prog.dependences():
        rel = d.relation.intersect_params(params)
        n_in = rel.dim(isl.dim_type.in_)
        for pt in _points(rel.wrap()):
            actual[(d.kind, d.array)].add(((d.source, pt[:n_in]), (d.sink, pt[n_in:])))
    assert {k: v for k, v in actual.items() if v} == {k: v for k, v in expected.items() if v}


# ----- the collection and its renderings ---------------------------------------------------------


def test_collection_helpers_and_order():
    deps = K.gemm_acc.dependences()
    assert deps is K.gemm_acc.dependences()  # cached on the program
    kinds = [d.kind for d in deps]
    assert kinds == sorted(kinds, key=("flow", "anti", "output").index)
    assert len(deps) == len(deps.of_kind("flow")) + len(deps.of_kind("anti")) + len(deps.of_kind("output"))
    assert len(deps.of_kind("anti", "output")) == len(deps) - len(deps.of_kind("flow"))
    assert [d.sink for d in deps.of_kind("flow").between("S0", K.gemm_acc.statement("S2"))] == ["S2"]
    assert len(deps.between("S2", "S2")) == 0
    assert deps.all.is_equal(deps.flow.union(deps.anti).union(deps.output))
    with pytest.raises(ValueError):
        deps.of_kind("true")
    # One Dependence per (kind, source, sink, array).
    keys = [(d.kind, d.source, d.sink, d.array) for d in deps]
    assert len(keys) == len(set(keys))


def test_values_are_immutable():
    deps = K.gemm.dependences()
    with pytest.raises(dataclasses.FrozenInstanceError):
        deps.items = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        deps[0].kind = "anti"
    with pytest.raises(TypeError):
        deps.statement_text["S0"] = "x"


def test_relations_respect_the_context():
    for prog in (K.jacobi_1d, K.seidel_2d, K.minmax):
        for d in prog.dependences():
            assert d.relation.params().is_subset(prog.context.params()), (prog.name, d)


def test_str_has_one_line_per_dependence():
    deps = K.lu.dependences()
    lines = str(deps).splitlines()
    assert len(lines) == len(deps)
    assert lines[0].startswith("flow") and "S0 -> S0" in lines[0] and "reduction" in lines[0]
    assert "distance (0, 0, 1)" in lines[0] and "carried at depth 2" in lines[0]


def test_to_json_round_trips():
    for prog in (K.gemm, K.seidel_2d, K.add_exp):
        deps = prog.dependences()
        doc = json.loads(deps.to_json())
        assert doc["program"] == prog.name and len(doc["dependences"]) == len(deps)
        for rec, d in zip(doc["dependences"], deps):
            assert {"kind", "source", "sink", "array", "relation", "distance", "carried_depth"} <= set(rec)
            assert (rec["kind"], rec["source"], rec["sink"], rec["array"]) == (d.kind, d.source, d.sink, d.array)
            assert rec["distance"] == (list(d.distance) if d.distance is not None else None)
            assert rec["carried_depth"] == d.carried_depth
            # The printed relation, read back under the context, is the relation itself.
            back = isl.Map(rec["relation"]).intersect_params(prog.context)
            assert back.is_equal(d.relation)


def test_to_dot_parses():
    for prog in (K.lu, K.add_exp, K.stencil_if):
        deps = prog.dependences()
        (graph,) = pydot.graph_from_dot_data(deps.to_dot())
        assert len(graph.get_edges()) == len(deps)
        nodes = {n.get_name() for n in graph.get_nodes()} - {"node"}
        assert nodes == {s.name for s in prog.statements}
        for node in graph.get_nodes():
            if node.get_name() == "S0":
                assert prog.statement("S0").text in node.get("label")
    (graph,) = pydot.graph_from_dot_data(K.gemm.dependences().to_dot())
    labels = [e.get("label").strip('"') for e in graph.get_edges()]
    assert "flow C (0, 0, 1)" in labels


# ----- a program outside the corpus: statements outside any loop ---------------------------------

N = K.N


@pf.program
def total(x: pf.f32[N], out: pf.f32[1]):
    out[0] = 0.0
    for i in range(N):
        out[0] += x[i]
    out[0] *= 2.0


def test_statements_outside_loops():
    deps = total.dependences()
    assert_rel(
        deps.flow,
        "[N] -> { S0[] -> S1[0] : N >= 1; S1[i] -> S1[i + 1] : 0 <= i < N - 1;"
        " S1[N - 1] -> S2[] : N >= 1; S0[] -> S2[] : N = 0 }",
        total,
    )
    assert dep(total, "flow", "S0", "S1").distance == () and dep(total, "flow", "S1", "S1").distance == (1,)
    assert dep(total, "flow", "S1", "S1").is_reduction
