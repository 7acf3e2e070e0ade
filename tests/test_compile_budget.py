"""Compile time is bounded: each call of isl's scheduler runs under an operation budget (``isl_budget=``),
and when isl runs out -- or fails -- the scheduler falls back to a less ambitious policy (smart/max -> min
-> source order) with a PolyfuseWarning and a note in ``Schedule.notes``, never hanging and never leaking
an isl error."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.schedule import scheduler
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


def test_tiny_budget_falls_back_to_source_order(chain60):
    start = time.perf_counter()
    with pytest.warns(pf.PolyfuseWarning, match="ran out of its budget of 1000 operations"):
        sched = pf.schedule(chain60, target="c", fusion="max", tile=None, isl_budget=1000)
    assert time.perf_counter() - start < 60
    assert any("fell back to fusion='min'" in n for n in sched.notes), sched.notes
    assert any("fell back to source order" in n for n in sched.notes), sched.notes
    assert "fell back" in sched.explain()
    assert len(sched.kernels) == 60  # source order: one kernel per statement


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
