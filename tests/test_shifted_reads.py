"""C target: a vectorised loop that reads an array at neighbouring elements keeps the loaded vectors in
registers and takes the neighbours from them (``codegen/c_shift.py``). The results equal, bit for bit,
the same program's code without shifted reads (the same operations in the same order), and the reference
interpreter's, at lengths that leave every head, middle and tail shape (5 to 1000 elements, symbolic sizes,
with the length threshold lifted so that the shifted code runs whatever the length) and on arrays that start at every 8-byte
misalignment of a cache line; gcc's own build of PolyBench's jacobi-1d is the oracle at a length where the
shifted loop runs."""

from __future__ import annotations

import ctypes
import importlib
import mmap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polyfuse as pf
from examples.kernels import jacobi_1d  # PolyBench's jacobi-1d: offsets -1, 0, +1 (previous, current, next vectors)
from tests.c_oracle import check_against_gcc
from tests.fuzz.harness import copy_args, load_source, make_inputs

c_shift = importlib.import_module("polyfuse.codegen.c_shift")
c_innermost = importlib.import_module("polyfuse.codegen.c_innermost")

N, R, T = pf.params("N R T")
MARK = "shifted reads kept in vector registers"
KERNELS = Path(__file__).resolve().parent / "kernels"


@pf.program(assume="N >= 5")
def _rows32(X: pf.f32[R, N], Z: pf.f32[R, N], W: pf.f32[R], Y: pf.f32[R, N], s: pf.f32):
    """f32 rows: offsets -2 and +2 around an unread centre, a scalar, an invariant read and a plain one."""
    for i in range(R):
        for j in range(2, N - 2):
            Y[i, j] = (X[i, j - 2] - X[i, j + 2]) * s + Z[i, j] * W[i] - (-X[i, j + 1])


@pf.program(assume="N >= 4")
def _ahead(X: pf.f64[N], Y: pf.f64[N]):
    """Only offsets ahead (the current and next vectors): X[i], X[i + 3]."""
    for i in range(N - 3):
        Y[i] = X[i + 3] / 4.0 + X[i]


@pf.program(assume="N >= 3")
def _behind(X: pf.f64[N], Y: pf.f64[N]):
    """Only offsets behind (the previous and current vectors): X[i - 2], X[i - 1]."""
    for i in range(2, N):
        Y[i] = X[i - 2] * X[i - 1]


PROGRAMS = {"jacobi1d": jacobi_1d, "rows32": _rows32, "ahead": _ahead, "behind": _behind}


def _misaligned(values: np.ndarray, skip: int) -> np.ndarray:
    """A copy of ``values`` that starts ``skip`` elements past a 64-byte boundary."""
    base = np.empty(values.size + 64, values.dtype)
    first = (-base.ctypes.data % 64) // base.itemsize + skip
    out = base[first:first + values.size].reshape(values.shape)
    out[...] = values
    return out


def _placed(args: dict[str, object], skip: int) -> dict[str, object]:
    """The arguments with each array ``skip`` (the next array one more) elements past a cache line."""
    return {n: _misaligned(v, (skip + k) % 8) if isinstance(v, np.ndarray) else v for k, (n, v) in enumerate(args.items())}


def _run_plain(monkeypatch: pytest.MonkeyPatch, prog: pf.Program, calls: list[dict[str, object]], **kwargs) -> None:
    """Compile ``prog`` without shifted reads and call it on each of ``calls`` (code is printed lazily, and
    again per specialisation, so the printer stays without them until the last call)."""
    with monkeypatch.context() as m:
        m.setattr(c_innermost, "shift_lines", lambda *a: None)
        exe = pf.compile(prog, target="c", **kwargs)
        assert MARK not in exe.code.text
        for args in calls:
            exe(**args)


@pytest.mark.parametrize("n", [5, 7, 37, 129, 400, 1000])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_shifted_reads_equal_the_plain_loop_and_the_reference(monkeypatch, name, n):
    prog = PROGRAMS[name]
    sizes = {p: {"N": n, "R": 3, "T": 2}[p] for p in prog.params}
    monkeypatch.setattr(c_shift, "MIN_TRIP_BYTES", 0)  # (every loop long enough: short ones run the split too)
    shifted = pf.compile(prog, target="c")
    assert MARK in shifted.code.text and "PF_LANES_" in shifted.code.text
    reference = pf.reference(prog)
    args = make_inputs(prog, sizes, n)
    placed = [(_placed(args, skip), _placed(args, skip + 1), _placed(args, skip)) for skip in range(0, 8, 3)]
    for got, _, want in placed:
        shifted(**got)
        reference(**want)
    _run_plain(monkeypatch, prog, [same for _, same, _ in placed])
    for skip, (got, same, want) in zip(range(0, 8, 3), placed):
        for k in prog.arguments:
            if k not in prog.arrays:
                continue
            np.testing.assert_array_equal(got[k], same[k], err_msg=f"{k}, skip {skip}")  # no arithmetic changes
            tol = 1e-5 if prog.arrays[k].dtype is pf.f32 else 1e-12
            np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=f"{k}, skip {skip}")


def _guarded(values: np.ndarray, keep: list, at_end: bool) -> np.ndarray:
    """A copy of ``values`` that ends just before (``at_end``) or starts just after an unreadable page, so
    that a load past the loop's data faults instead of reading a neighbour's memory."""
    page = mmap.PAGESIZE
    pages = -(-values.nbytes // page) + 1
    buf = mmap.mmap(-1, pages * page)
    keep.append(buf)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    guard = base + (pages - 1) * page if at_end else base
    assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(guard), ctypes.c_size_t(page), 0) == 0
    start = (pages - 1) * page - values.nbytes if at_end else page
    out = np.frombuffer(buf, dtype=values.dtype, count=values.size, offset=start).reshape(values.shape)
    out[...] = values
    return out


@pytest.mark.parametrize("at_end", [True, False], ids=["ends-at-a-guard-page", "starts-after-a-guard-page"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_no_load_outside_the_data_the_loop_reads(monkeypatch, name, at_end):
    """Each array placed against an unreadable page: the vectors before the first step and after the last
    are never loaded beyond what the plain loop reads (a stray load would fault)."""
    prog = PROGRAMS[name]
    monkeypatch.setattr(c_shift, "MIN_TRIP_BYTES", 0)
    for n in (7, 37, 129, 130, 131, 132):
        sizes = {p: {"N": n, "R": 3, "T": 2}[p] for p in prog.params}
        exe = pf.compile(prog, target="c", params=sizes, tile=None)  # (untiled: a row's last vector ends the array)
        assert MARK in exe.code.text
        args, keep = make_inputs(prog, sizes, n), []
        got = {k: _guarded(v, keep, at_end) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        want = copy_args(args)
        exe(**got)
        pf.reference(prog)(**want)
        for k in prog.arrays:
            if k in got:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_only_long_loops_at_known_sizes(monkeypatch):
    """With sizes given, a loop shorter than MIN_TRIP_BYTES keeps its plain ``omp simd`` loop; a long one
    (PolyBench's MEDIUM jacobi-1d: 398 doubles) gets shifted reads, on one thread and on two."""
    short = pf.compile(jacobi_1d, target="c", params={"N": 100, "T": 10}).code.text
    assert MARK not in short and "#pragma omp simd" in short
    for threads in (1, 2):
        long = pf.compile(jacobi_1d, target="c", params={"N": 400, "T": 100}, threads=threads)
        assert long.code.text.count(MARK) == 2
        args = make_inputs(jacobi_1d, {"N": 400, "T": 100}, 1)
        want = copy_args(args)
        long(**args)
        _run_plain(monkeypatch, jacobi_1d, [want], params={"N": 400, "T": 100}, threads=threads)
        for k in ("A", "B"):
            np.testing.assert_array_equal(args[k], want[k])


@pf.program(assume="N >= 3")
def _strided(X: pf.f64[N, N], Y: pf.f64[N, N]):
    for i in range(1, N - 1):
        for j in range(N):
            Y[j, i] = X[j, i - 1] + X[j, i + 1]


@pf.program(assume="N >= 3")
def _exp(X: pf.f64[N], Y: pf.f64[N]):
    for i in range(1, N - 1):
        Y[i] = pf.exp(X[i - 1]) + X[i + 1]


@pf.program(assume="N >= 3")
def _update(X: pf.f64[N], Y: pf.f64[N]):
    for i in range(1, N - 1):
        Y[i] += X[i - 1] + X[i + 1]


@pf.program(assume="N >= 17")
def _far(X: pf.f64[N], Y: pf.f64[N]):
    for i in range(8, N - 8):
        Y[i] = X[i - 8] + X[i + 8]


@pytest.mark.parametrize("prog", [_strided, _exp, _update, _far], ids=["strided", "exp", "update", "far"])
def test_loops_that_keep_the_plain_vector_loop(prog):
    """Not where the neighbours are not along a contiguous loop (the interchanged loop walks ``j`` rows),
    where the value needs a function the vector extensions lack (``exp``), for an update (``+=``), or
    where the offsets reach farther than the lanes of the widest vector (8 doubles either side)."""
    assert MARK not in pf.compile(prog, target="c").code.text


def test_lane_macros_for_every_vector_width():
    """``PF_LANES_<type>_<offset>`` exists for each width that has more lanes than the offset, and picks
    lanes of the previous and current vectors behind, of the current and next ahead."""
    text = c_shift.shift_helpers({("f64", -1), ("f64", 3), ("f32", 2)})
    wide, mid, narrow = (text.split(f"PF_VBYTES == {w}")[1] for w in (64, 32, 16))
    assert "#define PF_LANES_f64_m1(p, c, n) __builtin_shufflevector(p, c, 7, 8, 9, 10, 11, 12, 13, 14)" in wide
    assert "#define PF_LANES_f64_p3(p, c, n) __builtin_shufflevector(c, n, 3, 4, 5, 6)" in mid
    assert "#define PF_LANES_f32_p2(p, c, n) __builtin_shufflevector(c, n, 2, 3, 4, 5)" in narrow.split("#endif")[0]
    assert "PF_LANES_f64_p3" not in narrow  # two doubles: no third neighbour
    assert "__has_builtin(__builtin_shufflevector)" in text
    assert c_shift.shift_helpers(set()) == ""


@pytest.fixture(scope="module")
def monkeypatch_session():
    """A monkeypatch that hypothesis' repeated examples may share (function-scoped fixtures may not)."""
    with pytest.MonkeyPatch.context() as m:
        yield m


@pytest.mark.parametrize("threads", [1, 2])
def test_polybench_jacobi_1d_matches_gcc_where_the_shifted_loop_runs(threads):
    args = {"A": np.random.default_rng(3).uniform(-1, 1, 400), "B": np.random.default_rng(4).uniform(-1, 1, 400), "tsteps": 20}
    check_against_gcc(KERNELS / "jacobi-1d.c", "kernel_jacobi_1d", args, defines={"N": 400, "TSTEPS": 20},
                      threads=threads, rtol=1e-12, atol=1e-12)


# ----- random stencils ------------------------------------------------------------------------------
@st.composite
def _stencils(draw) -> str:
    """A random one-statement stencil along a row: 2-4 distinct offsets of ``X`` within 3, combined by
    ``+ - * /``, negation, constants, the scalar ``s`` and a plain read of ``Z``, in f32 or f64."""
    dtype = draw(st.sampled_from(["f32", "f64"]))
    offsets = draw(st.lists(st.integers(-3, 3), min_size=2, max_size=4, unique=True))
    terms = [f"X[i, j + {o}]" if o >= 0 else f"X[i, j - {-o}]" for o in offsets]
    terms += draw(st.lists(st.sampled_from(["Z[i, j]", "s", "0.5", "(-X[i, j])"]), max_size=2))
    order = draw(st.permutations(terms))
    value = order[0]
    for term in order[1:]:
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        value = f"({value} {op} {term})" if op != "/" else f"({value} / (1.5 + {term} * {term}))"
    source = "\n".join([
        "import polyfuse as pf",
        "",
        "R, N = pf.params('R N')",
        "",
        "",
        '@pf.program(assume="N >= 7")',
        f"def stencil(X: pf.{dtype}[R, N], Z: pf.{dtype}[R, N], Y: pf.{dtype}[R, N], s: pf.{dtype}):",
        "    for i in range(R):",
        "        for j in range(3, N - 3):",
        f"            Y[i, j] = {value}",
        "",
    ])
    return source


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(source=_stencils(), n=st.integers(7, 150), skip=st.integers(0, 7))
def test_random_stencils_equal_the_plain_loop(monkeypatch_session, source, n, skip):
    """Any mix of offsets, operations and operands: the shifted loop's bits are the plain loop's."""
    prog = load_source(source, "stencil")
    args = make_inputs(prog, {"R": 2, "N": n}, n + skip)
    got = {k: _misaligned(v, skip) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    same = {k: _misaligned(v, (skip + 3) % 8) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    with monkeypatch_session.context() as m:
        m.setattr(c_shift, "MIN_TRIP_BYTES", 0)
        exe = pf.compile(prog, target="c", tile=None)
        assert MARK in exe.code.text, source
        exe(**got)
    _run_plain(monkeypatch_session, prog, [same], tile=None)
    np.testing.assert_array_equal(got["Y"], same["Y"], err_msg=source)
