"""C target: an output that no statement reads back, written by a memory-bound kernel whose data exceeds
the last-level cache, is stored with non-temporal (streaming) stores, and every thread that streamed
fences before the barrier that publishes its stores (``codegen/c_stream.py``). The results equal the
reference interpreter's, and bit for bit the same kernel's without streaming, at row lengths that leave
aligned heads and tails (1, 7, 37, 129) and on arrays that do not start on a cache line. The cache sizes
are made tiny here so that small arrays stream."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import polyfuse as pf
from polyfuse import ops

c_stream = importlib.import_module("polyfuse.codegen.c_stream")
c_printer = importlib.import_module("polyfuse.codegen.c")

R, D, T = pf.params("R D T")


@pytest.fixture
def tiny_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every array comes from memory, every kernel exceeds the streaming threshold, and rows of any length
    stream (their heads and tails are what these tests check)."""
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 0))
    monkeypatch.setattr(c_stream, "STREAM_MIN_LOOP_BYTES", 0)


def _layernorm() -> pf.Program:
    g = pf.Graph("ln_stream")
    x, gamma, beta = g.input("x", (R, D)), g.input("gamma", (D,)), g.input("beta", (D,))
    return g.build(y=ops.layernorm(x, gamma, beta, eps=1e-5))


def _add_exp() -> pf.Program:
    g = pf.Graph("exp_stream")
    return g.build(y=ops.exp(g.input("x", (R, D)) + 1.0))


@pf.program
def _affine64(X: pf.f64[R, D], Y: pf.f64[R, D]):
    for i in range(R):
        for j in range(D):
            Y[i, j] = X[i, j] * 2.0 + 1.0


@pf.program
def _in_place(X: pf.f32[R, D], Y: pf.f32[R, D]):
    """The writer reads the element it overwrites (softmax's final scaling has this shape)."""
    for i in range(R):
        for j in range(D):
            Y[i, j] = Y[i, j] * 0.5 + X[i, j]


@pf.program(assume="D >= 1")
def _steps(X: pf.f32[R, D], Y: pf.f32[R, D], Z: pf.f32[T, R]):
    """A time loop around a kernel that streams (the scheduler moves it inside the rows)."""
    for t in range(T):
        for i in range(R):
            Z[t, i] = X[i, 0] + X[i, D - 1] * 0.5
        for i in range(R):
            for j in range(D):
                Y[i, j] = X[i, j] * 0.25 + Z[t, i]


PROGRAMS = {"layernorm": _layernorm, "add_exp": _add_exp, "affine64": lambda: _affine64, "in_place": lambda: _in_place,
            "steps": lambda: _steps}


def _unaligned(shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> np.ndarray:
    """Random values in an array that starts one element past a 64-byte boundary."""
    size = int(np.prod(shape))
    base = np.empty(size + 64, dtype)
    skip = (-base.ctypes.data % 64) // base.itemsize + 1
    out = base[skip:skip + size].reshape(shape)
    out[...] = rng.uniform(-1, 1, shape)
    return out


def _arguments(prog: pf.Program, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(sum(sizes.values()))
    return {n: _unaligned(prog.arrays[n].concrete_shape(sizes), prog.arrays[n].dtype.numpy, rng) for n in prog.arguments}


def _copies(args: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for n, a in args.items():
        b = np.empty(a.size + 64, a.dtype)
        skip = (-b.ctypes.data % 64) // b.itemsize + 3  # another misalignment than the original's
        out[n] = b[skip:skip + a.size].reshape(a.shape)
        out[n][...] = a
    return out


@pytest.mark.parametrize("d", [1, 7, 37, 129])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_streamed_outputs_equal_the_reference_and_the_plain_stores(tiny_caches, monkeypatch, name, d):
    prog = PROGRAMS[name]()
    sizes = {p: {"R": 5, "D": d, "T": 3}[p] for p in prog.params}
    exe = pf.compile(prog, target="c", params=sizes, threads=2)
    text = exe.code.text
    if d > 1:  # (rows of one element walk the array's first dimension: not a contiguous innermost loop)
        assert "pf_stream64(&" in text, text
        assert text.count("pf_stream_fence();") >= 1
    args = _arguments(prog, sizes)
    want, plain = _copies(args), _copies(args)
    pf.reference(prog)(**want)
    exe(**args)
    monkeypatch.setattr(c_printer, "streamed_arrays", lambda *a: frozenset())
    unstreamed = pf.compile(prog, target="c", params=sizes, threads=2)
    assert "pf_stream64" not in unstreamed.code.text
    unstreamed(**plain)
    for n in prog.arguments:
        np.testing.assert_array_equal(args[n], plain[n], err_msg=n)  # streaming changes no arithmetic
        tol = 2e-5 if prog.arrays[n].dtype is pf.f32 else 1e-12
        np.testing.assert_allclose(args[n], want[n], rtol=tol, atol=tol, err_msg=n)


def test_each_thread_fences_before_the_barrier(tiny_caches):
    """A kernel's own parallel loop becomes ``omp for nowait`` + fence inside ``omp parallel``; inside a
    host loop's region, ``omp for nowait`` + fence + ``omp barrier``."""
    text = pf.compile(_add_exp(), target="c", params={"R": 64, "D": 64}, threads=2).code.text
    lines = [ln.strip() for ln in text.splitlines()]
    k = lines.index("#pragma omp for schedule(static) nowait")
    assert lines[k - 2:k] == ["#pragma omp parallel", "{"]
    assert lines[lines.index("pf_stream_fence();") + 1] == "}"
    assert "#pragma omp parallel for" not in text
    loop = ["  #pragma omp for schedule(static)", "  for (int64_t c0 = 0; c0 <= 9; c0 += 1) {", "  }"]
    assert c_stream.fence_parallel_loop(loop, "  ", "    ", in_region=True) == [
        "  #pragma omp for schedule(static) nowait", *loop[1:], "  pf_stream_fence();", "  #pragma omp barrier"]


def test_no_streaming_where_it_would_not_pay(tiny_caches, monkeypatch):
    """Not without sizes (a small call would lose its cached output), not for an output another statement
    reads (softmax's exponentials, rescaled in place), not for a compute-bound loop (gelu's tanh), not for
    rows shorter than ``STREAM_MIN_LOOP_BYTES`` (4 KiB: 1024 floats)."""
    assert "pf_stream" not in pf.compile(_add_exp(), target="c").code.text
    g = pf.Graph("softmax_stream")
    softmax = g.build(y=ops.softmax(g.input("x", (R, D)), axis=-1))
    assert "pf_stream64(&" not in pf.compile(softmax, target="c", params={"R": 64, "D": 64}).code.text
    g = pf.Graph("gelu_stream")
    x, b, r = g.input("x", (R, D)), g.input("b", (D,)), g.input("r", (R, D))
    gelu = g.build(y=ops.gelu(x + b) + r)
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (1024, 0))  # the 256-byte bias row stays cached
    assert "pf_stream64(&" not in pf.compile(gelu, target="c", params={"R": 64, "D": 64}).code.text
    g = pf.Graph("exp_stream_memory")  # the same limits stream exp(x + 1): 13 operations for 8 bytes
    assert "pf_stream64(&" in pf.compile(g.build(y=ops.exp(g.input("x", (R, D)) + 1.0)), target="c",
                                         params={"R": 64, "D": 64}).code.text


def test_real_cache_sizes_stream_only_beyond_the_streaming_threshold():
    """At the machine's own cache sizes a 64x64 layernorm keeps ordinary stores."""
    assert "pf_stream" not in pf.compile(_layernorm(), target="c", params={"R": 64, "D": 64}).code.text


@pf.program
def _widen(X: pf.f64[R, D], B: pf.f32[D], Y: pf.f32[R, D]):
    """An f64 input read along an f32 output: 16 f32 lanes span two lines of X."""
    for i in range(R):
        for j in range(D):
            Y[i, j] = pf.f32(X[i, j] * 0.5) + B[j]


def test_each_streamed_group_prefetches_its_large_reads_a_page_ahead(monkeypatch):
    """The reads that walk an array larger than L2 are prefetched 4 KiB ahead of the group, one line per
    64 bytes they span; a row small enough for L2 (``B``) and the streamed output are not."""
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (16384, 0))  # B (8 KiB) fits, X and x do not
    # (rows of 2048 elements: 8 KiB of f32, above STREAM_MIN_LOOP_BYTES)
    text = pf.compile(_add_exp(), target="c", params={"R": 64, "D": 2048}).code.text
    prefetches = [ln.strip() for ln in text.splitlines() if "__builtin_prefetch" in ln]
    assert prefetches == ["__builtin_prefetch(&x[c0 * D + (c1_stream + 1024)], 0, 3);"], prefetches
    text = pf.compile(_widen, target="c", params={"R": 64, "D": 2048}).code.text
    prefetches = [ln.strip() for ln in text.splitlines() if "__builtin_prefetch" in ln]
    assert prefetches == ["__builtin_prefetch(&X[c0 * D + (c1_stream + 512)], 0, 3);",
                          "__builtin_prefetch(&X[c0 * D + (c1_stream + 520)], 0, 3);"], prefetches
    assert "pf_stream64(&Y[" in text


@pytest.mark.parametrize("d", [7, 129, 300])
def test_a_streamed_group_reading_a_wider_type_equals_the_reference(tiny_caches, d):
    sizes = {"R": 3, "D": d}
    exe = pf.compile(_widen, target="c", params=sizes, threads=2)
    assert "pf_stream64(&Y[" in exe.code.text and "__builtin_prefetch(&X[" in exe.code.text
    args = _arguments(_widen, sizes)
    want = _copies(args)
    pf.reference(_widen)(**want)
    exe(**args)
    np.testing.assert_allclose(args["Y"], want["Y"], rtol=1e-6, atol=1e-6)


def test_the_streaming_threshold_is_the_last_level_cache_capped_at_sixteen_l2s(monkeypatch):
    """A virtual machine reports its host's whole L3: the threshold stays at 16 of one core's L2 there, and
    never below 32 MiB unless the last-level cache itself is smaller."""
    machine = importlib.import_module("polyfuse.cost.machine")
    for l3, l2, want in ((300 << 20, 2 << 20, 32 << 20), (300 << 20, 4 << 20, 64 << 20), (32 << 20, 1 << 20, 32 << 20),
                         (8 << 20, 1 << 20, 8 << 20)):
        monkeypatch.setattr(machine, "last_level_cache", lambda l3=l3: l3)
        monkeypatch.setattr(machine, "cache_sizes", lambda l2=l2: (48 << 10, l2))
        machine.streaming_threshold.cache_clear()
        assert machine.streaming_threshold() == want
    machine.streaming_threshold.cache_clear()


def test_rows_shorter_than_a_page_keep_ordinary_stores(monkeypatch):
    """Each row's unaligned head and tail are stored one element at a time: rows of 64 floats ran 2.9x
    slower streamed. 1024 floats (4 KiB) stream, 1023 do not."""
    monkeypatch.setattr(c_stream, "cache_limits", lambda: (0, 0))
    for d, streams in ((64, False), (1023, False), (1024, True)):
        text = pf.compile(_add_exp(), target="c", params={"R": 8, "D": d}).code.text
        assert ("pf_stream64(&" in text) is streams, d
