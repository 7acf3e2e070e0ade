"""The reference interpreter against independent numpy formulations, and call-time argument checking.

Every program of ``examples/kernels.py`` runs on random data at small sizes and is compared with a numpy
oracle written here in float64 (vectorised where that is natural, explicit loops where the algorithm is
inherently sequential). The oracle table must cover the whole corpus, so a new kernel cannot slip in
untested.
"""

import dataclasses
import time
import warnings

import islpy as isl
import numpy as np
import pytest

import examples.kernels as K
import polyfuse as pf
from polyfuse import ops
from polyfuse.codegen.ast import PYTHON, C, build_ast, expr_to_text, statement_call
from polyfuse.ir.program import Access
from polyfuse.runtime import reference as reference_module
from polyfuse.runtime.args import bind

N = pf.params("N")

# ----- oracles: float64 numpy, independent of the loop nests ----------------------------------------


def doolittle(a):
    """L (unit lower) and U with L @ U == a, no pivoting."""
    n = len(a)
    low, up = np.eye(n), np.zeros((n, n))
    for i in range(n):
        up[i, i:] = a[i, i:] - low[i, :i] @ up[:i, i:]
        low[i + 1 :, i] = (a[i + 1 :, i] - low[i + 1 :, :i] @ up[:i, i]) / up[i, i]
    return low, up


def jacobi_1d(d, s):
    a, b = d["A"].copy(), d["B"].copy()
    for _ in range(s["T"]):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
    return {"A": a, "B": b}


def jacobi_2d(d, s):
    a, b = d["A"].copy(), d["B"].copy()
    for _ in range(s["T"]):
        b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])
        a[1:-1, 1:-1] = 0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:] + b[2:, 1:-1] + b[:-2, 1:-1])
    return {"A": a, "B": b}


def seidel_2d(d, s):
    a = d["A"].copy()
    n = len(a)
    for _ in range(s["T"]):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                a[i, j] = a[i - 1 : i + 2, j - 1 : j + 2].sum() / 9.0
    return {"A": a}


def lu(d, s):
    low, up = doolittle(d["A"])
    assert np.allclose(low @ up, d["A"])
    return {"A": np.tril(low, -1) + up}


def cholesky(d, s):
    return {"A": np.tril(np.linalg.cholesky(d["A"])) + np.triu(d["A"], 1)}


def floyd_warshall(d, s):
    p = d["path"].copy()
    for k in range(len(p)):
        p = np.minimum(p, p[:, k : k + 1] + p[k : k + 1, :])
    return {"path": p}


def stencil_if(d, s):
    a = d["A"]
    b = a.copy()
    b[1:-1] = 0.25 * a[:-2] + 0.5 * a[1:-1] + 0.25 * a[2:]
    return {"B": b}


def modulo(d, s):
    a, i = d["A"], np.arange(s["N"])
    return {"B": a[i - i % 2] + a[4 * (i // 4)] + a[(i + 2) % 3], "C": a[np.arange(2 * s["N"]) // 2]}


def minmax(d, s):
    a, n = d["A"], s["N"]
    b = np.array([a[max(0, i - 2) : min(n, i + 3)].sum() for i in range(n)])
    b[min(n, 3) : max(n - 1, 3)] *= 2.0
    return {"B": b}


def time_axpy(d, s):
    y = d["y"].copy()
    for _ in range(s["T"]):
        y = y + d["a"] * d["x"]
    return {"y": y}


ORACLES = {
    "add_exp": lambda d, s: {"C": np.exp(d["A"] + 1.0)},
    "gemm": lambda d, s: {"C": d["beta"] * d["C"] + d["alpha"] * d["A"] @ d["B"]},
    "gemm_acc": lambda d, s: {"C": d["A"] @ d["B"]},
    "two_mm": lambda d, s: {"D": d["alpha"] * d["A"] @ d["B"] @ d["C"] + d["beta"] * d["D"]},
    "atax": lambda d, s: {"y": d["A"].T @ (d["A"] @ d["x"])},
    "bicg": lambda d, s: {"s": d["A"].T @ d["r"], "q": d["A"] @ d["p"]},
    "jacobi_1d": jacobi_1d,
    "jacobi_2d": jacobi_2d,
    "seidel_2d": seidel_2d,
    "lu": lu,
    "cholesky": cholesky,
    "floyd_warshall": floyd_warshall,
    "triangular": lambda d, s: {"y": np.tril(d["L"]) @ d["x"]},
    "stencil_if": stencil_if,
    "row_sum": lambda d, s: {"s": d["A"].sum(axis=1)},
    "modulo": modulo,
    "minmax": minmax,
    "time_axpy": time_axpy,
}


def special_input(prog, shape, rng):
    """Inputs the algorithms need: diagonally dominant for LU, SPD for Cholesky, weights for paths."""
    n = shape[0] if shape else 0
    if prog.name == "lu":
        return rng.uniform(-1, 1, shape) + n * np.eye(n)
    if prog.name == "cholesky":
        g = rng.uniform(-1, 1, shape)
        return g @ g.T + n * np.eye(n)
    if prog.name == "floyd_warshall":
        w = rng.uniform(1, 10, shape)
        np.fill_diagonal(w, 0.0)
        return w
    return rng.uniform(-1, 1, shape)


def make_call(prog, rng, sizes=None):
    """Random arguments for ``prog`` (sizes 5..12, T=3) and the sizes used."""
    sizes = dict(sizes or {})
    for p in prog.params:
        sizes.setdefault(p, 3 if p == "T" else int(rng.integers(5, 13)))
    kwargs = {}
    for name in prog.arguments:
        if name in prog.scalars:
            kwargs[name] = prog.scalars[name].numpy(rng.uniform(0.5, 1.5))
        else:
            arr = prog.arrays[name]
            shape = arr.concrete_shape(sizes)
            kwargs[name] = special_input(prog, shape, rng).astype(arr.dtype.numpy)
    size_kwargs = {p: sizes[p] for p in prog.params if not _inferable(prog, p)}
    return kwargs, size_kwargs, sizes


def _inferable(prog, p):
    return any(n == p for a in prog.arrays.values() if a.role != "temp" for e in a.shape for n, _ in e.terms)


def tolerance(prog):
    wide = all(a.dtype == pf.f64 for a in prog.arrays.values())
    return dict(rtol=1e-10, atol=1e-10) if wide else dict(rtol=2e-5, atol=2e-5)


# ----- the corpus against the oracles ---------------------------------------------------------------


def test_every_kernel_has_an_oracle():
    assert {p.name for p in K.ALL} <= set(ORACLES)


@pytest.mark.parametrize("prog", K.ALL, ids=lambda p: p.name)
def test_kernel_matches_numpy(prog):
    rng = np.random.default_rng(sum(map(ord, prog.name)))
    kwargs, size_kwargs, sizes = make_call(prog, rng)
    before = {k: v.copy() for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    as_f64 = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else float(v)) for k, v in kwargs.items()}
    expected = ORACLES[prog.name](as_f64, sizes)

    pf.reference(prog)(**kwargs, **size_kwargs)

    for name, value in before.items():
        role = prog.arrays[name].role
        if role == "input":
            np.testing.assert_array_equal(kwargs[name], value, err_msg=f"input {name} was modified")
        else:
            assert name in expected, f"oracle for {prog.name} does not check {role} array {name}"
            np.testing.assert_allclose(kwargs[name], expected[name], **tolerance(prog), err_msg=f"{prog.name}: {name}")


def test_interpreter_is_cached_on_the_program():
    assert pf.reference(K.gemm) is pf.reference(K.gemm)
    assert "range(" in pf.reference(K.gemm).source


def test_cache_is_not_shared_with_a_replaced_program():
    renamed = dataclasses.replace(K.jacobi_1d, name="renamed")
    assert pf.reference(renamed).program is renamed
    assert pf.reference(K.jacobi_1d).program is K.jacobi_1d


def test_float32_arithmetic_stays_float32():
    """row_sum accumulates in a float32 local: bit-for-bit a float32 loop, as C would compute it."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (16, 300)).astype(np.float32)
    s = np.zeros(16, np.float32)
    pf.reference(K.row_sum)(A=a, s=s)
    for i in range(16):
        acc = np.float32(0.0)
        for v in a[i]:
            acc = np.float32(acc + v)
        assert s[i] == acc


def test_zero_sized_reduction():
    rng = np.random.default_rng(2)
    c = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    expected = c * np.float32(0.5)
    pf.reference(K.gemm)(A=np.zeros((3, 0), np.float32), B=np.zeros((0, 4), np.float32), C=c, alpha=2.0, beta=0.5)
    np.testing.assert_array_equal(c, expected)


def test_gemm_64_cubed_is_fast_enough():
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(-1, 1, (64, 64)).astype(np.float32) for _ in range(2))
    c = np.zeros((64, 64), np.float32)
    start = time.perf_counter()
    pf.reference(K.gemm_acc)(A=a, B=b, C=c)
    assert time.perf_counter() - start < 10.0
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


# ----- values: iterators, integer arithmetic, intrinsics, casts -------------------------------------


@pf.program(assume="N >= 2")
def index_math(A: pf.f32[N], J: pf.i32[N], X: pf.f64[N], I: pf.i32[N], Y: pf.f32[N], Z: pf.f32[N], W: pf.i32[N]):
    for i in range(N):
        X[i] = i * 0.5 + N
        I[i] = (i - 3) // 2 + (i - 3) % 4 * 10 + J[i] // 3 * 100 + J[i] % 3 * 1000
        Y[i] = pf.where(A[i] > 0.0, pf.sqrt(A[i]), pf.abs(A[i])) + pf.tanh(A[i]) + pf.max(A[i], 0.25) + pf.pow(pf.abs(A[i]), 1.5)
        Z[i] = pf.sqrt(A[i]) + pf.log(A[i]) * 0.0 + pf.exp(pf.min(A[i], 0.0))
        W[i] = pf.i32(A[i] * 4.0) - pf.abs(J[i])


def test_index_values_integer_floor_semantics_intrinsics_and_casts():
    rng = np.random.default_rng(4)
    n = 11
    a = rng.uniform(-2, 2, n).astype(np.float32)
    j = rng.integers(-10, 10, n).astype(np.int32)
    out = {"X": np.zeros(n), "I": np.zeros(n, np.int32), "Y": np.zeros(n, np.float32), "Z": np.zeros(n, np.float32), "W": np.zeros(n, np.int32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sqrt and log of negatives give nan, silently, as in C
        pf.reference(index_math)(A=a, J=j, **out)
    i = np.arange(n)
    a64 = a.astype(np.float64)
    np.testing.assert_array_equal(out["X"], i * 0.5 + n)
    np.testing.assert_array_equal(out["I"], np.floor_divide(i - 3, 2) + np.mod(i - 3, 4) * 10 + np.floor_divide(j, 3) * 100 + np.mod(j, 3) * 1000)
    y = np.where(a64 > 0, np.sqrt(np.abs(a64)), np.abs(a64)) + np.tanh(a64) + np.maximum(a64, 0.25) + np.abs(a64) ** 1.5
    np.testing.assert_allclose(out["Y"], y, rtol=1e-5)
    z = np.sqrt(np.abs(a64)) + np.exp(np.minimum(a64, 0.0))
    np.testing.assert_allclose(out["Z"][a > 0], z[a > 0], rtol=1e-5)
    assert np.isnan(out["Z"][a < 0]).all()
    np.testing.assert_array_equal(out["W"], np.trunc(a * np.float32(4.0)).astype(np.int32) - np.abs(j))


@pf.program
def strided(A: pf.f32[N], B: pf.f32[N]):
    for i in range(1, N, 3):
        B[i] = A[i] * 2.0


def test_strided_loop():
    a = np.arange(10, dtype=np.float32)
    b = np.full(10, -1.0, np.float32)
    pf.reference(strided)(A=a, B=b)
    expected = np.full(10, -1.0, np.float32)
    expected[1::3] = 2 * a[1::3]
    np.testing.assert_array_equal(b, expected)


def test_loops_without_a_range_bound_run_as_while_loops(monkeypatch):
    """The generic for-node path (init; cond; inc) gives the same results as the range() fast path."""
    for prog in (K.lu, K.minmax, strided):
        kwargs, size_kwargs, _ = make_call(prog, np.random.default_rng(6))
        expected = {k: v.copy() for k, v in kwargs.items() if isinstance(v, np.ndarray)}
        pf.reference(prog)(**expected, **size_kwargs)
        with monkeypatch.context() as patch:
            patch.setattr(reference_module, "_upper_bound", lambda cond, iterator: None)
            interp = pf.reference(prog, schedule=prog.schedule)
        assert "while" in interp.source and "range(" not in interp.source
        interp(**kwargs, **size_kwargs)
        for name, value in expected.items():
            np.testing.assert_array_equal(kwargs[name], value)


# ----- the shared AST builder -----------------------------------------------------------------------


def test_marks_pass_through_and_a_given_schedule_runs():
    """A fused schedule of add_exp under a kernel mark: the AST keeps the mark, the interpreter ignores it."""
    prog = K.add_exp
    band = isl.MultiUnionPwAff("[N, M] -> [{ S0[i, j] -> [(i)]; S1[i, j] -> [(i)] }, { S0[i, j] -> [(j)]; S1[i, j] -> [(j)] }, { S0[i, j] -> [(0)]; S1[i, j] -> [(1)] }]")
    tree = isl.Schedule.from_domain(prog.domains).insert_partial_schedule(band)
    payload = object()
    tree = tree.get_root().child(0).insert_mark(isl.Id("kernel", user=payload)).get_schedule()
    ast = build_ast(prog, tree)
    marks, calls = [], []

    def visit(node):
        if node.get_type() == isl.ast_node_type.mark:
            marks.append(node.mark_get_id())
        elif node.get_type() == isl.ast_node_type.user:
            calls.append(statement_call(node))
        return True

    ast.foreach_descendant_top_down(visit)
    assert [(m.get_name(), m.user is payload) for m in marks] == [("kernel", True)]
    assert [c.statement.name for c in calls] == ["S0", "S1"]
    assert [expr_to_text(e, PYTHON) for e in calls[1].accesses] == ["C[c0, c1]", "B[c0, c1]"]

    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (6, 7)).astype(np.float32)
    c = np.zeros_like(a)
    pf.reference(prog, schedule=tree)(A=a, C=c)
    np.testing.assert_allclose(c, np.exp(a.astype(np.float64) + 1), rtol=1e-6)


def test_unknown_statement_in_schedule_is_a_codegen_error():
    tree = isl.Schedule.from_domain(isl.UnionSet("[N] -> { S9[i] : 0 <= i < N }"))
    with pytest.raises(pf.CodegenError, match="S9"):
        build_ast(K.jacobi_1d, tree)


def test_failures_inside_the_isl_callback_surface_as_codegen_errors():
    stmt = K.jacobi_1d.statements[0]
    broken = dataclasses.replace(stmt, accesses=(Access("B", "write", isl.Map("[N, T] -> { X[t, i] -> B[i] }")), *stmt.accesses[1:]))
    with pytest.raises(pf.CodegenError, match="cannot build the AST expressions"):
        build_ast(K.jacobi_1d, K.jacobi_1d.schedule, statements={"S0": broken})


def test_statement_call_of_a_foreign_ast_is_a_codegen_error():
    plain = isl.AstBuild.from_context(isl.Set("{ : }")).node_from_schedule(isl.Schedule.from_domain(isl.UnionSet("{ S[i] : 0 <= i < 3 }")))
    with pytest.raises(pf.CodegenError, match="carries no statement"):
        statement_call(plain.for_get_body())


def test_floor_division_prints_with_floor_semantics():
    build = isl.AstBuild.from_context(isl.Set("[N] -> { : }"))
    expr = build.expr_from_pw_aff(isl.PwAff("[N] -> { [(floor((N - 3)/2))] }"))
    py, c = expr_to_text(expr, PYTHON), expr_to_text(expr, C)
    assert "polyfuse_floord" in c and "//" in py
    for n in range(-7, 8):
        assert eval(py, {"N": n}) == (n - 3) // 2


# ----- call-time binding and its errors -------------------------------------------------------------


def gemm_args(n=5, k=6, m=7, dtype=np.float32):
    return dict(A=np.zeros((n, k), dtype), B=np.zeros((k, m), dtype), C=np.zeros((n, m), dtype), alpha=1.0, beta=1.0)


def test_bind_infers_sizes_and_converts_scalars():
    b = bind(K.gemm, gemm_args())
    assert dict(b.sizes) == {"N": 5, "M": 7, "K": 6}
    assert type(b.scalars["alpha"]) is np.float32
    assert dict(bind(K.jacobi_1d, dict(A=np.zeros(8), B=np.zeros(8), T=4, N=8)).sizes) == {"N": 8, "T": 4}
    assert dict(bind(K.modulo, dict(A=np.zeros(4, np.float32), B=np.zeros(4, np.float32), C=np.zeros(8, np.float32))).sizes) == {"N": 4}


@pytest.mark.parametrize(
    "prog, change, pattern",
    [
        (K.gemm, dict(A=np.zeros((5, 6), np.float64)), r"argument 'A': expected float32\[N=5, K=6\], got float64 \(5, 6\)"),
        (K.gemm, dict(A=np.zeros(30, np.float32)), r"argument 'A': expected float32\[N, K\], got float32 \(30,\)"),
        (K.gemm, dict(C=np.zeros((4, 7), np.float32)), r"argument 'C': expected float32\[N=5, M=7\], got float32 \(4, 7\).*N=5 from argument 'A'"),
        (K.gemm, dict(B=None), r"missing argument 'B' of gemm: expected float32\[K, M\]"),
        (K.gemm, dict(A=np.zeros((6, 10), np.float32)[:5, :6]), r"argument 'A': expected a C-contiguous array"),
        (K.gemm, dict(A=np.zeros((6, 5), np.float32).T), r"argument 'A': expected a C-contiguous array"),
        (K.gemm, dict(Z=1), r"unknown argument 'Z' for gemm"),
        (K.gemm, dict(alpha="x"), r"argument 'alpha': expected a float32 scalar"),
        (K.gemm, dict(A=[[0.0] * 6] * 5), r"argument 'A': expected a numpy array float32\[N, K\], got list"),
        (K.gemm, dict(N=6), r"argument 'A': expected float32\[N=6, K=6\], got float32 \(5, 6\)"),
        (K.gemm, dict(N=5.0), r"size 'N': expected an integer"),
    ],
)
def test_shape_errors(prog, change, pattern):
    kwargs = gemm_args()
    for k, v in change.items():
        if v is None:
            del kwargs[k]
        else:
            kwargs[k] = v
    with pytest.raises(pf.ShapeError, match=pattern):
        pf.reference(prog)(**kwargs)


def test_missing_size_says_to_pass_it_as_a_keyword():
    with pytest.raises(pf.ShapeError, match=r"size 'T' of jacobi_1d is not determined by any array shape; pass it as a keyword"):
        pf.reference(K.jacobi_1d)(A=np.zeros(8), B=np.zeros(8))


def test_sizes_must_satisfy_the_assumptions():
    with pytest.raises(pf.ShapeError, match=r"sizes (T=1, N=2|N=2, T=1) violate what jacobi_1d assumes: N >= 3$"):
        pf.reference(K.jacobi_1d)(A=np.zeros(2), B=np.zeros(2), T=1)


@pf.program
def doubled(C: pf.f32[2 * N]):
    for i in range(2 * N):
        C[i] = 1.0


def test_shape_without_integer_solution():
    with pytest.raises(pf.ShapeError, match=r"argument 'C': expected float32\[2\*N=6\], got float32 \(7,\)"):
        pf.reference(K.modulo)(A=np.zeros(3, np.float32), B=np.zeros(3, np.float32), C=np.zeros(7, np.float32))
    with pytest.raises(pf.ShapeError, match=r"argument 'C': expected float32\[2\*N\], got float32 \(7,\): no integer N gives 2\*N = 7"):
        pf.reference(doubled)(C=np.zeros(7, np.float32))


def test_same_buffer_for_two_arguments():
    """Two names for one array the program only reads are harmless (A @ A); sharing with a written
    argument is refused."""
    a = np.arange(25, dtype=np.float32).reshape(5, 5) / 10
    c = np.zeros((5, 5), np.float32)
    pf.reference(K.gemm)(A=a, B=a, C=c, alpha=1.0, beta=1.0)
    np.testing.assert_allclose(c, a @ a, rtol=1e-5)
    with pytest.raises(pf.ShapeError, match=r"arguments 'A' and 'C' share memory"):
        pf.reference(K.gemm)(A=a, B=np.ones((5, 5), np.float32), C=a, alpha=1.0, beta=1.0)
    big = np.zeros(16)
    with pytest.raises(pf.ShapeError, match=r"arguments 'A' and 'B' share memory"):
        pf.reference(K.jacobi_1d)(A=big[:8], B=big[4:12], T=1)


def test_read_only_output_is_rejected():
    kwargs = gemm_args()
    kwargs["C"].flags.writeable = False
    with pytest.raises(pf.ShapeError, match=r"argument 'C': the program writes it"):
        pf.reference(K.gemm)(**kwargs)


def test_float32_transcendentals_are_rounded_from_double() -> None:
    """A float32 exp/log/sqrt/tanh in the reference is the float64 result rounded to float32: numpy's own
    float32 exp is off by up to 2 ulp, which a row normalisation magnifies past the tolerances the compiled
    code is held to."""
    g = pf.Graph("transcendentals")
    x = g.input("x", (4096,))
    prog = g.build(e=ops.exp(x), l=ops.log(ops.abs(x) + 1.0), s=ops.sqrt(ops.abs(x)), t=ops.tanh(x))
    xv = np.random.default_rng(0).uniform(-3, 3, 4096).astype(np.float32)
    got = {n: np.zeros(4096, np.float32) for n in ("e", "l", "s", "t")}
    pf.reference(prog)(x=xv, **got)
    x64 = xv.astype(np.float64)
    shifted = (np.abs(xv) + np.float32(1.0)).astype(np.float64)  # (the sum itself is float32 arithmetic)
    want = {"e": np.exp(x64), "l": np.log(shifted), "s": np.sqrt(np.abs(x64)), "t": np.tanh(x64)}
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value.astype(np.float32), err_msg=name)


def test_a_nearly_constant_row_normalised_matches_the_compiled_code() -> None:
    """The fuzzer's case (session 31): layernorm of exp(x / 10) over rows of three, where the rows' spread is
    a few hundredths, so an ulp of exp moves the output by tens of ulps. The compiled C (exact source order)
    and the reference agree within the fuzzer's float32 tolerance."""
    g = pf.Graph("rows")
    x = g.input("x", (3, 3))
    prog = g.build(y=ops.layernorm(ops.exp(x * 0.1)))
    xv = np.random.default_rng(0).uniform(-1, 1, (3, 3)).astype(np.float32)
    want = np.zeros((3, 3), np.float32)
    pf.reference(prog)(x=xv, y=want)
    got = np.zeros((3, 3), np.float32)
    pf.compile(prog, target="c", reassociate=False, params={})(x=xv, y=got)
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=5e-6)
