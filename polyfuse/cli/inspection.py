"""Commands that look at a program without transforming it: ``show`` and ``deps``."""

from __future__ import annotations

import argparse

from polyfuse.cli.commands import add_target_argument, command, csv_choice
from polyfuse.cli.loading import load

DEP_KINDS = ("flow", "anti", "output")
DEP_FORMATS = ("text", "json", "dot")


@command("show", "print a program: statements, iteration domains, accesses and the source schedule")
def show(args: argparse.Namespace) -> int:
    print(load(args))
    return 0


def _deps_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_argument(parser)
    parser.add_argument("--format", choices=DEP_FORMATS, default="text", help="output format (default: text)")
    parser.add_argument(
        "--kind",
        type=csv_choice(DEP_KINDS),
        default=DEP_KINDS,
        metavar="KINDS",
        help="comma-separated dependence kinds to print: flow, anti, output (default: all)",
    )


@command("deps", "print the exact dependences of a program's source order", configure=_deps_arguments)
def deps(args: argparse.Namespace) -> int:
    dependences = load(args).dependences().of_kind(*args.kind)
    if args.format == "json":
        print(dependences.to_json())
    elif args.format == "dot":
        print(dependences.to_dot())
    else:
        print(dependences)
    return 0
