"""C target: the team wrapper's cold-call policy (``polyfuse.runtime.team``). After an idle pause a short
call may run on the calling thread alone instead of waking OpenMP's sleeping workers; it tries both once,
then keeps the faster, and computes exactly what the team computes. Short calls back to back get the same
choice with their own record (turned off here except in the tests of it).

The pause is made explicit: the tests compile with a long ``ASLEEP_AFTER_S`` (compiled into the wrapper)
and sleep well past it, so a slow test machine cannot turn a back-to-back call into a cold one; and the
size limit is lifted except where it is the point."""

from __future__ import annotations

import dataclasses
import time
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from benchmarks import polybench
from polyfuse.runtime import team
from tests.kernels import BY_NAME, KERNELS, inputs

PAUSE_S = 0.5
ASLEEP_S = 0.25
M, N = pf.params("M N")


def _program(name: str) -> pf.Program:
    """A short elementwise kernel with work enough for an OpenMP loop at 96 x 97 (tiny work runs serially)."""
    g = pf.Graph(name)
    x = g.input("x", (M, N), pf.f32)
    return g.build(y=pf.ops.exp(pf.ops.mul(x, x)))


def _compiled(name: str, monkeypatch: pytest.MonkeyPatch, one_thread_max_s: float = 10.0,
              warm_max_s: float = 0.0) -> tuple[pf.Executable, np.ndarray]:
    """Compiled for 2 threads, with the pause and the size limits compiled into the wrapper (by default every
    call after a pause counts as short, a loaded test machine makes warm calls slow, and no call back to
    back does)."""
    monkeypatch.setattr(team, "ASLEEP_AFTER_S", ASLEEP_S)
    monkeypatch.setattr(team, "ONE_THREAD_MAX_S", one_thread_max_s)
    monkeypatch.setattr(team, "WARM_ONE_THREAD_MAX_S", warm_max_s)
    exe = pf.compile(_program(name), target="c", params={"M": 96, "N": 97}, threads=2)
    assert "#pragma omp parallel" in exe.code.text
    x = np.linspace(-1.5, 1.5, 96 * 97, dtype=np.float32).reshape(96, 97)
    return exe, x


def _warm_then_paused(run, paused: int) -> None:
    """Four calls back to back (the first is not a sample), then ``paused`` calls each after a pause."""
    for _ in range(4):
        run()
    for _ in range(paused):
        time.sleep(PAUSE_S)
        run()


def _stats(exe: pf.Executable) -> dict[str, float]:
    function = exe.compiled.function
    return team.stats(function.library, function.code.entry)


def test_a_short_call_after_a_pause_tries_one_thread_then_keeps_the_faster(monkeypatch):
    exe, x = _compiled("cold_policy", monkeypatch)
    y = np.empty_like(x)
    run = exe.prepare(x, y)
    for _ in range(4):  # the first call (page faults) is not a sample; then warm calls, with the team
        run()
    s = _stats(exe)
    assert s["threads"] == 2 and s["team_s"] > 0 and s["considered"] == 0
    team_result = y.copy()
    np.testing.assert_allclose(team_result, np.exp(x * x), rtol=2e-6)

    time.sleep(PAUSE_S)
    y[:] = 0
    run()  # after a pause: the team first
    s = _stats(exe)
    assert s["threads"] == 2 and s["considered"] == 1 and s["cold_team_s"] > 0 and s["cold_one_s"] < 0

    time.sleep(PAUSE_S)
    y[:] = 0
    run()  # then one thread, with the same result bit for bit
    s = _stats(exe)
    assert s["threads"] == 1 and s["considered"] == 2 and s["cold_one_s"] > 0
    np.testing.assert_array_equal(y, team_result)

    faster = 1 if s["cold_one_s"] < s["cold_team_s"] else 2  # (the times this call decides by: it then records its own)
    time.sleep(PAUSE_S)
    run()  # then whichever was faster last time
    s = _stats(exe)
    assert s["considered"] == 3
    assert s["threads"] == faster
    run()  # back to back: the team again
    assert _stats(exe)["threads"] == 2
    np.testing.assert_array_equal(y, team_result)


def test_plain_calls_go_through_the_same_policy(monkeypatch):
    exe, x = _compiled("cold_plain", monkeypatch)
    for _ in range(4):
        exe(x)
    for _ in range(2):
        time.sleep(PAUSE_S)
        got = exe(x)
    s = _stats(exe)
    assert s["considered"] == 2 and s["threads"] == 1  # the second call after a pause tries one thread
    np.testing.assert_allclose(got, np.exp(x * x), rtol=2e-6)


def test_short_calls_back_to_back_try_one_thread_then_keep_the_faster(monkeypatch):
    monkeypatch.setattr(team, "WARM_RETRY_EVERY", 4)
    exe, x = _compiled("warm_policy", monkeypatch, warm_max_s=10.0)
    y = np.empty_like(x)
    run = exe.prepare(x, y)
    run()  # (not a sample)
    run()  # no team time yet: the team
    s = _stats(exe)
    assert s["threads"] == 2 and s["weighed"] == 0 and s["team_s"] > 0
    team_result = y.copy()
    run()  # the team first
    s = _stats(exe)
    assert s["threads"] == 2 and s["weighed"] == 1 and s["warm_team_s"] > 0 and s["warm_one_s"] < 0
    y[:] = 0
    run()  # then one thread, with the same result bit for bit
    s = _stats(exe)
    assert s["threads"] == 1 and s["weighed"] == 2 and s["warm_one_s"] > 0
    np.testing.assert_array_equal(y, team_result)
    faster = 1 if s["warm_one_s"] < s["warm_team_s"] else 2
    run()  # then whichever was faster last time
    s = _stats(exe)
    assert s["threads"] == faster and s["weighed"] == 3
    faster = 1 if s["warm_one_s"] < s["warm_team_s"] else 2
    run()  # the fourth: a look at the other choice
    s = _stats(exe)
    assert s["threads"] == 3 - faster and s["weighed"] == 4 and s["considered"] == 0
    np.testing.assert_array_equal(y, team_result)


def test_back_to_back_calls_estimated_long_keep_the_team(monkeypatch):
    exe, x = _compiled("warm_long", monkeypatch, warm_max_s=0.0)
    run = exe.prepare(x)
    for _ in range(6):
        run()
    s = _stats(exe)
    assert s["weighed"] == 0 and s["threads"] == 2


def test_long_calls_never_leave_the_team(monkeypatch):
    exe, x = _compiled("cold_long", monkeypatch, one_thread_max_s=0.0)  # every call counts as long
    _warm_then_paused(exe.prepare(x), paused=3)
    assert _stats(exe)["considered"] == 0 and _stats(exe)["threads"] == 2  # (one thread is only ever tried when considered)


def test_a_call_right_after_another_kernel_finds_the_team_awake(monkeypatch):
    """The clock of the last call with a team is shared by every polyfuse library of the process."""
    first, x = _compiled("cold_shared_a", monkeypatch)
    second, _ = _compiled("cold_shared_b", monkeypatch)
    assert first.compiled.function.library is not second.compiled.function.library
    run_first, run_second = first.prepare(x), second.prepare(x)
    for _ in range(4):
        run_second()
    time.sleep(PAUSE_S)
    run_first()  # wakes the team
    run_second()  # so this call is not after a pause
    assert _stats(second)["considered"] == 0 and _stats(first)["considered"] == 0  # first had no team sample yet


def test_with_passive_waiting_every_call_counts_as_after_a_pause(monkeypatch):
    """``OMP_WAIT_POLICY=passive``: the workers sleep at once, so even back-to-back calls consider one thread."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    exe, x = _compiled("cold_passive", monkeypatch)
    run = exe.prepare(x)
    for _ in range(4):  # not a sample; no team time yet; the team; one thread
        run()
    s = _stats(exe)
    assert s["considered"] == 2 and s["threads"] == 1 and s["cold_team_s"] > 0 and s["cold_one_s"] > 0


def test_the_policy_is_off_on_request_or_when_the_workers_never_sleep(monkeypatch):
    monkeypatch.setenv(team.POLICY_VARIABLE, "0")
    assert team.asleep_after_s() is None
    exe, x = _compiled("cold_off", monkeypatch, warm_max_s=10.0)
    _warm_then_paused(exe.prepare(x), paused=2)
    assert _stats(exe)["considered"] == 0 and _stats(exe)["weighed"] == 0 and _stats(exe)["threads"] == 2
    monkeypatch.delenv(team.POLICY_VARIABLE)
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    assert team.asleep_after_s() is None
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert team.asleep_after_s() == 0.0
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert team.asleep_after_s() == team.ASLEEP_AFTER_S


@pytest.mark.parametrize("name", [k.name for k in KERNELS])
def test_one_thread_computes_exactly_what_the_team_computes(name):
    """What lets the policy run a call on one thread: the code built for a team of two gives, on one thread,
    the same bits (PolyBench sizes SMALL, where the kernels have their parallel loops; each iteration of a
    parallel loop belongs to one thread and nothing is reduced across threads)."""
    dims = dict(polybench.SIZES[name]["SMALL"])
    kernel = dataclasses.replace(BY_NAME[name], sizes=MappingProxyType(dims))
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
    params = {p: dims[p.upper()] for p in prog.params}
    exe = pf.compile(prog, target="c", params=params, threads=2)
    args = inputs(kernel)
    results = []
    for threads in (2, 1):
        values = {n: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for n, v in args.items() if n in prog.arguments}
        exe.threads = threads  # the same compiled code, called with this many threads
        exe(**values, **params)
        results.append(values)
    for n, v in results[0].items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(results[1][n], v, err_msg=f"{name}: {n}")
