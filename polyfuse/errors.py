"""The exceptions polyfuse raises.

Every failure a user can cause has its own class under :class:`PolyfuseError`, and every message points
at the user's code (file, line, construct), never at polyfuse's internals. The CLI prints ``str(error)``
as one line and exits with status 1.

Errors raised through the public API end their traceback at the user's call: every public entry point is
wrapped in :func:`api_boundary`, which drops polyfuse's own frames from the traceback of a
:class:`PolyfuseError` before it leaves (as JAX and TensorFlow do). ``POLYFUSE_TRACEBACK=full`` in the
environment keeps them, for debugging polyfuse itself. Warnings go through :func:`warn`, which attributes
them to the first frame outside polyfuse, the user's call.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

TRACEBACK_ENV = "POLYFUSE_TRACEBACK"
"""Environment variable: ``full`` shows polyfuse's internal frames in tracebacks (default: hidden)."""

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_F = TypeVar("_F", bound=Callable[..., Any])


class PolyfuseError(Exception):
    """Root of every error polyfuse raises on purpose."""


class SourceError(PolyfuseError):
    """An unsupported or non-affine construct in a program's source.

    The message carries ``file:line:col``, what is wrong, what is allowed instead, and the offending line
    with a caret under the construct.
    """

    def __init__(
        self,
        message: str,
        *,
        filename: str | None = None,
        line: int | None = None,
        col: int | None = None,
        source_line: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.reason = message
        self.filename = filename
        self.line = line
        self.col = col
        self.source_line = source_line
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.filename is not None or self.line is not None:
            where = f"{self.filename or '<source>'}:{self.line or '?'}:{(self.col or 0) + 1}: "
        text = f"{where}{self.reason}"
        if self.hint:
            text += f" ({self.hint})"
        if self.source_line is not None:
            stripped = self.source_line.rstrip("\n")
            text += f"\n    {stripped}"
            if self.col is not None:
                text += "\n    " + " " * self.col + "^"
        return text


class BoundsError(PolyfuseError):
    """An access that can fall outside its array for some sizes the context allows."""


class ShapeError(PolyfuseError):
    """Call-time arrays whose shapes, dtypes or layout do not match the program, or missing sizes."""


class IllegalTransformError(PolyfuseError):
    """A schedule that violates a dependence; the message names it and a witness pair of instances."""


class CodegenError(PolyfuseError):
    """Code generation or native compilation failed."""


class RuntimeUnavailable(PolyfuseError):
    """The requested backend cannot run here (no GPU, no pycuda, no C compiler)."""


class SimulationError(PolyfuseError):
    """The CUDA simulator (``target="cuda-sim"``) found a data race, an out-of-bounds index or a barrier
    that not every thread reaches; ``issues`` lists what it found (the first 20), ``count`` how many in all."""

    def __init__(self, issues: Sequence[str], count: int) -> None:
        self.issues = list(issues)
        self.count = count
        more = f"\n  ... and {count - len(issues)} more" if count > len(issues) else ""
        super().__init__(f"the CUDA simulator found {count} problem(s):\n  " + "\n  ".join(self.issues) + more)


class UnsupportedOperator(PolyfuseError):
    """A framework operator (a PyTorch ATen op) that polyfuse cannot express, or not with these arguments;
    ``pf.from_torch`` reports it, the ``torch.compile`` backend leaves the operator to eager PyTorch."""


class PolyfuseWarning(UserWarning):
    """Something polyfuse did differently from what was asked, e.g. a less ambitious fusion policy after
    isl's scheduler ran out of its operation budget; the result is still correct."""


def internal_file(filename: str) -> bool:
    """Whether ``filename`` (a code object's) is one of polyfuse's own modules."""
    return filename.startswith(PACKAGE_DIR) or filename.startswith("<polyfuse ")


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the frames of polyfuse's own modules (a new chain; the frames are shared)."""
    kept = []
    while tb is not None:
        if not internal_file(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = types.TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def api_boundary(fn: _F) -> _F:
    """Wrap a public entry point so that a :class:`PolyfuseError` it raises shows the user's frames only.

    The error is re-raised with a bare ``raise`` after its ``__traceback__`` was replaced: from Python 3.11
    a bare re-raise does not add the re-raising frame, so the traceback printed ends at the user's call.
    The cost when nothing is raised is one ``try`` (free in CPython 3.11).
    """

    @functools.wraps(fn)
    def boundary(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PolyfuseError as e:
            if os.environ.get(TRACEBACK_ENV, "").lower() != "full":
                e.__traceback__ = user_traceback(e.__traceback__)
                e.__suppress_context__ = e.__cause__ is None or e.__suppress_context__
            raise

    boundary.__polyfuse_boundary__ = True  # type: ignore[attr-defined]
    return boundary  # type: ignore[return-value]


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` called by this function's caller that names the first
    frame outside polyfuse (the user's call); 2, the caller's caller, when every frame is polyfuse's."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and internal_file(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def warn(message: str, category: type[Warning] = PolyfuseWarning) -> None:
    """``warnings.warn(message)`` attributed to the user's call site rather than to polyfuse's code."""
    warnings.warn(message, category, stacklevel=user_stacklevel())


def caller_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """``frame`` or, when it is an :func:`api_boundary` wrapper's, the first frame above the wrappers."""
    while frame is not None and frame.f_code is _BOUNDARY_CODE:
        frame = frame.f_back
    return frame


def user_source_error(message: str, construct: str | None = None, hint: str | None = None) -> SourceError:
    """A :class:`SourceError` located at the user's line: the first frame outside polyfuse (e.g. the line
    holding ``pf.f32[N * M]`` or ``pf.params("1N")``), with that line's text and a caret under
    ``construct`` where the line contains it."""
    frame = sys._getframe(1)
    while frame is not None and internal_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return SourceError(message, hint=hint)
    filename, line = frame.f_code.co_filename, frame.f_lineno
    text = linecache.getline(filename, line) or None
    col = text.find(construct) if text and construct else -1
    return SourceError(message, filename=filename, line=line, col=col if col >= 0 else None, source_line=text, hint=hint)


_BOUNDARY_CODE = api_boundary(lambda: None).__code__
