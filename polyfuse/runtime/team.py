"""The team wrapper of a compiled C entry: the OpenMP thread count of one call, and one thread for a small
call that would otherwise wake a sleeping team.

Every call of C code that starts a parallel region goes through ``<entry>_in_team(threads, ...)``, a few
lines of C appended to the library's source (not part of ``Code.text``). It sets OpenMP's thread count to
``threads`` for the call (0: leave OpenMP's count) and puts it back afterwards; doing that in C rather
than through ctypes saves three foreign calls on the hot path of a prepared call. The stub only calls
``polyfuse_team_begin`` and ``polyfuse_team_end``, which hold the policy below: they live in the
process-wide runtime library that also places the workers (:data:`POLICY_SOURCE`, built with
:mod:`polyfuse.runtime.placement`'s source once per compiler and flags), whose addresses :func:`link`
hands to each kernel's library when it is loaded.

**Cold calls.** Between two calls libgomp's workers spin for a few milliseconds (about 7 ms on the 2-core
EPYC this was measured on), then sleep on a futex. The first parallel region after that pause wakes them,
and the caller waits at the region's closing barrier until they have woken and done their share: 30 to
90 microseconds of an empty region here, with the workers bound by :mod:`polyfuse.runtime.placement`.
For a kernel whose whole warm call takes less than that, a call after a pause is faster on the calling
thread alone (PolyBench atax MEDIUM, 2 threads: 0.21 ms with the team, 0.16 ms on one thread; gcc -O3 on
the original source takes 0.19 ms).

So the wrapper times every call (``omp_get_wtime``, two reads) and keeps, per entry: the time of the last
call with the whole team, and the last time of a call after a pause with the team and on one thread. A call is *after a
pause* when no polyfuse call has ended for :data:`ASLEEP_AFTER_S` (the clock, in the policy library, is shared by
every polyfuse library of the process). Such a call considers one thread only when
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

TEAM_SUFFIX = "_in_team"
STATE_SUFFIX = "_team_state"
LINK_SUFFIX = "_team_link"

ASLEEP_AFTER_S = 1e-3  # below libgomp's spin time on the machines measured (7 ms), so a sleeping team is never missed
ONE_THREAD_MAX_S = 1e-3  # consider one thread only for calls estimated this short on one thread
RETRY_EVERY = 8
WARM_ONE_THREAD_MAX_S = 2e-3  # back to back: consider one thread for calls estimated this short on one thread
WARM_RETRY_EVERY = 32
POLICY_VARIABLE = "POLYFUSE_COLD_ONE_THREAD"

STATS_FIELDS = ("team_s", "cold_team_s", "cold_one_s", "threads", "considered", "warm_team_s", "warm_one_s", "weighed")
# An entry's record, one array of doubles in its library: where each field of STATS_FIELDS lives in it
# (the times, ``*_s``, start negative: none yet; the counts at 0).
_STATE_INDEX = {"team_s": 0, "cold_team_s": 1, "cold_one_s": 2, "warm_team_s": 3, "warm_one_s": 4,
                "calls": 5, "considered": 6, "weighed": 7, "threads": 8}
STATE_SIZE = len(_STATE_INDEX)
CALL_SIZE = 6  # one call's notes, from begin to end: start, previous count, count used, one, considered, cold

# The policy, compiled once per compiler and flags into the process-wide runtime library that also places
# the workers (``placement.py``), not into every kernel's: a kernel's library then carries a ten-line stub,
# about 15 ms less C compiler time per kernel on the 2-core EPYC. One clock in it serves every polyfuse
# library of the process. Its settings come from the
# stub (``pf_team_policy``, written when the kernel's library is built), in the order of POLICY_FIELDS.
POLICY_FIELDS = ("asleep_s", "one_thread_max_s", "warm_one_thread_max_s", "retry_every", "warm_retry_every", "on")
POLICY_SOURCE = """
int omp_get_max_threads(void);
void omp_set_num_threads(int);
double omp_get_wtime(void);

static double polyfuse_team_clock = -1.0;  /* when the last polyfuse call with a team ended */

/* Before a call: choose its thread count and set it. state: the entry's record; policy: the settings
   (POLICY_FIELDS in polyfuse/runtime/team.py; asleep_s negative: calls are never after a pause).
   `call` keeps what polyfuse_team_end needs. */
void polyfuse_team_begin(double *state, int threads, const double *policy, double *call)
{
    int previous = omp_get_max_threads();
    int team = threads > 0 ? threads : previous;
    double start = omp_get_wtime();
    int cold = policy[0] >= 0.0 && polyfuse_team_clock >= 0.0 && start - polyfuse_team_clock > policy[0];
    /* a call short enough on one thread may skip the team: after a pause, its wake-up; back to back, its barrier */
    double alone = state[0] * team;  /* a one-thread time, estimated from the last team call */
    int consider = policy[5] != 0.0 && team > 1 && state[0] >= 0.0 && alone < (cold ? policy[1] : policy[2]);
    double *times = cold ? state + 1 : state + 3;
    double *count = cold ? state + 6 : state + 7;
    int one = 0;
    if (consider) {
        *count += 1.0;
        if (times[0] < 0.0) one = 0;
        else if (times[1] < 0.0) one = 1;
        else one = times[1] < times[0];
        if ((long)*count % (long)(cold ? policy[3] : policy[4]) == 0) one = !one;  /* look at the other choice again */
    }
    int use = one ? 1 : team;
    if (use != previous)
        omp_set_num_threads(use);
    call[0] = start; call[1] = previous; call[2] = use; call[3] = one; call[4] = consider; call[5] = cold;
}

/* After a call: put the count back and record the call's time. */
void polyfuse_team_end(double *state, const double *call)
{
    int previous = (int)call[1], use = (int)call[2], one = (int)call[3], consider = (int)call[4], cold = (int)call[5];
    if (use != previous)
        omp_set_num_threads(previous);
    double end = omp_get_wtime();
    if (state[5]++ > 0.0) {  /* the first call pays for page faults and loading: not a sample */
        double *times = cold ? state + 1 : state + 3;
        if (!one) state[0] = end - call[0];
        /* back to back, the time of a choice is a running average (a quarter the newest): one call
           slowed by the machine must not send the next 32 to the slower choice */
        if (consider) times[one] = cold || times[one] < 0.0 ? end - call[0] : 0.75 * times[one] + 0.25 * (end - call[0]);
    }
    state[8] = use;
    polyfuse_team_clock = end;
}
"""


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
    """C for ``<entry>_in_team(threads, ...)`` (``signature``: each argument's C type and name): the entry's
    record ``<entry>_team_state``, and ``<entry>_team_link``, which :func:`link` calls with the policy
    library's two functions before any call."""
    entry = code.entry
    params = ", ".join(["int threads", *(f"{ctype} {name}" for ctype, name in signature)])
    names = ", ".join(name for _, name in signature)
    asleep = asleep_after_s()
    settings = (-1.0 if asleep is None else asleep, ONE_THREAD_MAX_S, WARM_ONE_THREAD_MAX_S, RETRY_EVERY,
                WARM_RETRY_EVERY, int(policy_on()))
    policy = ", ".join(repr(float(s)) for s in settings)
    initial = ", ".join("-1.0" if name.endswith("_s") else "0.0" for name in _STATE_INDEX)
    return "\n".join([
        "",
        "/* polyfuse runtime: the team wrapper (polyfuse/runtime/team.py); the policy is in the runtime library */",
        "typedef void pf_team_begin_fn(double *, int, const double *, double *);",
        "typedef void pf_team_end_fn(double *, const double *);",
        "static pf_team_begin_fn *pf_team_begin;",
        "static pf_team_end_fn *pf_team_end;",
        f"static const double pf_team_policy[{len(POLICY_FIELDS)}] = {{{policy}}};  /* {', '.join(POLICY_FIELDS)} */",
        f"double {entry}{STATE_SUFFIX}[{STATE_SIZE}] = {{{initial}}};",
        f"void {entry}{LINK_SUFFIX}(pf_team_begin_fn *begin, pf_team_end_fn *end) {{ pf_team_begin = begin; pf_team_end = end; }}",
        f"void {entry}{TEAM_SUFFIX}({params})",
        "{",
        f"    double call[{CALL_SIZE}];",
        f"    pf_team_begin({entry}{STATE_SUFFIX}, threads, pf_team_policy, call);",
        f"    {entry}({names});",
        f"    pf_team_end({entry}{STATE_SUFFIX}, call);",
        "}",
        "",
    ])


def link(library: ctypes.CDLL, entry: str, runtime: ctypes.CDLL) -> None:
    """Give the library's wrapper the policy's functions in ``runtime``, the process-wide library built from
    :data:`POLICY_SOURCE` (``placement.openmp()``), whose clock every polyfuse library shares, so that a
    call right after another polyfuse kernel's knows the team is awake."""
    connect = getattr(library, f"{entry}{LINK_SUFFIX}")
    connect.restype = None
    connect.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    connect(ctypes.cast(runtime.polyfuse_team_begin, ctypes.c_void_p), ctypes.cast(runtime.polyfuse_team_end, ctypes.c_void_p))


def stats(library: ctypes.CDLL, entry: str) -> dict[str, float]:
    """The wrapper's record for ``entry``: the last time with the whole team, the last times after a pause
    with the team and on one thread (negative: none yet), the thread count of the last call, and how many
    calls after a pause considered one thread. For tests and for users asking why a call ran on one thread."""
    state = (ctypes.c_double * STATE_SIZE).in_dll(library, f"{entry}{STATE_SUFFIX}")
    return {field: state[_STATE_INDEX[field]] for field in STATS_FIELDS}
