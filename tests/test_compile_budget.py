"""Compile time is bounded: each call of isl's scheduler runs under an operation budget (``isl_budget=``),
and when isl runs out -- or fails -- the scheduler falls back to a less ambitious policy (smart/max -> min
-> source order) with a PolyfuseWarning and a note in ``Schedule.notes``, never hanging and never leaking
an isl error."""

from __future__ import annotations

import importlib
import time
import warnings

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from polyfuse.schedule.fusion import scheduler
from tests.fuzz import harness


def chain_source(n: int = 60) -> str:
    """A chain of ``n`` 2-d statements through temporaries, with reversals that defeat simple fusion."""
    out = ["import polyfuse as pf", "", 'N, M = pf.params("N M")', "", "",
           '@pf.program(assume="N >= 2 and M >= 2")', "def chain(A: pf.f32[N, M], C: pf.f32[N, M]):"]
    out += [f"    T{k} = pf.empty((N, M), pf.f32)" for k in range(n - 1)]
    prev = "A"
    for k in range(n):
        dst = f"T{k}" if k < n - 1 else "C"
        other = [f"{prev}[N - 1 - i{k}, j{k}]", f"{prev}[i{k}, M - 1 - j{k}]", f"{prev}[i{k}, j{k}]"][k % 3]
        out += [f"    for i{k} in range(N):", f"        for j{k} in range(M):",
                f"            {dst}[i{k}, j{k}] = {prev}[i{k}, j{k}] * 0.5 + {other}"]
        prev = dst
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def chain60() -> pf.Program:
    prog = harness.load_source(chain_source(60), "chain")
    assert len(prog.statements) == 60
    return prog


def test_tiny_budget_falls_back_to_sequential_source_order(chain60):
    """With almost no budget even dependence analysis runs out: the program runs as written."""
    start = time.perf_counter()
    stage = 1000 * scheduler.STAGE_FACTOR
    with pytest.warns(pf.PolyfuseWarning, match=rf"dependence analysis ran out of its budget \({stage} isl operations: {scheduler.STAGE_FACTOR} x isl_budget=1000\)"):
        sched = pf.schedule(chain60, target="c", fusion="max", tile=None, isl_budget=1000)
    assert time.perf_counter() - start < 60
    assert any("fell back to the source order, run sequentially" in n for n in sched.notes), sched.notes
    assert "fell back" in sched.explain()
    assert len(sched.kernels) == 60  # source order: one kernel per statement
    assert all(k.parallel_depth == 0 for k in sched.kernels)


def test_scheduler_budget_degrades_policy_by_policy(chain60):
    chain60.dependences()  # (cached, without a budget: this test is about isl's scheduler, whatever ran before)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sched = pf.schedule(chain60, target="c", fusion="max", tile=None, isl_budget=100_000)
    said = [str(w.message) for w in caught if issubclass(w.category, pf.PolyfuseWarning)]
    assert any("isl's scheduler gave no schedule under fusion='max': it ran out of its budget (isl_budget=100000 operations)" in m
               and "fell back to fusion='min'" in m for m in said), said
    assert all(m in sched.notes for m in said)
    assert len(sched.kernels) == 60


def _burn_isl_operations(*args, **kwargs):
    """A stage that never ends on its own (as the band-flag test once did on a fuzzed program): isl work
    in a loop, stopped only by the operation budget."""
    m = isl.UnionMap("{ [i] -> [j] : 0 <= i, j < 100 }")
    while True:
        m = m.coalesce().union(m)


def test_a_stage_that_never_ends_is_cut_off(monkeypatch):
    """Not only isl's scheduler is bounded: here the legality check spins, under every policy; each
    attempt is cut off at the stage budget and the program still compiles, correctly, in source order."""
    monkeypatch.setattr(importlib.import_module("polyfuse.schedule"), "check_schedule", _burn_isl_operations)
    prog = harness.load_source(chain_source(4), "chain")
    a = np.random.default_rng(1).uniform(-1, 1, (6, 5)).astype(np.float32)
    got, want = np.zeros_like(a), np.zeros_like(a)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = pf.compile(prog, target="c", fusion="smart", tile=None, isl_budget=50_000)
        exe(A=a, C=got)  # compiles on first call
    assert time.perf_counter() - start < 60
    said = " | ".join(str(w.message) for w in caught)
    for policy in ("smart", "min", "none"):
        assert f"scheduling under fusion={policy!r} ran out of its budget" in said, said
    assert "fell back to the source order, run sequentially" in said
    assert all(k.parallel_depth == 0 for k in exe.schedule.kernels)
    pf.reference(prog)(A=a, C=want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_explicit_schedule_over_budget_is_an_error_not_a_substitute():
    prog = harness.load_source(chain_source(2), "chain")
    spec = "[N, M] -> { S0[i, j] -> [0, i, j]; S1[i, j] -> [1, i, j] }"
    with pytest.raises(pf.PolyfuseError, match="raise isl_budget="):
        pf.schedule(prog, target="c", schedule=spec, tile=None, isl_budget=10)
    assert pf.schedule(prog, target="c", schedule=spec, tile=None).kernels  # fine with the default budget


def test_fallback_result_is_correct(chain60):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pf.PolyfuseWarning)
        exe = pf.compile(chain60, target="c", fusion="smart", tile=None, isl_budget=1000)
        a = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
        got, want = np.zeros_like(a), np.zeros_like(a)
        exe(A=a, C=got)
    pf.reference(chain60)(A=a, C=want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_enough_budget_needs_no_fallback():
    prog = harness.load_source(chain_source(4), "chain")
    with warnings.catch_warnings():
        warnings.simplefilter("error", pf.PolyfuseWarning)
        sched = pf.schedule(prog, target="c", fusion="max", tile=None)
    assert not any("fell back" in n for n in sched.notes)
    assert len(sched.kernels) < 4


def test_scheduler_failure_falls_back(monkeypatch):
    """An isl failure other than the budget (e.g. "unable to carry dependences") degrades the same way."""
    prog = harness.load_source(chain_source(3), "chain")

    def failing(self, sc, options):
        raise scheduler.SchedulerFailed("it failed (unable to carry dependences)")

    monkeypatch.setattr(scheduler.IslBudget, "compute", failing)
    with pytest.warns(pf.PolyfuseWarning, match="unable to carry dependences"):
        sched = pf.schedule(prog, target="c", fusion="smart", tile=None)
    assert any("fell back to source order" in n for n in sched.notes)


def test_compile_accepts_the_budget_option():
    prog = harness.load_source(chain_source(2), "chain")
    exe = pf.compile(prog, target="c", isl_budget=None)
    a = np.ones((3, 3), np.float32)
    c = np.zeros_like(a)
    exe(A=a, C=c)
    assert np.allclose(c, 2.25)  # (1 * 0.5 + 1) * 0.5 + 1.5


@pytest.mark.slow
def test_default_budget_bounds_a_60_statement_program(chain60):
    start = time.perf_counter()
    pf.schedule(chain60, target="c", fusion="smart", tile=None)
    assert time.perf_counter() - start < 60


def test_bounded_step_falls_back_whatever_the_failure_looks_like():
    """Past the limit isl fails in ways that do not always name the quota (a count reads back as None, a
    TypeError in islpy): a bounded step still recognises it and returns its fallback, and isl works after."""
    from polyfuse.schedule.bands import within_budget

    big = isl.Set("{ [i, j] : 0 <= i < 3000 and 0 <= j < 3000 and (i + j) mod 7 = 3 }")
    ctx = isl.DEFAULT_CONTEXT
    saved = ctx.get_max_operations()
    ctx.set_max_operations(10**9)
    try:
        assert within_budget(lambda: int(big.count_val().to_python()), "fallback", limit=200) == "fallback"
        assert within_budget(lambda: 42, "fallback", limit=200) == 42
    finally:
        ctx.set_max_operations(saved)
        ctx.reset_operations()
    assert int(isl.Set("{ [i] : 0 <= i < 5 }").count_val().to_python()) == 5
