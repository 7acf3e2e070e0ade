"""Progress lines on stderr for compiles and runs that take a while.

A *task* is one long user-visible operation (compiling a program, scheduling it, a ``polyfuse run``); a
*step* is what it is doing now (a pipeline stage, the fusion policy being tried with its isl budget, the C
compiler, the reference check). Nothing is printed for a task that finishes within :data:`THRESHOLD_S`
seconds; after that each new step prints one line, and the end of the task one more::

    polyfuse: compiling jacobi_2d [2.3 s] scheduling under fusion='smart' (isl budget 10000000 operations)
    polyfuse: compiling jacobi_2d [4.0 s] C compiler
    polyfuse: compiling jacobi_2d: done in 4.6 s

Lines go to stderr only when it is a terminal, unless ``POLYFUSE_PROGRESS=1`` (always) or ``0`` (never);
the CLI's ``--quiet`` turns them off (:func:`silenced`). Tasks nest: a step inside a nested task reports
under the outermost one, so a compile shows one stream of lines.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

THRESHOLD_S = 2.0
"""Seconds a task runs silently before its steps are reported."""
ENV = "POLYFUSE_PROGRESS"

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass
class _Task:
    label: str
    start: float = field(default_factory=time.perf_counter)
    printed: bool = False
    last: str = ""


_current: ContextVar[_Task | None] = ContextVar("polyfuse_progress_task", default=None)
_quiet: ContextVar[bool] = ContextVar("polyfuse_progress_quiet", default=False)


def enabled() -> bool:
    """Whether progress lines are printed here and now."""
    if _quiet.get():
        return False
    forced = os.environ.get(ENV, "")
    if forced in ("0", "1"):
        return forced == "1"
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def task(label: str) -> Iterator[None]:
    """Report the steps taken inside as ``label``'s (no-op inside another task)."""
    if _current.get() is not None:
        yield
        return
    current = _Task(label)
    token = _current.set(current)
    try:
        yield
    finally:
        _current.reset(token)
        if current.printed and enabled():
            _print(f"{current.label}: done in {time.perf_counter() - current.start:.1f} s")


def step(what: str) -> None:
    """The current task is now doing ``what``; printed once the task has run :data:`THRESHOLD_S`."""
    current = _current.get()
    if current is None or what == current.last:
        return
    current.last = what
    elapsed = time.perf_counter() - current.start
    if elapsed >= THRESHOLD_S and enabled():
        current.printed = True
        _print(f"{current.label} [{elapsed:.1f} s] {what}")


def reported(verb: str) -> Callable[[_F], _F]:
    """Decorator: run a function whose first argument is a program (or has one as ``.program``, like an
    executable's method) as the task ``"{verb} {program name}"``."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else None
            name = getattr(first, "name", None) or getattr(getattr(first, "program", None), "name", "")
            with task(f"{verb} {name}".strip()):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap


@contextmanager
def silenced() -> Iterator[None]:
    """No progress lines inside (the CLI's ``--quiet``)."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def _print(text: str) -> None:
    print(f"polyfuse: {text}", file=sys.stderr, flush=True)
