"""The exceptions polyfuse raises.

Every failure a user can cause has its own class under :class:`PolyfuseError`, and every message points
at the user's code (file, line, construct), never at polyfuse's internals. The CLI prints ``str(error)``
as one line and exits with status 1.
"""

from __future__ import annotations


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


class UnsupportedOperator(PolyfuseError):
    """A framework operator (a PyTorch ATen op) that polyfuse cannot express, or not with these arguments;
    ``pf.from_torch`` reports it, the ``torch.compile`` backend leaves the operator to eager PyTorch."""


class PolyfuseWarning(UserWarning):
    """Something polyfuse did differently from what was asked, e.g. a less ambitious fusion policy after
    isl's scheduler ran out of its operation budget; the result is still correct."""
