"""The registry of ``polyfuse`` subcommands.

A command family is one module under ``polyfuse/cli/`` that declares its commands with :func:`command`;
``main.py`` imports the families and builds one argparse subparser per registered command, in
registration order. Adding ``schedule``, ``codegen``, ``run`` or ``bench`` is a new module with
``@command(...)`` functions and one import line in ``main.py``; nothing else changes.

A command's function receives the parsed ``argparse.Namespace``, prints its result to ``sys.stdout`` and
returns the exit status. User errors are raised as :class:`~polyfuse.errors.PolyfuseError`; ``main``
turns them into one ``polyfuse: error: ...`` line and status 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from polyfuse.cli.loading import TARGET_HELP

Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, how to add its arguments, and what it runs."""

    name: str
    help: str
    configure: Configure
    run: Run


REGISTRY: dict[str, Command] = {}


def command(name: str, help: str, configure: Configure | None = None) -> Callable[[Run], Run]:  # noqa: A002
    """Decorator registering ``fn(args) -> int`` as ``polyfuse NAME``.

    ``configure(parser)`` adds the command's own arguments; every command gets the positional
    ``FILE[::NAME]`` argument (``args.target``) unless its configure function says otherwise by
    adding its own positionals first.
    """

    def register(fn: Run) -> Run:
        if name in REGISTRY:
            raise ValueError(f"polyfuse command {name!r} registered twice")
        REGISTRY[name] = Command(name, help, configure or add_target_argument, fn)
        return fn

    return register


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    """The ``FILE[::NAME]`` positional shared by the commands that act on one program, with the C
    frontend's ``-D NAME=VALUE`` (repeatable) and ``--assume COND`` (see :func:`~polyfuse.cli.loading.load`)."""
    parser.add_argument("target", metavar="FILE[::NAME]", help=TARGET_HELP)
    parser.add_argument(
        "-D",
        dest="defines",
        type=define,
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="C files: define a macro for the preprocessor (repeatable; VALUE defaults to 1)",
    )
    parser.add_argument("--assume", metavar="COND", help='C files: a condition on the sizes, e.g. "n >= 1"')
    parser.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                        help="C files: a folder searched for #include files (repeatable)")


def define(text: str) -> tuple[str, str]:
    """An argparse type for ``-D NAME=VALUE`` (``-D NAME`` means ``NAME=1``, as for a C compiler)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME a macro name; got {text!r}")
    return name, value.strip() if sep else "1"


def csv_choice(choices: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type for ``a,b,c`` lists drawn from ``choices`` (duplicates dropped, order kept)."""

    def parse(text: str) -> tuple[str, ...]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(choices)}; got {text!r}")
        return tuple(dict.fromkeys(items))

    return parse
