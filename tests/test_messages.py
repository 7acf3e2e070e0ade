"""Messages a new user found misleading (issue 13), each made accurate: budget fallbacks, traffic labels,
launch shapes without sizes, tile notes, and the C frontend's hints."""

import time
import warnings
from pathlib import Path

import pytest

import polyfuse as pf
from examples.kernels import add_exp, gemm
from polyfuse.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
N = pf.params("N")


@pf.program
def three_in_one_loop(A: pf.f32[N], B: pf.f32[N], C: pf.f32[N]):
    for i in range(N):
        A[i] = 1.0
        B[i] = 2.0
        C[i] = 3.0


R, D = pf.params("R D")


@pf.program
def transpose(x: pf.f32[R, D], y: pf.f32[D, R]):
    for i in range(R):
        for j in range(D):
            y[j, i] = x[i, j]


def quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pf.PolyfuseWarning)
        return fn(*args, **kwargs)


def test_sequential_fallback_is_blamed_on_the_budget():
    sched = quietly(pf.schedule, gemm, isl_budget=1, params={"N": 16, "K": 16, "M": 16})
    text = sched.explain()
    assert "sequential: isl's operation budget ran out" in text, text
    assert "is carried at loop depth" not in text


def test_smart_notes_name_the_policies_not_fused_and_unfused():
    notes = pf.schedule(add_exp, target="c", params={"N": 64, "M": 64}).notes
    first = next(n for n in notes if n.startswith("fusion='smart' by traffic"))
    assert "maximal fusion (1 kernel(s))" in first and "minimal fusion (2 kernel(s))" in first
    assert "unfused (" not in first
    guessed = pf.schedule(add_exp, target="c").notes
    assert any("each is taken as 1024" in n for n in guessed), guessed


def test_independent_statements_of_one_loop_are_not_called_loop_nests():
    sizes = {"N": 8192}  # (work enough for parallel kernels: tiny programs run in their source order)
    text = pf.schedule(three_in_one_loop, target="c", fusion="max", params=sizes).explain()
    assert "blocked by no dependence" not in pf.schedule(three_in_one_loop, target="c", fusion="min", params=sizes).explain()
    assert "share no data to reuse" in text and "loop nests" not in text


def test_cuda_launch_without_sizes_says_symbolic(capsys):
    text = pf.schedule(add_exp, target="cuda").explain()
    assert "grid=(symbolic: sizes not given)" in text and "grid=(0, 0)" not in text
    assert main(["schedule", f"{ROOT / 'examples' / 'kernels.py'}::add_exp", "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "grid symbolic (give --size)" in out and "(0, 0)" not in out


def test_tile_notes_count_parallel_tiles():
    notes = pf.schedule(transpose, target="c", params={"R": 256, "D": 256}).notes
    searched = [n for n in notes if n.startswith("tile search")]
    assert searched and all(" tiles," not in n for n in searched) and any("tile(s) in parallel" in n for n in searched)


TWO_SCOPS = """
void f(int n, float A[100]) {
#pragma scop
  for (int i = 0; i < n; i++) A[i] = 0;
#pragma endscop
}
void g(int n, float A[100]) {
#pragma scop
  for (int i = 0; i < n; i++) A[i] = 1;
#pragma endscop
}
"""

NO_PRAGMA = "void f(int n, float A[100]) {\n  for (int i = 0; i < n; i++) A[i] = 0;\n}\n"


def test_c_hint_names_the_command_line_syntax():
    with pytest.raises(pf.SourceError, match=r"choose one: FILE::NAME on the command line, function=NAME in pf.from_c"):
        pf.from_c(TWO_SCOPS)


def test_incomplete_assume_is_not_blamed_on_a_parenthesis():
    with pytest.raises(pf.SourceError, match=r"<assume>:1:4: C syntax error: the condition ends before its expression is complete") as info:
        pf.from_c(TWO_SCOPS, function="f", assume="n >")
    assert "`)`" not in str(info.value)


def test_missing_pragma_is_said():
    with pytest.warns(pf.PolyfuseWarning, match=r"function `f` has no `#pragma scop`: its whole body is read") as caught:
        pf.from_c(NO_PRAGMA)
    assert caught[0].filename == __file__


def test_run_checks_the_assumptions_before_compiling(capsys):
    start = time.perf_counter()
    status = main(["run", str(ROOT / "tests" / "kernels" / "jacobi-1d.c"), "-D", "N=100", "--assume", "n >= 3",
                   "--size", "tsteps=2,n=2", "--target", "c"])
    out, err = capsys.readouterr()
    assert status == 1 and "compiled in" not in out
    assert "n=2" in err and "n >= 3" in err.replace("n > 2", "n >= 3"), err
    assert time.perf_counter() - start < 30
