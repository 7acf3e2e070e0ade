"""Malformed programs: each must fail with one clear error that points at the user's code.

Every test marks the offending line with a ``# <- NAME`` comment; the error must report exactly that line
of this file, and a SourceError's caret must sit under the offending text. No message may leak polyfuse's
own files, a traceback, or isl internals.
"""

import math  # noqa: F401 - programs below refer to it
import os
import re

import numpy as np  # noqa: F401 - programs below refer to it
import pytest

import polyfuse as pf

N, M, T = pf.params("N M T")
OFFSET = 2

with open(__file__) as _f:
    LINES = _f.read().splitlines()

INTERNALS = ("polyfuse/frontend", "polyfuse/analysis", "polyfuse/ir", "polyfuse/types", "Traceback", "isl_", "islpy", 'File "')


def line_of(marker: str) -> int:
    """The line of this file that ends with ``# <- marker``."""
    hits = [k + 1 for k, text in enumerate(LINES) if text.rstrip().endswith(f"# <- {marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def assert_clean(err: Exception) -> None:
    text = str(err)
    for bad in INTERNALS:
        assert bad not in text, f"{bad!r} leaks into the message:\n{text}"


def assert_source_error(err: pf.SourceError, marker: str, snippet: str, *words: str, caret: str | None = None) -> None:
    """``err`` names the offending text ``snippet`` and points at it (or at ``caret``) on the marked line;
    its message also mentions ``words``."""
    line = line_of(marker)
    text = str(err)
    assert os.path.samefile(err.filename, __file__)
    assert err.line == line, f"reported line {err.line}, expected {line}:\n{text}"
    assert err.col is not None
    assert f":{line}:{err.col + 1}: " in text.splitlines()[0]
    # the source line and a caret under the offending text
    lines = text.splitlines()
    assert lines[-2] == "    " + LINES[line - 1]
    assert lines[-1] == "    " + " " * err.col + "^"
    at = caret if caret is not None else snippet
    assert LINES[line - 1][err.col:].startswith(at), f"caret at {LINES[line - 1][err.col:]!r}, expected {at!r}"
    assert snippet in err.reason, f"{snippet!r} not named in {err.reason!r}"
    for w in words:
        assert w in text, f"{w!r} not in:\n{text}"
    assert_clean(err)


def bounds_location(err: pf.BoundsError) -> tuple[str, int]:
    m = re.match(r"(.+?):(\d+): ", str(err))
    assert m, str(err)
    return m.group(1), int(m.group(2))


def assert_bounds_error(err: pf.BoundsError, marker: str, array: str, stmt: str) -> str:
    filename, line = bounds_location(err)
    assert os.path.samefile(filename, __file__)
    assert line == line_of(marker)
    text = str(err)
    assert f"array '{array}'" in text and stmt in text
    assert_clean(err)
    return text


# ----- non-affine subscripts and bounds ------------------------------------------------------------
def test_product_of_iterators_in_subscript():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N, N]):
            for i in range(N):
                for j in range(N):
                    B[i, j] = A[i * j]  # <- product
    assert_source_error(info.value, "product", "i * j", "not affine", "multiply two variables")


def test_indirect_subscript():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.i32[N], C: pf.f32[N]):
            for i in range(N):
                C[i] = A[B[i]]  # <- indirect
    assert_source_error(info.value, "indirect", "B[i]", "indirect access")


def test_float_subscript():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                C[i] = A[i * 0.5]  # <- float-sub
    assert_source_error(info.value, "float-sub", "i * 0.5", "not an integer", caret="0.5")


def test_true_division_in_subscript():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                C[i] = A[i / 2]  # <- truediv
    assert_source_error(info.value, "truediv", "i / 2", "//")


def test_non_affine_loop_bound():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, N]):
            for i in range(N):
                for j in range(i * i):  # <- bound
                    A[i, j] = 0.0
    assert_source_error(info.value, "bound", "i * i", "loop bound")


def test_modulo_by_a_size():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                C[i] = A[i % N]  # <- mod-param
    assert_source_error(info.value, "mod-param", "i % N", "positive integer constant")


def test_scalar_argument_in_subscript():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], k: pf.i32):
            for i in range(N):
                A[k] = 0.0  # <- scalar-sub
    assert_source_error(info.value, "scalar-sub", "k", "scalar argument")


# ----- statements that are not allowed ----------------------------------------------------------------
def test_while_loop():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            while N > 0:  # <- while
                A[0] = 1.0
    assert_source_error(info.value, "while", "while N > 0", "while loop", "range")


def test_break():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
                break  # <- break
    assert_source_error(info.value, "break", "break", "affine `if`")


def test_return():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
            return A  # <- return
    assert_source_error(info.value, "return", "return", "array arguments")


def test_call_statement():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                print(i)  # <- print
    assert_source_error(info.value, "print", "print(i)", "statement")


def test_nested_function_definition():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            def g(x):  # <- nested-def
                return x
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "nested-def", "def g(x)", "nested function")


def test_for_else():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
            else:  # <- for-else
                A[0] = 1.0
    assert_source_error(info.value, "for-else", "else", "for-else", "for i in range(N)")


def test_chained_assignment():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                A[i] = B[i] = 0.0  # <- chained
    assert_source_error(info.value, "chained", "A[i] = B[i] = 0.0", "chained assignment", caret="B[i]")


def test_divide_assign():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, M]):
            for i in range(N):
                for j in range(M):
                    A[i, j] /= 2.0  # <- div-assign
    assert_source_error(info.value, "div-assign", "A[i, j] /= 2.0", "`/=`", "A[i, j] = A[i, j] / 2.0")


def test_tuple_assignment():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                A[i], B[i] = 0.0, 1.0  # <- tuple
    assert_source_error(info.value, "tuple", "A[i], B[i]", "tuple assignment")


# ----- loops --------------------------------------------------------------------------------------
def test_loop_over_an_array():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for x in A:  # <- iter-array
                B[0] = x
    assert_source_error(info.value, "iter-array", "A", "for x in A", "range(lo, hi")


@pytest.mark.parametrize("step, marker, snippet, words", [
    ("neg", "neg-step", "-1", ("not positive",)),
    ("zero", "zero-step", "0", ("not positive",)),
    ("var", "var-step", "i", ("not an integer constant",)),
])
def test_bad_steps(step, marker, snippet, words):
    with pytest.raises(pf.SourceError) as info:
        if step == "neg":
            @pf.program
            def f(A: pf.f32[N]):
                for i in range(N - 1, -1, -1):  # <- neg-step
                    A[i] = 0.0
        elif step == "zero":
            @pf.program
            def g(A: pf.f32[N]):
                for i in range(0, N, 0):  # <- zero-step
                    A[i] = 0.0
        else:
            @pf.program
            def h(A: pf.f32[N, N]):
                for i in range(1, N):
                    for j in range(0, N, i):  # <- var-step
                        A[i, j] = 0.0
    assert_source_error(info.value, marker, snippet, *words)


def test_shadowed_loop_variable():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, N]):
            for i in range(N):
                for i in range(N):  # <- shadow
                    A[i, i] = 0.0
    assert_source_error(info.value, "shadow", "i", "shadows")


# ----- arrays, names and annotations --------------------------------------------------------------
def test_slice():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, M], B: pf.f32[N, M]):
            for i in range(N):
                B[i, :] = A[i, :]  # <- slice
    assert_source_error(info.value, "slice", ":", "slice", "single elements")


def test_wrong_number_of_subscripts():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, M], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i]  # <- rank
    assert_source_error(info.value, "rank", "A[i]", "2 dimensions", "1 subscript")


def test_double_indexing():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, M], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i][0]  # <- double-index
    assert_source_error(info.value, "double-index", "A[i][0]", "A[..., ...]")


def test_unknown_name():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = undefined_thing * 2.0  # noqa: F821  # <- unknown
    assert_source_error(info.value, "unknown", "undefined_thing", "unknown name")


def test_unknown_name_in_subscript():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                A[q] = 1.0  # noqa: F821  # <- unknown-sub
    assert_source_error(info.value, "unknown-sub", "q", "unknown name")


def test_assign_to_scalar_argument():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], alpha: pf.f32):
            alpha = 2.0  # <- scalar-arg
            for i in range(N):
                A[i] = alpha
    assert_source_error(info.value, "scalar-arg", "alpha", "scalar argument", "read-only")


def test_assign_to_loop_variable():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                i = 3  # <- assign-iter
                A[i] = 0.0
    assert_source_error(info.value, "assign-iter", "i", "loop variable")


def test_whole_array_as_value():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = A + 1.0  # <- whole-array
    assert_source_error(info.value, "whole-array", "A", "without subscripts")


def test_missing_annotation():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N],
              B):  # <- no-annotation
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "no-annotation", "B", "needs an annotation", "pf.f32[N, M]")


def test_bad_annotation():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N],
              B: list):  # <- bad-annotation
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "bad-annotation", "list", "unsupported annotation")


def test_float_in_shape():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N, 2.5]):  # <- float-shape
            for i in range(N):
                A[i, 0] = 0.0
    assert_source_error(info.value, "float-shape", "pf.f32[N, 2.5]", "2.5", "shape")


def test_non_affine_shape():
    # `pf.f32[N * M]` written without quotes fails while Python evaluates the annotation, before
    # @pf.program runs; as a string annotation the frontend evaluates it and reports where it is.
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: "pf.f32[N * M]"):  # <- product-shape
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "product-shape", "pf.f32[N * M]", "affine", caret='"pf.f32[N * M]"')


def test_unknown_intrinsic():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = np.sin(A[i])  # <- np-sin
    assert_source_error(info.value, "np-sin", "np.sin(A[i])", "unsupported call", "pf.exp")


def test_where_with_two_arguments():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = pf.where(A[i] > 0.0, A[i])  # <- where2
    assert_source_error(info.value, "where2", "pf.where(A[i] > 0.0, A[i])", "three arguments")


def test_condition_used_as_value():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i] > 0.0  # <- cond-value
    assert_source_error(info.value, "cond-value", "A[i] > 0.0", "condition", "pf.where")


def test_number_used_as_condition():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = pf.where(A[i], 1.0, 0.0)  # <- num-cond
    assert_source_error(info.value, "num-cond", "A[i]", "used as a condition")


def test_data_dependent_if():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                if A[i] > 0.0:  # <- data-if
                    B[i] = A[i]
    assert_source_error(info.value, "data-if", "A[i]", "array", "pf.where")


def test_membership_test_in_if():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                if i in (1, 2):  # <- in-test
                    A[i] = 0.0
    assert_source_error(info.value, "in-test", "i in (1, 2)", "`in`")


# ----- temporaries and local scalars --------------------------------------------------------------
def test_empty_inside_a_loop():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            for i in range(N):
                B = pf.empty((N,), pf.f32)  # <- empty-loop
                B[i] = A[i]
    assert_source_error(info.value, "empty-loop", "pf.empty((N,), pf.f32)", "pf.empty", "top level")


def test_empty_with_a_bad_dtype():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N]):
            B = pf.empty((N,), float)  # <- empty-dtype
            for i in range(N):
                B[i] = A[i]
                A[i] = B[i]
    assert_source_error(info.value, "empty-dtype", "float", "not a dtype", "pf.f32")


def test_temporary_read_before_written():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            B = pf.empty((N,), pf.f32)
            for i in range(N):
                C[i] = B[i] + A[i]  # <- tmp-uninit
            for i in range(N):
                B[i] = A[i]
    assert_source_error(info.value, "tmp-uninit", "B[i]", "temporary 'B'", "S0", "before any statement writes it")


def test_local_scalar_assigned_only_in_a_branch():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                if i > 0:
                    acc = A[i]
                C[i] = acc  # <- scalar-branch
    err = info.value
    assert_source_error(err, "scalar-branch", "acc", "local scalar 'acc'", "i=0")


def test_local_scalar_read_before_assigned():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                C[i] = acc  # noqa: F821  # <- scalar-before
                acc = A[i]  # noqa: F841
    assert_source_error(info.value, "scalar-before", "acc", "read before it is assigned")


def test_local_scalar_updated_before_assigned():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                acc += A[i]  # noqa: F821  # <- scalar-update
                C[i] = acc
    assert_source_error(info.value, "scalar-update", "acc", "updated with +=")


def test_integer_local_given_a_float():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            acc = 0
            for i in range(N):
                acc += A[i]  # <- int-local
            C[0] = acc
    assert_source_error(info.value, "int-local", "acc", "i32", "acc = 0.0")


# ----- assume= ------------------------------------------------------------------------------------
def test_assume_syntax_error():
    with pytest.raises(pf.SourceError) as info:
        @pf.program(assume="N >=")  # <- assume-syntax
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "assume-syntax", "N >=", "cannot parse", caret='"N >="')


def test_assume_non_affine():
    with pytest.raises(pf.SourceError) as info:
        @pf.program(assume="N >= 1 and N * M > 4")  # <- assume-product
        def f(A: pf.f32[N, M]):
            for i in range(N):
                A[i, 0] = 0.0
    assert_source_error(info.value, "assume-product", "N * M", "not affine")


def test_assume_unknown_size():
    with pytest.raises(pf.SourceError) as info:
        @pf.program(assume="N >= 1 and Q >= 2")  # <- assume-unknown
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "assume-unknown", "Q", "unknown size")


def test_assume_never_holds():
    with pytest.raises(pf.SourceError) as info:
        @pf.program(assume="N < 0")  # <- assume-empty
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "assume-empty", "N < 0", "never hold")


# ----- bounds ---------------------------------------------------------------------------------------
def test_out_of_bounds_read():
    with pytest.raises(pf.BoundsError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i + 1]  # <- oob-read
    text = assert_bounds_error(info.value, "oob-read", "A", "S0")
    assert "reads `A[i + 1]`" in text and "N=1" in text and "i=0" in text and "A[1]" in text


def test_out_of_bounds_write():
    with pytest.raises(pf.BoundsError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i]
            for i in range(N):
                B[i + OFFSET] = 0.0  # <- oob-write
    text = assert_bounds_error(info.value, "oob-write", "B", "S1")
    assert "writes `B[i + OFFSET]`" in text and "N=1" in text and "B[2]" in text


def test_out_of_bounds_without_assume():
    with pytest.raises(pf.BoundsError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i] + A[3]  # <- oob-assume
    text = assert_bounds_error(info.value, "oob-assume", "A", "S0")
    assert "N=1" in text and "A[3]" in text and "assume=" in text


def test_in_bounds_with_assume():
    @pf.program(assume="N >= 4")
    def f(A: pf.f32[N], B: pf.f32[N]):
        for i in range(N):
            B[i] = A[i] + A[3]

    assert f.statements[0].accesses[2].text == "A[3]"


def test_out_of_bounds_across_arrays_needs_assume():
    def build(assume):
        @pf.program(assume=assume)
        def f(A: pf.f32[M], B: pf.f32[N]):
            for i in range(N):
                B[i] = A[i]  # <- oob-two-sizes
        return f

    build("M >= N")
    with pytest.raises(pf.BoundsError) as info:
        build("M >= 1")
    text = assert_bounds_error(info.value, "oob-two-sizes", "A", "S0")
    assert "N=2" in text and "M=1" in text and "i=1" in text


def test_out_of_bounds_inside_where_names_the_fix():
    with pytest.raises(pf.BoundsError) as info:
        @pf.program
        def f(A: pf.f32[N], B: pf.f32[N]):
            for i in range(N):
                B[i] = pf.where(i < N - 1, A[i + 1], 0.0)  # <- oob-where
    text = assert_bounds_error(info.value, "oob-where", "A", "S0")
    assert "pf.where evaluates both" in text


# ----- the program as a whole -----------------------------------------------------------------------
def test_program_without_statements():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def empty_body(A: pf.f32[N]):  # <- no-statements
            for i in range(N):
                pass
    assert_source_error(info.value, "no-statements", "empty_body", "no statements", caret="def empty_body")


def test_argument_named_like_a_size():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N],
              N: pf.i32):  # noqa: F811  # <- arg-size
            for i in range(4):
                A[i] = 0.0
    assert_source_error(info.value, "arg-size", "N", "name of a size")


def test_keyword_only_arguments():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], *, B: pf.f32[N]):  # <- kwonly
            for i in range(N):
                A[i] = B[i]
    assert_source_error(info.value, "kwonly", "keyword-only", caret="def f")


def test_assume_must_be_a_string():
    with pytest.raises(pf.SourceError) as info:
        @pf.program(assume=3)  # <- assume-int
        def f(A: pf.f32[N]):
            for i in range(N):
                A[i] = 0.0
    assert_source_error(info.value, "assume-int", "not int", caret="3")


def test_lambda_is_not_a_program():
    with pytest.raises(pf.SourceError) as info:
        pf.program(lambda A: A)  # <- lambda
    err = info.value
    assert err.line == line_of("lambda") and "function definition" in str(err)
    assert_clean(err)


def test_assume_error_points_into_a_padded_string():
    with pytest.raises(pf.SourceError) as info:
        @pf.program(assume="  N >= 1 and N % M == 0")  # <- assume-padded
        def f(A: pf.f32[N, M]):
            for i in range(N):
                A[i, 0] = 0.0
    assert_source_error(info.value, "assume-padded", "N % M", "positive integer constant")


def test_uninitialised_read_caret_is_on_the_read():
    with pytest.raises(pf.SourceError) as info:
        @pf.program
        def f(A: pf.f32[N], C: pf.f32[N]):
            for i in range(N):
                if i > 0:
                    acc = A[i]
                acc = acc + A[i]  # <- caret-read
                C[i] = acc
    assert_source_error(info.value, "caret-read", "acc", "local scalar 'acc'", caret="acc + A[i]")
