"""How C parallel loops deal their iterations to threads (``codegen/c_balance.py``).

What a user relies on: a contraction's tile loop and the row loop of a kernel whose data exceeds the cache
are dealt out dynamically (a thread that runs slower on a shared machine no longer holds the others at the
barrier), in pieces of a known size where the trip count is known; every other parallel loop keeps its
static schedule (a thread finds in its own cache what it left there in an earlier kernel); and the
results are the reference interpreter's and, bit for bit, those of the static schedule."""

from __future__ import annotations

import importlib
import math
import re

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops

c_balance = importlib.import_module("polyfuse.codegen.c_balance")
c_stream = importlib.import_module("polyfuse.codegen.c_stream")
c_printer = importlib.import_module("polyfuse.codegen.c")

M, K, N = pf.params("M K N")
R, D = pf.params("R D")


@pf.program
def lb_matmul(x: pf.f32[M, K], w: pf.f32[K, N], y: pf.f32[M, N]):
    for i in range(M):
        for j in range(N):
            y[i, j] = 0.0
            for k in range(K):
                y[i, j] += x[i, k] * w[k, j]


@pf.program
def lb_scale_rows(x: pf.f32[R, D], y: pf.f32[R, D]):
    for i in range(R):
        for j in range(D):
            y[i, j] = pf.exp(x[i, j]) * 2.0


def _softmax() -> pf.Program:
    g = pf.Graph("lb_softmax")
    return g.build(y=ops.softmax(g.input("x", (R, D)), axis=-1))


@pytest.fixture
def uncached(monkeypatch):
    """Every kernel's data counts as larger than the cache (a small test stands for a large array)."""
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 0))


def _schedules(text: str) -> list[str]:
    return re.findall(r"#pragma omp (?:parallel )?for (schedule\([^)]*\))", text)


def _run(prog: pf.Program, sizes: dict[str, int], args: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    exe = pf.compile(prog, target="c", params=sizes, threads=2)
    got = {n: a.copy() for n, a in args.items()}
    exe(**got)
    return got, exe.code.text


def _reference(prog: pf.Program, args: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    return want


def _static(monkeypatch) -> None:
    """Every parallel loop printed with the static schedule (the code before ``c_balance.py``)."""
    monkeypatch.setattr(c_printer, "schedule_clause", lambda loop, collapsed, memory_bound: "schedule(static)")


@pytest.mark.parametrize("m, k, n", [(7, 37, 129), (37, 129, 7), (129, 37, 130)])
def test_a_contraction_s_tile_loop_is_dealt_dynamically_with_the_reference_s_results(monkeypatch, m, k, n):
    sizes = {"M": m, "K": k, "N": n}
    rng = np.random.default_rng(m * k + n)
    args = {"x": rng.standard_normal((m, k), dtype=np.float32), "w": rng.standard_normal((k, n), dtype=np.float32),
            "y": np.full((m, n), np.nan, np.float32)}
    got, text = _run(lb_matmul, sizes, args)
    assert "acc_0_0" in text  # (the register micro-tile is what is dealt out)
    assert _schedules(text) and set(_schedules(text)) == {"schedule(dynamic)"}
    tol = 4e-6 * k
    np.testing.assert_allclose(got["y"], _reference(lb_matmul, args)["y"], rtol=tol, atol=tol)
    _static(monkeypatch)
    plain, text = _run(lb_matmul, sizes, args)
    assert set(_schedules(text)) == {"schedule(static)"}
    np.testing.assert_array_equal(got["y"], plain["y"])  # which thread runs a tile changes no bit


@pytest.mark.parametrize("r, d", [(300, 33), (4000, 3), (129, 1000)])
def test_a_kernel_whose_data_exceed_the_cache_deals_its_rows_in_64_pieces(uncached, monkeypatch, r, d):
    sizes = {"R": r, "D": d}
    x = np.random.default_rng(r).uniform(-3, 3, (r, d)).astype(np.float32)
    args = {"x": x, "y": np.full_like(x, np.nan)}
    got, text = _run(lb_scale_rows, sizes, args)
    clauses = _schedules(text)
    assert len(clauses) == 1
    trips = int(re.search(r"for \(int64_t c0 = 0; c0 <= (\d+);", text).group(1)) + 1
    if "collapse(2)" in text:  # (the pieces count the iterations of both loops)
        trips *= int(re.search(r"for \(int64_t c1 = 0; c1 <= (\d+);", text).group(1)) + 1
    assert trips >= 2 * c_balance.CHUNKS
    assert clauses == [f"schedule(dynamic, {math.ceil(trips / c_balance.CHUNKS)})"]
    np.testing.assert_allclose(got["y"], _reference(lb_scale_rows, args)["y"], rtol=1e-6, atol=0)
    _static(monkeypatch)
    plain, _ = _run(lb_scale_rows, sizes, args)
    np.testing.assert_array_equal(got["y"], plain["y"])


def test_softmax_rows_are_dealt_in_pieces_with_the_reference_s_results(uncached):
    prog, sizes = _softmax(), {"R": 257, "D": 129}
    x = np.random.default_rng(3).uniform(-20, 20, (257, 129)).astype(np.float32)
    args = {"x": x, "y": np.zeros_like(x)}
    got, text = _run(prog, sizes, args)
    assert _schedules(text) == [f"schedule(dynamic, {math.ceil(257 / 64)})"]
    np.testing.assert_allclose(got["y"], _reference(prog, args)["y"], rtol=2e-4, atol=2e-6)


def test_short_loops_cached_data_and_unknown_sizes_keep_the_static_schedule(monkeypatch):
    """Under the cache, a thread keeps its rows from kernel to kernel; with symbolic bounds the pieces'
    size is unknown, and a request per row could cost more than it balances."""
    x = np.random.default_rng(0).standard_normal((300, 33)).astype(np.float32)
    _, text = _run(lb_scale_rows, {"R": 300, "D": 33}, {"x": x, "y": np.zeros_like(x)})
    assert _schedules(text) == ["schedule(static)"]
    text = pf.codegen(pf.schedule(lb_scale_rows, target="c")).text
    assert _schedules(text) == ["schedule(static)"]
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 0))  # too few rows to deal out in 64 pieces
    _, text = _run(lb_scale_rows, {"R": 70, "D": 70}, {"x": np.zeros((70, 70), np.float32), "y": np.zeros((70, 70), np.float32)})
    assert _schedules(text) == ["schedule(static)"]


def test_symbolic_sizes_still_deal_a_contraction_dynamically():
    text = pf.codegen(pf.schedule(lb_matmul, target="c")).text
    assert "schedule(dynamic)" in _schedules(text)


def test_trip_count_reads_integer_bounds_only():
    import islpy as isl

    ctx = isl.DEFAULT_CONTEXT
    build = isl.AstBuild.from_context(isl.Set.read_from_str(ctx, "[n] -> { : n >= 1 }"))
    for text, want in [("{ S[i] -> [i] : 0 <= i <= 9 }", 10), ("{ S[i] -> [i] : 3 <= i < 7 }", 4),
                       ("[n] -> { S[i] -> [i] : 0 <= i < n }", None)]:
        node = build.node_from_schedule_map(isl.UnionMap.read_from_str(ctx, text))
        assert c_balance.trip_count(node) == want, text


def test_a_micro_tile_under_a_host_loop_keeps_the_static_schedule():
    """doitgen launches its contraction once per (r, q): a dynamic loop would pay its work-share record at
    every launch and move ``sum`` between cores before the next kernel reads it. gemm launches once."""
    from tests.kernels import BY_NAME, inputs

    for name, dynamic in (("doitgen", False), ("gemm", True)):
        kernel = BY_NAME[name]
        prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
        text = pf.codegen(pf.schedule(prog, target="c")).text
        assert "acc_0_0" in text and ("schedule(dynamic)" in _schedules(text)) == dynamic, name
        data = inputs(kernel)
        got = {n: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for n, v in data.items()}
        want = {n: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for n, v in data.items()}
        sizes = {p: kernel.sizes[p.upper()] for p in prog.params}
        pf.compile(prog, target="c", threads=2)(**{n: got[n] for n in prog.arguments}, **sizes)
        pf.reference(prog)(**{n: want[n] for n in prog.arguments}, **sizes)
        for n in prog.arguments:
            if isinstance(want[n], np.ndarray):
                np.testing.assert_allclose(got[n], want[n], rtol=1e-9, atol=1e-9)
