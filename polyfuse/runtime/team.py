"""The team wrapper of a compiled C entry: the OpenMP thread count of one call, and one thread for a small
call that would otherwise wake a sleeping team.

Every call of C code that starts a parallel region goes through ``<entry>_in_team(threads, ...)``, a few
lines of C appended to the library's source (not part of ``Code.text``). It sets OpenMP's thread count to
``threads`` for the call (0: leave OpenMP's count) and puts it back afterwards; doing that in C rather
than through ctypes saves three foreign calls on the hot path of a prepared call.

**Cold calls.** Between two calls libgomp's workers spin for a few milliseconds (about 7 ms on the 2-core
EPYC this was measured on), then sleep on a futex. The first parallel region after that pause wakes them,
and the caller waits at the region's closing barrier until they have woken and done their share: 30 to
90 microseconds of an empty region here, with the workers bound by :mod:`polyfuse.runtime.placement`.
For a kernel whose whole warm call takes less than that, a call after a pause is faster on the calling
thread alone (PolyBench atax MEDIUM, 2 threads: 0.21 ms with the team, 0.16 ms on one thread; gcc -O3 on
the original source takes 0.19 ms).

So the wrapper times every call (``omp_get_wtime``, two reads) and keeps, per entry: the time of the last
call with the whole team, and the last time of a call after a pause with the team and on one thread. A call is *after a
pause* when no polyfuse call has ended for :data:`ASLEEP_AFTER_S` (the clock is shared by
every polyfuse library of the process, :func:`share_clock`). Such a call considers one thread only when
the last team call's time times the team size, an estimate of its one-thread time (high when that call
woke the team), is under :data:`ONE_THREAD_MAX_S`. It then tries the team once, one thread once, and afterwards takes whichever
was faster last time, trying the other again every :data:`RETRY_EVERY` considered calls (a measurement
can be an outlier, and the machine's load changes). Large calls always get the whole team.

**Short calls back to back** get the same choice, with their own record (a warm team costs no wake-up,
so the two kinds of call are not compared with each other): a call estimated under
:data:`WARM_ONE_THREAD_MAX_S` on one thread tries the team, then one thread, then keeps the faster,
looking at the other again every :data:`WARM_RETRY_EVERY` calls (at most one call in 32 pays for a look
at the slower choice). Each choice's time there is a running average, a quarter of it the newest call,
so that one call slowed by the machine does not send the next 32 to the slower choice. For a kernel this short the team's share of the work is a few tens of
microseconds, and any wait at the loop's closing barrier takes it back: PolyBench's gemver at MEDIUM took
0.11 ms on one thread and 0.13 ms with a team of two on a quiet machine, and 0.53 ms with the team in a
run where the other core was busy with another program (every parallel peer slowed alike), while one
thread kept its 0.12 ms.

The same results either way: polyfuse's parallel loops give each iteration to one thread and reduce
across SIMD lanes only, never across threads, so one thread computes exactly what the team computes
(``tests/test_cold_calls.py`` runs the 30 PolyBench kernels' 2-thread code on 1 and 2 threads). ``POLYFUSE_COLD_ONE_THREAD=0`` turns the
policy off for both kinds of call; ``OMP_WAIT_POLICY=active`` turns it off after a pause (the workers never
sleep), and ``OMP_WAIT_POLICY=passive`` (they sleep at once) makes every call count as after a pause.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

from polyfuse.codegen.code import Code
from polyfuse.runtime import placement

TEAM_SUFFIX = "_in_team"
STATS_SUFFIX = "_team_stats"
CLOCK_SUFFIX = "_share_clock"

ASLEEP_AFTER_S = 1e-3  # below libgomp's spin time on the machines measured (7 ms), so a sleeping team is never missed
ONE_THREAD_MAX_S = 1e-3  # consider one thread only for calls estimated this short on one thread
RETRY_EVERY = 8
WARM_ONE_THREAD_MAX_S = 2e-3  # back to back: consider one thread for calls estimated this short on one thread
WARM_RETRY_EVERY = 32
POLICY_VARIABLE = "POLYFUSE_COLD_ONE_THREAD"

STATS_FIELDS = ("team_s", "cold_team_s", "cold_one_s", "threads", "considered", "warm_team_s", "warm_one_s", "weighed")


def policy_on() -> bool:
    """Whether short calls may run on one thread at all (``POLYFUSE_COLD_ONE_THREAD=0``: never; read at each
    build, like the compiler flags)."""
    return os.environ.get(POLICY_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def asleep_after_s() -> float | None:
    """Idle seconds after which the team counts as asleep; None: the policy is off (read at each build,
    like the compiler flags, since the value is compiled into the wrapper)."""
    if not policy_on():
        return None
    wait = os.environ.get("OMP_WAIT_POLICY", "").strip().lower()
    if wait == "active":
        return None
    return 0.0 if wait == "passive" else ASLEEP_AFTER_S


def wrapper_source(code: Code, signature: Sequence[tuple[str, str]]) -> str:
    """C for ``<entry>_in_team(threads, ...)`` (``signature``: each argument's C type and name), with the
    cold-call policy when it is on, plus ``<entry>_team_stats`` and ``<entry>_share_clock``."""
    entry = code.entry
    params = ", ".join(["int threads", *(f"{ctype} {name}" for ctype, name in signature)])
    names = ", ".join(name for _, name in signature)
    asleep = asleep_after_s()
    paused = "0" if asleep is None else f"*pf_team_clock >= 0.0 && start - *pf_team_clock > {asleep!r}"
    on = "1" if policy_on() else "0"
    return "\n".join([
        "",
        "/* polyfuse runtime: the team wrapper (polyfuse/runtime/team.py) */",
        "int omp_get_max_threads(void);",
        "void omp_set_num_threads(int);",
        "double omp_get_wtime(void);",
        "static double pf_own_clock = -1.0;",
        "static double *pf_team_clock = &pf_own_clock;  /* when the last polyfuse call ended */",
        "static double pf_team_s = -1.0;  /* the last call with the whole team */",
        "static double pf_cold_s[2] = {-1.0, -1.0};  /* the last calls after a pause: [0] with the team, [1] on one thread */",
        "static double pf_warm_s[2] = {-1.0, -1.0};  /* the last short calls back to back: likewise */",
        "static long pf_calls = 0, pf_considered = 0, pf_weighed = 0;",
        "static int pf_last_threads = 0;",
        f"void {entry}{CLOCK_SUFFIX}(double *clock) {{ pf_team_clock = clock; }}",
        f"void {entry}{STATS_SUFFIX}(double *out)",
        "{",
        "    out[0] = pf_team_s; out[1] = pf_cold_s[0]; out[2] = pf_cold_s[1];",
        "    out[3] = pf_last_threads; out[4] = (double)pf_considered;",
        "    out[5] = pf_warm_s[0]; out[6] = pf_warm_s[1]; out[7] = (double)pf_weighed;",
        "}",
        f"void {entry}{TEAM_SUFFIX}({params})",
        "{",
        "    int previous = omp_get_max_threads();",
        "    int team = threads > 0 ? threads : previous;",
        "    double start = omp_get_wtime();",
        f"    int cold = {paused};  /* after a pause (0: the policy is off) */",
        "    /* a call short enough on one thread may skip the team: after a pause, its wake-up; back to back, its barrier */",
        "    double alone = pf_team_s * team;  /* a one-thread time, estimated from the last team call */",
        f"    int consider = {on} && team > 1 && pf_team_s >= 0.0 && alone < (cold ? {ONE_THREAD_MAX_S!r} : {WARM_ONE_THREAD_MAX_S!r});",
        "    double *times = cold ? pf_cold_s : pf_warm_s;",
        "    long *count = cold ? &pf_considered : &pf_weighed;",
        "    int one = 0;",
        "    if (consider) {",
        "        ++*count;",
        "        if (times[0] < 0.0) one = 0;",
        "        else if (times[1] < 0.0) one = 1;",
        "        else one = times[1] < times[0];",
        f"        if (*count % (cold ? {RETRY_EVERY} : {WARM_RETRY_EVERY}) == 0) one = !one;  /* look at the other choice again */",
        "    }",
        "    int use = one ? 1 : team;",
        "    if (use != previous)",
        "        omp_set_num_threads(use);",
        f"    {entry}({names});",
        "    if (use != previous)",
        "        omp_set_num_threads(previous);",
        "    double end = omp_get_wtime();",
        "    if (pf_calls++ > 0) {  /* the first call pays for page faults and loading: not a sample */",
        "        if (!one) pf_team_s = end - start;",
        "        /* back to back, the time of a choice is a running average (a quarter the newest): one call\n"
        "           slowed by the machine must not send the next 32 to the slower choice */",
        "        if (consider) times[one] = cold || times[one] < 0.0 ? end - start : 0.75 * times[one] + 0.25 * (end - start);",
        "    }",
        "    pf_last_threads = use;",
        "    *pf_team_clock = end;",
        "}",
        "",
    ])


def share_clock(library: ctypes.CDLL, entry: str) -> None:
    """Point the library's team clock at the process-wide one, so that a call right after another polyfuse
    kernel's call knows the team is awake."""
    share = getattr(library, f"{entry}{CLOCK_SUFFIX}")
    share.restype = None
    share.argtypes = [ctypes.c_void_p]
    share(placement.team_clock())


def stats(library: ctypes.CDLL, entry: str) -> dict[str, float]:
    """The wrapper's record for ``entry``: the last time with the whole team, the last times after a pause
    with the team and on one thread (negative: none yet), the thread count of the last call, and how many
    calls after a pause considered one thread. For tests and for users asking why a call ran on one thread."""
    out = (ctypes.c_double * len(STATS_FIELDS))()
    read = getattr(library, f"{entry}{STATS_SUFFIX}")
    read.restype = None
    read(out)
    return dict(zip(STATS_FIELDS, out))
