"""Bad inputs that are not files: call-time arguments and ops-graph constructions.

Each case is ``(id, build)`` where ``build()`` returns ``(what, expectation)``:

* ``what`` is a thunk that triggers the behaviour (a call of a compiled program, a graph build);
* ``expectation`` is ``("raises", ErrorClass, fragment)``, or ``("ok", check)`` for inputs that are
  accepted on purpose -- ``check()`` then verifies the result against numpy.

Decisions recorded here (see also runtime/args.py): non-contiguous views, wrong dtypes, read-only outputs
and the same array passed for two arguments of which the program writes one are *rejected* with a
ShapeError (no silent copy: a copy would make an in-place output invisible to the caller); one array passed
for two arguments that the program only reads is harmless and accepted (the result is checked). A Fortran-ordered 1-d array, a
contiguous slice of a bigger array, and a broadcast-free 0-stride-free view are contiguous and accepted.
"""

from __future__ import annotations

import numpy as np

import polyfuse as pf

N, M, T = pf.params("N M T")


@pf.program
def axpy(x: pf.f32[N], y: pf.f32[N], alpha: pf.f32):
    for i in range(N):
        y[i] += alpha * x[i]


@pf.program
def matvec(A: pf.f64[N, M], x: pf.f64[M], y: pf.f64[N]):
    for i in range(N):
        y[i] = 0.0
        for j in range(M):
            y[i] += A[i, j] * x[j]


@pf.program(assume="N >= 3")
def smooth(A: pf.f64[N], B: pf.f64[N]):
    for t in range(T):
        for i in range(1, N - 1):
            B[i] = (A[i - 1] + A[i] + A[i + 1]) / 3.0
        for i in range(1, N - 1):
            A[i] = B[i]


@pf.program
def add2(a: pf.f32[N], b: pf.f32[N], c: pf.f32[N]):
    for i in range(N):
        c[i] = a[i] * 2.0 + b[i]


def _inputs_alias_ok():
    x, c = f32(6), np.zeros(6, np.float32)

    def check():
        np.testing.assert_allclose(c, 3 * x, rtol=1e-6)

    return (lambda: exe(add2)(a=x, b=x, c=c)), ("ok", check)


def _matvec_inputs_alias_ok():
    a, y = f64(3, 3), np.zeros(3)

    def check():
        np.testing.assert_allclose(y, a @ a[0], rtol=1e-12)

    return (lambda: exe(matvec)(A=a, x=a[0], y=y)), ("ok", check)


@pf.program
def counts(a: pf.i32[N], b: pf.i32[N]):
    for i in range(N):
        b[i] = a[i] * 2


@pf.program
def padded(A: pf.f32[N + 2], B: pf.f32[2 * N]):
    for i in range(N):
        B[2 * i] = A[i + 2]


_exe: dict[str, pf.Executable] = {}


def exe(prog: pf.Program) -> pf.Executable:
    if prog.name not in _exe:
        _exe[prog.name] = pf.compile(prog, target="c", fusion="none", tile=None)
    return _exe[prog.name]


f32 = lambda *s: np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) / 7  # noqa: E731
f64 = lambda *s: np.arange(int(np.prod(s)), dtype=np.float64).reshape(s) / 7  # noqa: E731


def raises(cls, fragment):
    return ("raises", cls, fragment)


def _axpy_ok(x, y, alpha=2.0):
    expected = y + np.float32(alpha) * x

    def check():
        np.testing.assert_allclose(y, expected, rtol=1e-6)

    return (lambda: exe(axpy)(x=x, y=y, alpha=alpha)), ("ok", check)


def _case(prog, **kwargs):
    return lambda: exe(prog)(**kwargs)


def _graph_matmul_mismatch():
    g = pf.Graph("g")
    a = g.input("a", (N, M), pf.f32)
    b = g.input("b", (N, M), pf.f32)
    return lambda: a @ b


def _graph_broadcast_mismatch():
    g = pf.Graph("g")
    a = g.input("a", (N, 3), pf.f32)
    b = g.input("b", (N, 4), pf.f32)
    return lambda: a + b


def _graph_bad_axis():
    g = pf.Graph("g")
    a = g.input("a", (N, M), pf.f32)
    return lambda: pf.ops.softmax(a, axis=2)


def _graph_no_outputs():
    g = pf.Graph("g")
    g.input("a", (N,), pf.f32)
    return lambda: g.build()


def _graph_foreign_tensor():
    g, h = pf.Graph("g"), pf.Graph("h")
    a = g.input("a", (N,), pf.f32)
    b = h.input("b", (N,), pf.f32)
    return lambda: a + b


def _graph_duplicate_input():
    g = pf.Graph("g")
    g.input("a", (N,), pf.f32)
    return lambda: g.input("a", (N,), pf.f32)


def _graph_bad_size():
    g = pf.Graph("g")
    return lambda: g.input("a", (1.5,), pf.f32)


def _graph_call_shape():
    g = pf.Graph("g")
    a = g.input("a", (N,), pf.f32)
    prog = g.build(y=pf.ops.relu(a))
    e = pf.compile(prog, target="c", fusion="none", tile=None)
    return lambda: e(a=np.zeros(4, np.float32), y=np.zeros(5, np.float32))


def _readonly(a):
    a.flags.writeable = False
    return a


CASES = [
    # ----- missing, unknown, wrong kinds of arguments
    ("missing_array", lambda: (_case(axpy, x=f32(4), alpha=1.0), raises(pf.ShapeError, "missing argument 'y'"))),
    ("missing_scalar", lambda: (_case(axpy, x=f32(4), y=f32(4)), raises(pf.ShapeError, "missing argument 'alpha'"))),
    ("unknown_argument", lambda: (_case(axpy, x=f32(4), y=f32(4), alpha=1.0, z=f32(4)), raises(pf.ShapeError, "unknown argument 'z'"))),
    ("list_not_array", lambda: (_case(axpy, x=[1.0, 2.0], y=f32(2), alpha=1.0), raises(pf.ShapeError, "expected a numpy array"))),
    ("scalar_for_array", lambda: (_case(axpy, x=1.0, y=f32(2), alpha=1.0), raises(pf.ShapeError, "expected a numpy array"))),
    ("array_for_scalar", lambda: (_case(axpy, x=f32(2), y=f32(2), alpha=f32(2)), raises(pf.ShapeError, "argument 'alpha'"))),
    ("bool_scalar", lambda: (_case(axpy, x=f32(2), y=f32(2), alpha=True), raises(pf.ShapeError, "argument 'alpha'"))),
    ("string_scalar", lambda: (_case(axpy, x=f32(2), y=f32(2), alpha="2"), raises(pf.ShapeError, "argument 'alpha'"))),
    # ----- shapes, ranks, dtypes
    ("wrong_rank", lambda: (_case(axpy, x=f32(2, 2), y=f32(2), alpha=1.0), raises(pf.ShapeError, "argument 'x'"))),
    ("disagreeing_sizes", lambda: (_case(axpy, x=f32(3), y=f32(4), alpha=1.0), raises(pf.ShapeError, "argument"))),
    ("matvec_inner_mismatch", lambda: (_case(matvec, A=f64(3, 4), x=f64(5), y=f64(3)), raises(pf.ShapeError, "argument 'x'"))),
    ("no_integer_solution", lambda: (_case(padded, A=f32(5), B=f32(7)), raises(pf.ShapeError, "2*N=6"))),
    ("size_below_shape_offset", lambda: (_case(padded, A=f32(1), B=f32(0)), raises(pf.ShapeError, "argument"))),
    ("wrong_float_dtype", lambda: (_case(axpy, x=f64(3), y=f32(3), alpha=1.0), raises(pf.ShapeError, "expected float32"))),
    ("int_for_float", lambda: (_case(axpy, x=np.arange(3), y=f32(3), alpha=1.0), raises(pf.ShapeError, "argument 'x'"))),
    ("float_for_int", lambda: (_case(counts, a=f32(3), b=np.zeros(3, np.int32)), raises(pf.ShapeError, "argument 'a'"))),
    ("int64_for_int32", lambda: (_case(counts, a=np.arange(3), b=np.zeros(3, np.int32)), raises(pf.ShapeError, "argument 'a'"))),
    ("fractional_int_size", lambda: (_case(smooth, A=f64(5), B=f64(5), T=1.5), raises(pf.ShapeError, "size 'T'"))),
    ("missing_time_size", lambda: (_case(smooth, A=f64(5), B=f64(5)), raises(pf.ShapeError, "size 'T'"))),
    ("inferable_size_disagrees", lambda: (_case(axpy, x=f32(3), y=f32(3), alpha=1.0, N=4), raises(pf.ShapeError, "argument"))),
    ("assume_violated", lambda: (_case(smooth, A=f64(2), B=f64(2), T=1), raises(pf.ShapeError, "N >= 3"))),
    ("negative_time_size", lambda: (_case(smooth, A=f64(5), B=f64(5), T=-1), raises(pf.ShapeError, "T"))),
    # ----- layout and aliasing: rejected, never silently copied
    ("strided_view", lambda: (_case(axpy, x=f32(8)[::2], y=f32(4), alpha=1.0), raises(pf.ShapeError, "C-contiguous"))),
    ("transposed_view", lambda: (_case(matvec, A=f64(4, 3).T, x=f64(4), y=f64(3)), raises(pf.ShapeError, "C-contiguous"))),
    ("fortran_order_2d", lambda: (_case(matvec, A=np.asfortranarray(f64(3, 4)), x=f64(4), y=f64(3)), raises(pf.ShapeError, "C-contiguous"))),
    ("readonly_output", lambda: (_case(axpy, x=f32(3), y=_readonly(f32(3)), alpha=1.0), raises(pf.ShapeError, "read-only"))),
    ("broadcast_view", lambda: (_case(axpy, x=np.broadcast_to(np.float32(1), (3,)), y=f32(3), alpha=1.0), raises(pf.ShapeError, "C-contiguous"))),
    ("same_array_twice", lambda: (_case(axpy, x=(a := f32(4)), y=a, alpha=1.0), raises(pf.ShapeError, "share memory"))),
    ("overlapping_views", lambda: (_case(axpy, x=(a := f32(8))[0:4], y=a[2:6], alpha=1.0), raises(pf.ShapeError, "share memory"))),
    ("output_aliases_input_2d", lambda: (_case(matvec, A=(a := f64(3, 3)), x=f64(3), y=a[1]), raises(pf.ShapeError, "share memory"))),
    ("inputs_alias_2d_ok", _matvec_inputs_alias_ok),
    # accepted on purpose: contiguous views and disjoint pieces of one buffer
    ("contiguous_slice_ok", lambda: _axpy_ok(f32(10)[2:6], f32(4))),
    ("disjoint_halves_ok", lambda: _axpy_ok((a := f32(8))[:4], a[4:])),
    ("fortran_1d_ok", lambda: _axpy_ok(np.asfortranarray(f32(5)), f32(5))),
    ("two_inputs_alias_ok", _inputs_alias_ok),
    ("empty_arrays_ok", lambda: _axpy_ok(f32(0), f32(0))),
    # ----- the ops graph
    ("graph_matmul_mismatch", lambda: (_graph_matmul_mismatch(), raises(pf.ShapeError, "matmul"))),
    ("graph_broadcast_mismatch", lambda: (_graph_broadcast_mismatch(), raises(pf.ShapeError, "broadcast"))),
    ("graph_bad_axis", lambda: (_graph_bad_axis(), raises(pf.PolyfuseError, "axis"))),
    ("graph_no_outputs", lambda: (_graph_no_outputs(), raises(pf.PolyfuseError, "output"))),
    ("graph_foreign_tensor", lambda: (_graph_foreign_tensor(), raises(pf.PolyfuseError, "graph"))),
    ("graph_duplicate_input", lambda: (_graph_duplicate_input(), raises(pf.PolyfuseError, "'a'"))),
    ("graph_bad_size", lambda: (_graph_bad_size(), raises(pf.PolyfuseError, "size"))),
    ("graph_call_shape", lambda: (_graph_call_shape(), raises(pf.ShapeError, "argument 'y'"))),
]
