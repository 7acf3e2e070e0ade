"""C row buffers (``schedule/row_buffers.py``): an output that a row-wise kernel writes, reads back and
finally rewrites in place keeps its row in a per-thread buffer, and the output is written once, with
streaming stores.

What a user relies on: the results are the reference interpreter's, and the same bits as the schedule
without buffers; the buffer is a local array of one row (not a temporary the caller allocates); the output
is streamed; and nothing is renamed where the rename would change what the program computes (an output
some other kernel reads, a final rewrite that misses elements) or where it does not pay (data that stay in
the cache)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops

row_buffers = importlib.import_module("polyfuse.schedule.row_buffers")
c_stream = importlib.import_module("polyfuse.codegen.c_stream")

R, D = pf.params("R D")


@pytest.fixture
def large(monkeypatch):
    """Every kernel counts as too large for the caches (a small test stands for a large row)."""
    monkeypatch.setattr(row_buffers, "min_bytes", lambda: 0)
    monkeypatch.setattr(row_buffers, "MIN_ROW_BYTES", 0)  # (short rows too: the odd lengths below)
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 0))


def _softmax() -> pf.Program:
    g = pf.Graph("rb_softmax")
    return g.build(y=ops.softmax(g.input("x", (R, D)), axis=-1))


def _log_softmax() -> pf.Program:
    g = pf.Graph("rb_log_softmax")
    return g.build(y=ops.log_softmax(g.input("x", (R, D)), axis=-1))


def _softmax_then_scaled() -> pf.Program:
    """softmax's output read again by another kernel: its intermediate rows are not the kernel's alone."""
    g = pf.Graph("rb_softmax_read_later")
    x = g.input("x", (R, D))
    p = ops.softmax(x, axis=-1)
    return g.build(p=p, z=ops.transpose(p, (1, 0)) * 2.0)


@pf.program
def rb_full_rewrite(x: pf.f32[R, D], s: pf.f32[R], y: pf.f32[R, D]):
    """A row normalised by its sum, written as loops: the final rewrite covers the row."""
    for i in range(R):
        s[i] = 0.0
        for j in range(D):
            y[i, j] = x[i, j] * 2.0
        for j in range(D):
            s[i] += y[i, j]
        for j in range(D):
            y[i, j] = y[i, j] / s[i]


@pf.program
def rb_partial_rewrite(x: pf.f32[R, D], s: pf.f32[R], y: pf.f32[R, D]):
    """The final rewrite skips each row's last element: the buffer would lose it."""
    for i in range(R):
        s[i] = 0.0
        for j in range(D):
            y[i, j] = x[i, j] * 2.0
        for j in range(D):
            s[i] += y[i, j]
        for j in range(D - 1):
            y[i, j] = y[i, j] / s[i]


def _run(prog: pf.Program, sizes: dict[str, int], args: dict[str, np.ndarray], **options) -> tuple[dict, pf.Schedule, str]:
    sched = pf.schedule(prog, target="c", params=sizes, **options)
    exe = pf.compile(prog, target="c", params=sizes, threads=2, **options)
    mine = {n: a.copy() for n, a in args.items()}
    exe(**mine)
    return mine, sched, exe.code.text


def _reference(prog: pf.Program, args: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    want = {n: a.copy() for n, a in args.items()}
    pf.reference(prog)(**want)
    return want


@pytest.mark.parametrize("d", [1, 7, 37, 129, 1100])
def test_rows_in_buffers_equal_the_reference_and_the_unbuffered_bits(large, monkeypatch, d):
    prog, sizes = _softmax(), {"R": 33, "D": d}
    rng = np.random.default_rng(d)
    args = {"x": rng.uniform(-20, 20, (33, d)).astype(np.float32), "y": np.full((33, d), np.nan, np.float32)}
    got, sched, text = _run(prog, sizes, args)
    if d >= 16:  # (shorter rows are tiles of whole rows, not one row at a time: nothing to buffer)
        assert [(rb.buffer, rb.array, rb.length) for rb in sched.row_buffers] == [("y_row", "y", d)]
        assert f"float y_row[{d}] __attribute__((aligned(64)));" in text  # one row per thread, in the parallel loop
        assert "y_row" not in text[text.index("void "):text.index(")")]  # (not an argument: nothing to allocate)
        assert any("row_buffers.py" in n for n in sched.notes)
    assert ("pf_stream64(&y[" in text) == (d >= 1024)  # the output's one writer streams (rows of 4 KiB or more)
    want = _reference(prog, args)
    tol = 2e-6 * max(8, d)
    np.testing.assert_allclose(got["y"], want["y"], rtol=tol, atol=tol)
    buffered = sched
    monkeypatch.setattr(row_buffers, "MAX_ROW_BYTES", 0)  # the same schedule without buffers
    plain, sched, _ = _run(prog, sizes, args)
    assert not sched.row_buffers
    np.testing.assert_array_equal(got["y"], plain["y"])
    assert buffered.traffic().total_bytes == sched.traffic().total_bytes  # (the buffer is not memory traffic)


def test_without_reassociation_the_buffers_change_no_bit(large, monkeypatch):
    prog, sizes = _softmax(), {"R": 33, "D": 1100}
    x = np.random.default_rng(1).uniform(-5, 5, (33, 1100)).astype(np.float32)
    args = {"x": x, "y": np.zeros_like(x)}
    got, sched, _ = _run(prog, sizes, args, reassociate=False)
    assert sched.row_buffers
    np.testing.assert_allclose(got["y"], _reference(prog, args)["y"], rtol=1e-6, atol=1e-12)  # (C's exp: an ulp)
    monkeypatch.setattr(row_buffers, "MAX_ROW_BYTES", 0)
    plain, _, _ = _run(prog, sizes, args, reassociate=False)
    np.testing.assert_array_equal(got["y"], plain["y"])


def test_log_softmax_writes_its_output_once_already(large):
    """log-softmax sums ``exp`` without storing it: its output has one writer, so no buffer, and it streams."""
    prog, sizes = _log_softmax(), {"R": 33, "D": 1100}
    x = np.random.default_rng(5).uniform(-5, 5, (33, 1100)).astype(np.float32)
    args = {"x": x, "y": np.zeros_like(x)}
    got, sched, text = _run(prog, sizes, args)
    assert not sched.row_buffers and "pf_stream64(&y[" in text
    np.testing.assert_allclose(got["y"], _reference(prog, args)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make, why", [
    (_softmax_then_scaled, "another kernel reads the output"),
    (lambda: rb_partial_rewrite, "the final rewrite misses elements"),
])
def test_no_buffer_where_it_would_change_the_result(large, make, why):
    prog = make()
    sizes = {"R": 33, "D": 129}  # (the sizes at which the loops written out get a buffer, below)
    rng = np.random.default_rng(3)
    args = {}
    for name in prog.arguments:
        array = prog.arrays[name]
        shape = array.concrete_shape(sizes)
        args[name] = (np.zeros(shape, np.float32) if array.role == "output"
                      else rng.uniform(-2, 2, shape).astype(np.float32))
    got, sched, text = _run(prog, sizes, args)
    assert not sched.row_buffers, why
    assert "_row[" not in text
    want = _reference(prog, args)
    for name, a in got.items():
        np.testing.assert_allclose(a, want[name], rtol=1e-5, atol=1e-6)


def test_a_loop_program_gets_a_buffer_and_keeps_its_results(large):
    prog, sizes = rb_full_rewrite, {"R": 33, "D": 129}
    x = np.random.default_rng(7).uniform(0.5, 2, (33, 129)).astype(np.float32)
    args = {"x": x, "s": np.zeros(33, np.float32), "y": np.zeros_like(x)}
    got, sched, _ = _run(prog, sizes, args)
    assert [rb.array for rb in sched.row_buffers] == ["y"]
    want = _reference(prog, args)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["s"], want["s"], rtol=1e-5)


def test_no_buffer_where_the_data_stay_in_the_cache():
    """At the default thresholds a 4096 x 1024 softmax (32 MiB) keeps writing its output in place: its rows
    stay in the last-level cache, where the buffers measured 1.02-1.33x slower."""
    sched = pf.schedule(_softmax(), target="c", params={"R": 4096, "D": 1024})
    assert not sched.row_buffers
    assert row_buffers.min_bytes() > 2 * 4096 * 1024 * 4
    sched = pf.schedule(_softmax(), target="c", params={"R": 1 << 16, "D": 16})  # (256 MiB in rows of 64 bytes)
    assert not sched.row_buffers


def test_cuda_schedules_keep_their_own_row_staging(large):
    sched = pf.schedule(_softmax(), target="cuda", params={"R": 64, "D": 256})
    assert not sched.row_buffers
