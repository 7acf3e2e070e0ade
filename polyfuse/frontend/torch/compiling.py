"""Compiling a Program that came from PyTorch, with a bound on the scheduler's wall-clock time.

isl's scheduler can take minutes on a whole transformer block at realistic sizes (its operation budget
does not bound every phase of the whole-component search). A model must never hang ``torch.compile``, so
:func:`compile_program` computes the ``fusion="smart"`` schedule in a forked child process with a time
limit; the child returns the finished schedule pickled, which the parent compiles exactly as it is
(``compile_schedule``: register micro-tiles and all; recompiling its text as an explicit schedule would map
and tile it again, and lost the conv-bn-relu block's micro-tile: 25x slower). Past the limit the child is
killed and ``fusion="min"`` is tried the same way, then the source order (``fusion="none"``, which needs
no scheduler run). ``Compiled.fusion`` says which one was taken and ``explain`` keeps the chosen
schedule's own ``explain()`` text (the one of the explicit schedule would only say "explicit").
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
import warnings
from dataclasses import dataclass
from typing import Any

from polyfuse.compile import Executable, compile_schedule
from polyfuse.compile import compile as pf_compile
from polyfuse.errors import PolyfuseWarning
from polyfuse.frontend.torch.report import LOG
from polyfuse.ir.program import Program
from polyfuse.schedule import schedule as pf_schedule
from polyfuse.schedule.model import Schedule

DEFAULT_TIME_LIMIT = 120.0
"""Seconds the scheduler may take per fusion policy before the next, cheaper one is tried."""


@dataclass
class Compiled:
    """An executable and how it was scheduled: ``fusion`` taken, the scheduler's ``explain()`` text, and
    the kernel count."""

    exe: Executable
    fusion: str
    explain: str
    kernels: int
    seconds: float


def compile_program(program: Program, time_limit: float | None = DEFAULT_TIME_LIMIT, **options: Any) -> Compiled:
    """``pf.compile(program, target="c")`` with each scheduler run bounded by ``time_limit`` seconds
    (``None``: unbounded, in this process); ``options`` go to ``pf.schedule`` (not ``fusion``)."""
    start = time.perf_counter()
    if time_limit is None:
        exe = pf_compile(program, target="c", **options)
        sched = exe.specialise({}).schedule if not program.params else exe.schedule
        return Compiled(exe, "smart", sched.explain(), len(sched.kernels), time.perf_counter() - start)
    for fusion in ("smart", "min"):
        got = _bounded(program, fusion, options, time_limit)
        if got is not None:
            sched, explain, kernels = got
            exe = compile_schedule(sched)  # built now, at the schedule's sizes (none: symbolic)
            return Compiled(exe, fusion, explain, kernels, time.perf_counter() - start)
        message = f"{program.name}: fusion={fusion!r} took more than {time_limit:g} s to schedule; trying a cheaper policy"
        LOG.warning(message)
        warnings.warn(message, PolyfuseWarning, stacklevel=2)
    exe = pf_compile(program, target="c", fusion="none", **options)
    sched = exe.specialise({}).schedule if not program.params else exe.schedule
    return Compiled(exe, "none", sched.explain(), len(sched.kernels), time.perf_counter() - start)


def _bounded(program: Program, fusion: str, options: dict[str, Any], limit: float) -> tuple[Schedule, str, int] | None:
    """(schedule, explain text, kernel count) from a child process, or None past ``limit`` seconds."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: schedule, send the result, exit without running the parent's cleanup
        os.close(read)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sched = pf_schedule(program, target="c", fusion=fusion, **options)
                payload = pickle.dumps((sched, sched.explain(), len(sched.kernels)))
        except BaseException as e:  # noqa: BLE001  (reported to the parent, which raises it)
            payload = pickle.dumps(e if _picklable(e) else RuntimeError(repr(e)))
        with os.fdopen(write, "wb") as f:
            f.write(payload)
        os._exit(0)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit
    with os.fdopen(read, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
            chunk = os.read(f.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    result = pickle.loads(b"".join(chunks))
    if isinstance(result, BaseException):
        raise result
    return result


def _picklable(e: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(e))
        return True
    except Exception:  # noqa: BLE001
        return False
