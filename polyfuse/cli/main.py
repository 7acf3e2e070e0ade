"""``polyfuse``: the command line.

Exit status: 0 on success; 1 on a user error, reported as one line ``polyfuse: error: <message>`` on
stderr (the whole message, which for a :class:`~polyfuse.errors.SourceError` includes the offending line
and a caret, with ``--verbose``); 2 on bad usage (argparse). Subcommands live in command-family modules
that register themselves in :mod:`polyfuse.cli.commands`; importing a family here is all it takes to add
one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from importlib import metadata

from polyfuse import progress
from polyfuse.cli import inspection, running, scheduling
from polyfuse.cli.commands import REGISTRY
from polyfuse.errors import PolyfuseError, PolyfuseWarning

# Command families, in the order their commands appear in --help.
FAMILIES = (inspection, scheduling, running)

PROG = "polyfuse"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="polyfuse: a polyhedral optimizer for affine loop programs.",
        epilog="FILE[::NAME]: a .py file and the name of a @pf.program in it, e.g. examples/kernels.py::gemm",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="print whole error messages (source line and caret)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print no warnings or progress lines on stderr (errors still); progress shows on a terminal only")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in REGISTRY.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        cmd.configure(p)
        p.set_defaults(run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``polyfuse`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or bad usage (2)
        return int(e.code or 0)
    try:
        with warnings.catch_warnings(), contextlib.ExitStack() as stack:
            if args.quiet:
                warnings.simplefilter("ignore", PolyfuseWarning)
                stack.enter_context(progress.silenced())
            else:
                warnings.simplefilter("always", PolyfuseWarning)
                warnings.showwarning = _show_warning
            return args.run(args)
    except PolyfuseError as e:
        text = str(e) if args.verbose else (str(e).splitlines() or [type(e).__name__])[0]
        print(f"{PROG}: error: {text}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `polyfuse deps ... | head`: the reader left; stop quietly instead of a traceback at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def version() -> str:
    """The installed polyfuse's version (``pyproject.toml``), or "unknown" outside an installation."""
    try:
        return metadata.version("polyfuse")
    except metadata.PackageNotFoundError:
        return "unknown"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 - warnings' hook
    """A warning as one line ``polyfuse: warning: ...`` (the CLI's user did not write the calling code)."""
    if issubclass(category, PolyfuseWarning):
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    else:
        print(warnings.formatwarning(message, category, filename, lineno, line), end="", file=sys.stderr)


def run() -> None:
    """Entry point of ``python -m polyfuse``."""
    sys.exit(main())
