"""Static checks at construction: bounds witnesses that really are out of bounds, initialisation of
temporaries, argument roles, and the IR well-formedness verifier."""

import dataclasses
import os
import re

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from examples import kernels
from polyfuse.analysis.checks import check_program
from polyfuse.ir.expr import Binary, Const, Read
from polyfuse.ir.verify import IRVerificationError, verify_program

N, M, T = pf.params("N M T")

with open(__file__) as _f:
    LINES = _f.read().splitlines()


def line_of(marker: str) -> int:
    hits = [k + 1 for k, text in enumerate(LINES) if text.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, marker
    return hits[0]


# ----- bounds witnesses ---------------------------------------------------------------------------
def parse_witness(text: str) -> tuple[dict[str, int], str, dict[str, int], str, tuple[int, ...]]:
    """``(sizes, statement, iterators, array, element)`` from a BoundsError message."""
    m = re.search(r"with sizes (?P<sizes>.*?), instance (?P<stmt>S\d+)\((?P<its>[^)]*)\).*? touches (?P<arr>\w+)\[(?P<elem>[^\]]*)\]", text)
    assert m, text
    pairs = lambda s: {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", s)}  # noqa: E731
    elem = tuple(int(x) for x in m.group("elem").split(",") if x.strip())
    return pairs(m.group("sizes")), m.group("stmt"), pairs(m.group("its")), m.group("arr"), elem


def build_oob_1d():
    @pf.program
    def f(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            B[i] = A[i + 1]  # @oob-1d
    return f


def build_oob_negative():
    @pf.program
    def f(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            B[i] = A[i - 1]  # @oob-negative
    return f


def build_oob_transpose():
    @pf.program
    def f(A: pf.f32[N, M], B: pf.f32[N, M]):
        for i in range(N):
            for j in range(M):
                B[i, j] = A[j, i]  # @oob-transpose
    return f


def build_oob_sum_under_assume():
    @pf.program(assume="N >= 5 and M >= 2")
    def f(A: pf.f32[N], C: pf.f32[N, M]):
        for i in range(N):
            for j in range(M):
                C[i, j] = A[i + j]  # @oob-sum
    return f


def build_oob_write():
    @pf.program
    def f(A: pf.f32[N]):
        for i in range(1, N + 1):
            A[i] = 0.0  # @oob-write
    return f


def build_oob_update_triangular():
    @pf.program
    def f(x: pf.f32[N], y: pf.f32[N]):
        for i in range(N):
            y[i] = 0.0
            for j in range(i + 2):
                y[i] += x[j]  # @oob-update
    return f


def build_oob_modulo():
    @pf.program(assume="N >= 3 and N <= 6")  # in bounds only for N >= 7: no size the assumption allows
    def f(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            B[i] = A[(i + 5) % 7]  # @oob-modulo
    return f


def build_oob_time_step():
    @pf.program(assume="T >= 1")
    def f(A: pf.f32[N]):
        for t in range(T):
            for i in range(0, N, 2):
                A[i + t] = 1.0  # @oob-time
    return f


WITNESS_CASES = [
    # (builder, marker, statement, array, verb, subscript of (iterators, sizes), array shape of sizes)
    (build_oob_1d, "oob-1d", "S0", "A", "reads", lambda it, sz: (it["i"] + 1,), lambda sz: (sz["N"],)),
    (build_oob_negative, "oob-negative", "S0", "A", "reads", lambda it, sz: (it["i"] - 1,), lambda sz: (sz["N"],)),
    (build_oob_transpose, "oob-transpose", "S0", "A", "reads", lambda it, sz: (it["j"], it["i"]), lambda sz: (sz["N"], sz["M"])),
    (build_oob_sum_under_assume, "oob-sum", "S0", "A", "reads", lambda it, sz: (it["i"] + it["j"],), lambda sz: (sz["N"],)),
    (build_oob_write, "oob-write", "S0", "A", "writes", lambda it, sz: (it["i"],), lambda sz: (sz["N"],)),
    (build_oob_update_triangular, "oob-update", "S1", "x", "reads", lambda it, sz: (it["j"],), lambda sz: (sz["N"],)),
    (build_oob_modulo, "oob-modulo", "S0", "A", "reads", lambda it, sz: ((it["i"] + 5) % 7,), lambda sz: (sz["N"],)),
    (build_oob_time_step, "oob-time", "S0", "A", "writes", lambda it, sz: (it["i"] + it["t"],), lambda sz: (sz["N"],)),
]


@pytest.mark.parametrize("build, marker, stmt, array, verb, subscript, shape", WITNESS_CASES, ids=[c[1] for c in WITNESS_CASES])
def test_bounds_witness_is_really_out_of_bounds(build, marker, stmt, array, verb, subscript, shape):
    with pytest.raises(pf.BoundsError) as info:
        build()
    text = str(info.value)
    # location and names
    m = re.match(r"(.+?):(\d+): ", text)
    assert m and os.path.samefile(m.group(1), __file__) and int(m.group(2)) == line_of(marker)
    assert f"{stmt} {verb}" in text and f"array '{array}'" in text
    assert LINES[line_of(marker) - 1].split("#")[0].strip() in text  # the statement's source text
    # the witness, checked independently of polyfuse: a real instance whose element lies outside
    sizes, wstmt, its, warr, elem = parse_witness(text)
    assert (wstmt, warr) == (stmt, array)
    assert all(v >= 0 for v in sizes.values())
    assert elem == subscript(its, sizes)
    dims = shape(sizes)
    assert len(elem) == len(dims)
    assert any(not 0 <= e < d for e, d in zip(elem, dims)), f"{elem} is inside {dims}"


def test_bounds_witness_instance_lies_in_the_domain_and_context():
    with pytest.raises(pf.BoundsError) as info:
        build_oob_sum_under_assume()
    sizes, _, its, _, elem = parse_witness(str(info.value))
    assert sizes["N"] >= 5 and sizes["M"] >= 2  # allowed by assume=
    assert 0 <= its["i"] < sizes["N"] and 0 <= its["j"] < sizes["M"]  # a real instance
    assert elem[0] >= sizes["N"]


def test_bounds_witness_is_the_smallest():
    with pytest.raises(pf.BoundsError) as info:
        build_oob_1d()
    sizes, _, its, _, elem = parse_witness(str(info.value))
    assert sizes == {"N": 1} and its == {"i": 0} and elem == (1,)


def test_guarded_access_is_in_bounds():
    @pf.program
    def f(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            if i < N - 1:
                B[i] = A[i + 1]
            else:
                B[i] = 0.0

    assert len(f.statements) == 2


def test_every_access_of_a_statement_is_checked():
    with pytest.raises(pf.BoundsError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N], C: pf.f32[M]):
            for i in range(N):
                B[i] = A[i] + C[i]  # @second-read
    assert "`C[i]`" in str(info.value) and "array 'C'" in str(info.value)


# ----- initialisation of temporaries -----------------------------------------------------------
def test_partially_written_temporary():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            tmp = pf.empty((N,), pf.f32)
            for i in range(N - 1):
                tmp[i] = A[i]
            for i in range(N):
                B[i] = tmp[i]  # @partial-tmp
    err = info.value
    assert err.line == line_of("partial-tmp")
    sizes = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(-?\d+)", err.reason.split("instance")[0]))
    its = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(-?\d+)", err.reason.split("instance")[1]))
    assert its["i"] == sizes["N"] - 1  # the one element no statement wrote
    assert "temporary 'tmp'" in err.reason and "S1" in err.reason


def test_value_based_initialisation_is_exact():
    @pf.program
    def first_iteration_initialises(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            if i == 0:
                acc = 0.0
            acc += A[i]
            B[i] = acc

    @pf.program
    def written_in_an_earlier_time_step(A: pf.f32[N]):
        tmp = pf.empty((N,), pf.f32)
        for t in range(T):
            for i in range(N):
                if t == 0:
                    tmp[i] = A[i]
                A[i] = tmp[i]

    assert first_iteration_initialises.arrays["acc"].role == "temp"
    assert written_in_an_earlier_time_step.arrays["A"].role == "inout"


# ----- roles ----------------------------------------------------------------------------------------
def test_roles_follow_reads_and_writes():
    @pf.program
    def roles(A: pf.f32[N], B: pf.f32[N], C: pf.f32[N], D: pf.f32[N], E: pf.f32[N], F: pf.f32[N]):
        for i in range(N):
            B[i] = 0.0
        for i in range(N):
            B[i] += A[i]  # written before any read: output
            C[i] += A[i]  # read-modify-write: inout
            D[i] = D[i] * 2.0  # read then written in place: inout
        for i in range(0, N, 2):
            E[i] = 1.0  # only the even elements are written ...
        for i in range(N):
            F[i] = E[i]  # ... so reading every element sees old odd values: inout

    got = {name: a.role for name, a in roles.arrays.items()}
    assert got == {"A": "input", "B": "output", "C": "inout", "D": "inout", "E": "inout", "F": "output"}


def test_write_after_read_is_inout_and_conditional_writes_stay_exact():
    @pf.program
    def later(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            B[i] = A[i]
        for i in range(N):
            A[i] = 0.0

    @pf.program
    def guarded(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            if i % 2 == 0:
                B[i] = A[i]
        for i in range(N):
            if i % 2 == 0:
                A[i] = B[i]

    assert later.arrays["A"].role == "inout" and later.arrays["B"].role == "output"
    assert guarded.arrays["B"].role == "output" and guarded.arrays["A"].role == "inout"


def test_output_under_context_dependent_guard():
    @pf.program
    def maybe(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            if N > 5:
                B[i] = 0.0
            A[i] = B[i]

    # with N <= 5 the old contents of B are read
    assert maybe.arrays["B"].role == "inout" and maybe.arrays["A"].role == "output"


# ----- the IR verifier ------------------------------------------------------------------------------
@pf.program
def small(A: pf.f32[N], B: pf.f32[N], C: pf.f32[N]):
    for i in range(N):
        B[i] = A[i] + 1.0
    for i in range(N):
        C[i] = B[i] * A[i]


def replace_statement(prog, index, **changes):
    stmts = list(prog.statements)
    stmts[index] = dataclasses.replace(stmts[index], **changes)
    return dataclasses.replace(prog, statements=tuple(stmts))


def replace_access(prog, index, k, **changes):
    accs = list(prog.statements[index].accesses)
    accs[k] = dataclasses.replace(accs[k], **changes)
    return replace_statement(prog, index, accesses=tuple(accs))


def test_verifier_accepts_every_example_kernel():
    for prog in [small, *kernels.ALL]:
        verify_program(prog)


S1 = "[N] -> { S1[i] : 0 <= i < N }"
MALFORMED = {
    "statement name out of order": lambda p: replace_statement(p, 1, name="S7"),
    "domain tuple differs": lambda p: replace_statement(p, 1, domain=isl.Set("[N] -> { S9[i] : 0 <= i < N }")),
    "unknown array": lambda p: replace_access(p, 1, 1, array="Z", relation=isl.Map("[N] -> { S1[i] -> Z[i] : 0 <= i < N }")),
    "wrong rank": lambda p: replace_access(p, 1, 1, relation=isl.Map("[N] -> { S1[i] -> B[i, 0] : 0 <= i < N }")),
    "relation on another space": lambda p: replace_access(p, 1, 1, relation=isl.Map("[N] -> { S1[i, j] -> B[i] : 0 <= i < N and j = 0 }")),
    "relation outside the domain": lambda p: replace_access(p, 1, 1, relation=isl.Map("[N] -> { S1[i] -> B[i] : 0 <= i <= N }")),
    "second write": lambda p: replace_access(p, 1, 1, kind="write"),
    "update for a plain assignment": lambda p: replace_access(p, 1, 0, kind="update"),
    "read of the target": lambda p: replace_statement(p, 1, value=Binary("*", Read(0, pf.f32), Read(2, pf.f32), pf.f32)),
    "read index out of range": lambda p: replace_statement(p, 1, value=Binary("*", Read(1, pf.f32), Read(5, pf.f32), pf.f32)),
    "unused read access": lambda p: replace_statement(p, 1, value=Binary("*", Read(1, pf.f32), Const(2.0, pf.f32), pf.f32)),
    "value type differs from target": lambda p: replace_statement(p, 1, value=Binary("*", Read(1, pf.f64), Read(2, pf.f64), pf.f64)),
    "operand types differ": lambda p: replace_statement(p, 1, value=Binary("*", Read(1, pf.f32), Const(2, pf.i32), pf.f32)),
    "context with set dimensions": lambda p: dataclasses.replace(p, context=isl.Set("[N] -> { [x] : N >= 0 }")),
    "schedule misses a statement": lambda p: dataclasses.replace(
        p, schedule=isl.Schedule.from_domain(isl.UnionSet("[N] -> { S0[i] : 0 <= i < N }"))),
    "schedule domain differs": lambda p: dataclasses.replace(
        p, schedule=isl.Schedule.from_domain(isl.UnionSet("[N] -> { S0[i] : 0 <= i < N; S1[i] : 0 <= i < N - 1 }"))),
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_verifier_rejects_malformed_programs(what):
    bad = MALFORMED[what](small)
    with pytest.raises(IRVerificationError) as info:
        verify_program(bad)
    assert "small" in str(info.value)
    assert not isinstance(info.value, pf.PolyfuseError)  # a bug in polyfuse, not a user error


def test_check_program_verifies_first():
    with pytest.raises(IRVerificationError):
        check_program(MALFORMED["second write"](small))
    assert check_program(small).arrays == small.arrays


# ----- derived assumptions ---------------------------------------------------------------------
def test_access_in_bounds_only_for_some_sizes_is_a_derived_assumption():
    @pf.program
    def f(r: pf.f64[N], y: pf.f64[N]):
        y[0] = -r[0]
        for i in range(1, N):
            y[i] = y[i - 1] + r[i]

    assert [a.access for a in f.assumptions] == ["y[0]"]
    assert "assumed: N > 0" in str(f) and "`y[0]`" in str(f)
    assert f.context.is_equal(isl.Set("[N] -> { : N >= 1 }"))
    y = np.zeros(4)
    pf.reference(f)(r=np.arange(4.0), y=y)
    assert y.tolist() == [0.0, 1.0, 3.0, 6.0]
    with pytest.raises(pf.ShapeError, match=r"accesses `y\[0\]`, which is inside its array only when N > 0"):
        pf.reference(f)(r=np.zeros(0), y=np.zeros(0))


def test_relation_between_sizes_is_not_derived():
    with pytest.raises(pf.BoundsError):
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[M]):
            for i in range(N):
                A[i] = C[i]  # M >= N would make it fit: an explicit assume= says so
