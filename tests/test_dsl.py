"""The Python DSL, positive side: each program's domains and access relations are exactly the expected
isl sets and maps (compared with ``is_equal``), and the Program has the documented attributes."""

import dataclasses
import math

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from examples import kernels
from polyfuse.ir.expr import Binary, Cast, Compare, Const, IndexValue, Logical, Read, ScalarArg, Unary, Where

N, M, K, T = pf.params("N M K T")
OFFSET = 2

with open(__file__) as _f:
    LINES = _f.read().splitlines()


def line_of(marker: str) -> int:
    hits = [k + 1 for k, text in enumerate(LINES) if text.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def assert_domain(prog: pf.Program, name: str, expected: str) -> None:
    """The domain of ``name`` is ``expected`` for every size the context allows."""
    actual = prog.statement(name).domain
    ctx = prog.context
    assert actual.intersect_params(ctx).is_equal(isl.Set(expected).intersect_params(ctx)), f"{name}: {actual} != {expected}"


def assert_access(prog: pf.Program, name: str, index: int, kind: str, expected: str) -> None:
    """Access ``index`` of statement ``name`` has ``kind`` and (within the context) the relation ``expected``."""
    acc = prog.statement(name).accesses[index]
    assert acc.kind == kind
    want = isl.Map(expected)
    assert acc.array == want.get_tuple_name(isl.dim_type.out)
    ctx = prog.context
    assert acc.relation.intersect_params(ctx).is_equal(want.intersect_params(ctx)), f"{name}#{index}: {acc.relation} != {expected}"


def kinds(prog: pf.Program, name: str) -> list[tuple[str, str]]:
    return [(a.kind, a.array) for a in prog.statement(name).accesses]


# ----- domains and accesses -------------------------------------------------------------------------
def test_triangular_nest():
    @pf.program
    def tri(L: pf.f64[N, N], x: pf.f64[N], y: pf.f64[N]):
        for i in range(N):
            y[i] = 0.0  # @tri-S0
            for j in range(i + 1):
                y[i] += L[i, j] * x[j]  # @tri-S1

    assert [s.name for s in tri.statements] == ["S0", "S1"]
    assert_domain(tri, "S0", "[N] -> { S0[i] : 0 <= i < N }")
    assert_domain(tri, "S1", "[N] -> { S1[i, j] : 0 <= i < N and 0 <= j <= i }")
    assert kinds(tri, "S1") == [("update", "y"), ("read", "L"), ("read", "x")]
    assert_access(tri, "S0", 0, "write", "[N] -> { S0[i] -> y[i] : 0 <= i < N }")
    assert_access(tri, "S1", 0, "update", "[N] -> { S1[i, j] -> y[i] : 0 <= i < N and 0 <= j <= i }")
    assert_access(tri, "S1", 1, "read", "[N] -> { S1[i, j] -> L[i, j] : 0 <= i < N and 0 <= j <= i }")
    assert_access(tri, "S1", 2, "read", "[N] -> { S1[i, j] -> x[j] : 0 <= i < N and 0 <= j <= i }")
    assert tri.statement("S0").line == line_of("tri-S0")
    assert tri.statement("S1").line == line_of("tri-S1")
    assert tri.statement("S1").text == "y[i] += L[i, j] * x[j]"
    assert tri.statement("S1").op == "+=" and tri.statement("S1").is_reduction


def test_step_two_and_three():
    @pf.program
    def strided(A: pf.f32[N, M]):
        for i in range(1, N, 2):
            for j in range(i, M, 3):
                A[i, j] = 0.0

    assert_domain(strided, "S0", "[N, M] -> { S0[i, j] : 1 <= i < N and i <= j < M and "
                                 "exists (a, b : i = 1 + 2a and j = i + 3b) }")


def test_min_max_bounds_with_several_arguments():
    @pf.program(assume="N >= 4 and M >= N")
    def band(A: pf.f64[M], B: pf.f64[N]):
        for i in range(N):
            for j in range(max(0, i - 2, N - 5), min(N, i + 3, M)):
                B[i] += A[j]

    assert_domain(band, "S0", "[N, M] -> { S0[i, j] : N >= 4 and M >= N and 0 <= i < N and j >= 0 and j >= i - 2 "
                              "and j >= N - 5 and j < N and j < i + 3 and j < M }")


def test_if_elif_else_split_the_domain():
    @pf.program(assume="N >= 1")
    def split(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            if i < 3 or i >= N - 1:
                B[i] = A[i]
            elif i % 2 == 0:
                B[i] = 2.0 * A[i]
            else:
                B[i] = 0.0

    assert_domain(split, "S0", "[N] -> { S0[i] : N >= 1 and 0 <= i < N and (i < 3 or i >= N - 1) }")
    assert_domain(split, "S1", "[N] -> { S1[i] : 3 <= i < N - 1 and i mod 2 = 0 }")
    assert_domain(split, "S2", "[N] -> { S2[i] : 3 <= i < N - 1 and i mod 2 = 1 }")


def test_not_and_chained_comparison():
    @pf.program
    def edges(B: pf.f32[N]):
        for i in range(N):
            if not (0 < i < N - 1):
                B[i] = 0.0
            if 0 < i < N - 1 and not i == 2:
                B[i] = 1.0

    assert_domain(edges, "S0", "[N] -> { S0[i] : 0 <= i < N and (i = 0 or i = N - 1) }")
    assert_domain(edges, "S1", "[N] -> { S1[i] : 0 < i < N - 1 and i != 2 }")


def test_nested_ifs_with_else():
    @pf.program
    def nest(A: pf.f32[N, N]):
        for i in range(N):
            for j in range(N):
                if i <= j:
                    if j < 2 * i:
                        A[i, j] = 1.0
                    else:
                        A[i, j] = 2.0
                else:
                    A[i, j] = 3.0

    assert_domain(nest, "S0", "[N] -> { S0[i, j] : 0 <= i <= j < N and j < 2i }")
    assert_domain(nest, "S1", "[N] -> { S1[i, j] : 0 <= i <= j < N and j >= 2i }")
    assert_domain(nest, "S2", "[N] -> { S2[i, j] : 0 <= j < i < N }")


def test_if_on_params_only():
    @pf.program
    def big(A: pf.f32[N]):
        if N > 5:
            for i in range(N):
                A[i] = 0.0
        for i in range(N):
            if M == 0:
                A[i] = 1.0

    assert big.params == ("N", "M")
    assert_domain(big, "S0", "[N] -> { S0[i] : N >= 6 and 0 <= i < N }")
    assert_domain(big, "S1", "[N, M] -> { S1[i] : M = 0 and 0 <= i < N }")


def test_modulo_and_floor_division_in_subscripts_and_bounds():
    @pf.program(assume="N >= 3")
    def mod(A: pf.f32[N], B: pf.f32[N], C: pf.f32[2 * N + 1]):
        for i in range(N // 2):
            B[i] = A[2 * i + 1] + A[i % 3]
        for i in range(2 * N):
            C[i + 1] = A[i // 2]

    assert_domain(mod, "S0", "[N] -> { S0[i] : N >= 3 and 0 <= i < floor(N / 2) }")
    assert_access(mod, "S0", 1, "read", "[N] -> { S0[i] -> A[2i + 1] : 0 <= i < floor(N / 2) }")
    assert_access(mod, "S0", 2, "read", "[N] -> { S0[i] -> A[i mod 3] : 0 <= i < floor(N / 2) }")
    assert_domain(mod, "S1", "[N] -> { S1[i] : N >= 3 and 0 <= i < 2N }")
    assert_access(mod, "S1", 0, "write", "[N] -> { S1[i] -> C[i + 1] : 0 <= i < 2N }")
    assert_access(mod, "S1", 1, "read", "[N] -> { S1[i] -> A[floor(i / 2)] : 0 <= i < 2N }")
    assert mod.arrays["C"].shape[0] == 2 * N + 1


def test_module_constant_and_size_expression_in_subscripts():
    NP = N + OFFSET

    @pf.program
    def shift(A: pf.f32[NP], B: pf.f32[N]):
        for i in range(N):
            B[i] = A[i + OFFSET]
        for i in range(NP - 1):
            A[i + 1] = 0.0

    assert shift.params == ("N",)
    assert_access(shift, "S0", 1, "read", "[N] -> { S0[i] -> A[i + 2] : 0 <= i < N }")
    assert_domain(shift, "S1", "[N] -> { S1[i] : 0 <= i <= N }")


def test_local_scalar_is_a_zero_d_temporary():
    @pf.program
    def row_sum(A: pf.f32[N, M], s: pf.f32[N]):
        for i in range(N):
            acc = 0.0
            for j in range(M):
                acc += A[i, j]
            s[i] = acc

    acc = row_sum.arrays["acc"]
    assert (acc.shape, acc.dtype, acc.role) == ((), pf.f32, "temp")
    assert "acc" not in row_sum.arguments
    assert_access(row_sum, "S0", 0, "write", "[N, M] -> { S0[i] -> acc[] : 0 <= i < N }")
    assert_access(row_sum, "S1", 0, "update", "[N, M] -> { S1[i, j] -> acc[] : 0 <= i < N and 0 <= j < M }")
    assert_access(row_sum, "S2", 1, "read", "[N, M] -> { S2[i] -> acc[] : 0 <= i < N }")
    assert isinstance(row_sum.statement("S2").value, Read)


def test_local_scalar_reassigned_in_a_loop_and_annotated_local():
    @pf.program(assume="N >= 1")
    def scale(A: pf.f32[N], B: pf.f32[N]):
        total: pf.f64 = 0.0
        for i in range(N):
            t = A[i]
            t = t * 2.0
            total += t
            B[i] = t
        B[0] = total

    assert scale.arrays["t"].dtype == pf.f32 and scale.arrays["total"].dtype == pf.f64
    assert [s.write.array for s in scale.statements] == ["total", "t", "t", "total", "B", "B"]
    assert isinstance(scale.statement("S3").value, Cast)  # f32 t into the f64 total


def test_empty_temporaries_zero_and_one_dimensional():
    @pf.program
    def two(A: pf.f32[N], out: pf.f32[N]):
        tmp = pf.empty((N,), pf.f32)
        s = pf.empty((), pf.f64)
        s = 0.0
        for i in range(N):
            tmp[i] = A[i] * A[i]
            s += tmp[i]
        for i in range(N):
            out[i] = tmp[i] / s

    assert two.arrays["tmp"].shape == (N + 0,) and two.arrays["tmp"].role == "temp"
    assert two.arrays["s"].shape == () and two.arrays["s"].dtype == pf.f64
    assert_access(two, "S2", 1, "read", "[N] -> { S2[i] -> tmp[i] : 0 <= i < N }")
    assert two.arguments == ("A", "out")


def test_time_loop_whose_size_appears_only_in_bounds():
    @pf.program
    def steps(A: pf.f64[N]):
        for t in range(T):
            for i in range(N):
                A[i] += 1.0

    assert steps.params == ("N", "T")
    assert_domain(steps, "S0", "[N, T] -> { S0[t, i] : 0 <= t < T and 0 <= i < N }")


def test_params_in_order_of_first_mention():
    @pf.program(assume="T >= 1 and M >= 1")
    def order(B: pf.f32[M], A: pf.f32[N, M]):
        for k in range(K):
            for i in range(N):
                B[0] = A[i, 0]

    assert order.params == ("M", "N", "K", "T")
    assert order.context.params().is_equal(isl.Set("[M, N, K, T] -> { : M >= 1 and N >= 0 and K >= 0 and T >= 1 }"))


def test_constant_sizes_need_no_params():
    @pf.program
    def fixed(A: pf.f32[8, 4]):
        for i in range(8):
            for j in range(4):
                A[i, j] = 0.0

    assert fixed.params == ()
    assert_domain(fixed, "S0", "{ S0[i, j] : 0 <= i < 8 and 0 <= j < 4 }")


def test_closure_variables_as_sizes_and_constants():
    R, C = pf.params("R C")
    width = 3

    @pf.program
    def shift(A: pf.f32[R, C]):
        for i in range(R):
            for j in range(width, C):
                A[i, j] = A[i, j - width]

    assert shift.params == ("R", "C")
    assert_access(shift, "S0", 1, "read", "[R, C] -> { S0[i, j] -> A[i, j - 3] : 0 <= i < R and 3 <= j < C }")


def test_size_used_only_in_an_annotation_of_a_nested_function():
    S = pf.params("S")

    @pf.program(assume="S >= 4")
    def eager(A: pf.f32[S]):
        for i in range(4):
            A[i] = 0.0

    @pf.program(assume="S >= 4")
    def lazy(A: "pf.f32[S]"):
        for i in range(4):
            A[i] = 0.0

    for prog in (eager, lazy):
        assert prog.params == ("S",) and prog.arrays["A"].shape == (S + 0,)


def test_modulo_in_a_bound_and_numpy_spellings():
    @pf.program(assume="N >= 3")
    def saw(A: pf.f64[N], B: pf.f64[N, 3]):
        for i in range(N):
            for j in range(i % 3):
                B[i, j] = np.exp(A[i]) + pf.where(0 < i < N - 1, 1.0, 0.0)

    assert_domain(saw, "S0", "[N] -> { S0[i, j] : N >= 3 and 0 <= i < N and 0 <= j < i mod 3 }")
    nodes = list(saw.statement("S0").value.walk())
    assert any(isinstance(n, Unary) and n.op == "exp" for n in nodes)
    assert any(isinstance(n, Where) and isinstance(n.cond, Logical) for n in nodes)


# ----- values ---------------------------------------------------------------------------------------
def test_where_value():
    @pf.program
    def relu(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            B[i] = pf.where(A[i] > 0.0, A[i], 0.0)

    value = relu.statement("S0").value
    assert isinstance(value, Where) and isinstance(value.cond, Compare) and value.dtype == pf.f32
    assert kinds(relu, "S0") == [("write", "B"), ("read", "A"), ("read", "A")]


def test_scalar_arguments_iterators_and_sizes_as_values():
    @pf.program
    def affine_values(A: pf.f32[N], B: pf.f32[N], alpha: pf.f32):
        for i in range(N):
            B[i] = alpha * A[i] + i + (i // 2 + N)

    assert affine_values.scalars == {"alpha": pf.f32}
    assert affine_values.arguments == ("A", "B", "alpha")
    nodes = list(affine_values.statement("S0").value.walk())
    assert any(isinstance(n, ScalarArg) and n.name == "alpha" for n in nodes)
    index_values = [n.value for n in nodes if isinstance(n, IndexValue)]
    assert any(v.is_equal(isl.PwAff("[N] -> { [i] -> [(i)] }")) for v in index_values)
    assert any(v.is_equal(isl.PwAff("[N] -> { [i] -> [(floor(i / 2) + N)] }")) for v in index_values)
    # arithmetic stays in the arrays' type: no f64 appears in an all-f32 program
    assert {n.dtype for n in nodes} <= {pf.f32, pf.i32}


def test_casts_builtins_math_and_conditional_expressions():
    @pf.program
    def mix(A: pf.f32[N], B: pf.f32[N], alpha: pf.f32):
        for i in range(N):
            B[i] = (float(i) + pf.f32(i) + (1.0 if i > 2 and i < N - 1 else 2.0) + abs(A[i])
                    + min(A[i], 0.0, alpha) + max(A[i], B[i]) + math.exp(A[i]) + pf.sqrt(pf.abs(A[i]))
                    + A[i] ** 2 + pf.pow(A[i], 0.5) + pf.tanh(A[i]) + pf.log(1.0 + A[i] * A[i]) + A[i] / i)

    nodes = list(mix.statement("S0").value.walk())
    ops = {n.op for n in nodes if isinstance(n, (Unary, Binary))}
    assert {"abs", "exp", "sqrt", "tanh", "log", "min", "max", "pow", "/"} <= ops
    assert any(isinstance(n, Where) and isinstance(n.cond, Logical) for n in nodes)
    assert {n.dtype for n in nodes} <= {pf.f32, pf.i32, None}
    assert not any(isinstance(n, Const) and n.dtype == pf.f64 for n in nodes)


def test_explicit_cast_to_a_wider_type():
    @pf.program
    def widen(A: pf.f32[N], B: pf.f64[N]):
        for i in range(N):
            B[i] = pf.f64(A[i]) * 0.5

    value = widen.statement("S0").value
    assert isinstance(value, Binary) and value.dtype == pf.f64 and isinstance(value.lhs, Cast)


def test_docstrings_pass_and_stray_strings_are_ignored():
    @pf.program
    def quiet(A: pf.f32[N]):
        """Zero A."""
        for i in range(N):
            "a note"
            pass
            A[i] = 0

    assert len(quiet.statements) == 1
    assert quiet.statement("S0").value == Const(0.0, pf.f32)


# ----- the Program value ---------------------------------------------------------------------------
@pf.program
def pipeline(A: pf.f32[N, M], C: pf.f32[N, M], D: pf.f32[N], E: pf.f32[N]):
    B = pf.empty((N, M), pf.f32)
    for i in range(N):
        for j in range(M):
            B[i, j] = A[i, j] + 1.0  # @pipe-S0
    for i in range(N):
        for j in range(M):
            C[i, j] = pf.exp(B[i, j])  # @pipe-S1
    for i in range(N):
        D[i] *= 2.0  # @pipe-S2
        E[i] = D[i]  # @pipe-S3


def test_program_attributes():
    assert isinstance(pipeline, pf.Program)
    assert isinstance(pipeline.statements, tuple)
    assert [s.name for s in pipeline.statements] == ["S0", "S1", "S2", "S3"]
    for k, s in enumerate(pipeline.statements):
        assert isinstance(s, pf.Statement) and isinstance(s.domain, isl.Set) and s.domain.get_tuple_name() == s.name
        assert s.line == line_of(f"pipe-S{k}")
        for a in s.accesses:
            assert isinstance(a, pf.Access) and a.kind in ("read", "write", "update") and isinstance(a.relation, isl.Map)
    roles = {name: a.role for name, a in pipeline.arrays.items()}
    assert roles == {"A": "input", "C": "output", "D": "inout", "E": "output", "B": "temp"}
    b = pipeline.arrays["B"]
    assert isinstance(b, pf.Array) and b.name == "B" and b.shape == (N + 0, M + 0) and b.dtype == pf.f32
    assert pipeline.arguments == ("A", "C", "D", "E")
    assert pipeline.params == ("N", "M")
    assert pipeline.name == "pipeline"


def test_program_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipeline.name = "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipeline.statements[0].name = "S9"
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipeline.statements[0].accesses[0].kind = "read"
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipeline.arrays["A"].role = "output"
    with pytest.raises(TypeError):
        pipeline.arrays["Z"] = pipeline.arrays["A"]


def test_printing_a_program():
    text = str(pipeline)
    assert "pipeline" in text
    for s in pipeline.statements:
        assert s.name in text and str(s.domain) in text
    assert "B[i, j]" in text and "exp(B[i, j])" in text
    assert "temp" in text and "inout" in text


def test_every_example_kernel_builds():
    for prog in kernels.ALL:
        assert isinstance(prog, pf.Program) and prog.statements
        assert all(s.domain.get_tuple_name() == s.name for s in prog.statements)
