"""The options shared by the commands that schedule a program: ``--fusion``, ``--tile``, ``--target`` and
``--size``, as argparse types (a malformed value is bad usage, status 2) and the keyword arguments of
``pf.schedule`` / ``pf.compile`` they stand for.

* ``--size N=1024,M=512`` (repeatable; later values win) -> ``{"N": 1024, "M": 512}``
* ``--tile auto`` -> ``"auto"``, ``--tile none`` -> ``None``, ``--tile 32,32`` -> ``(32, 32)``
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from polyfuse.errors import PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.scheduler import FUSION_POLICIES


def sizes(text: str) -> dict[str, int]:
    """An argparse type for ``N=1024,M=512``: every item ``NAME=INT`` with a non-negative integer."""
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name.isidentifier() or not value.isdigit():
            raise argparse.ArgumentTypeError(f"expected NAME=INT[,NAME=INT...], e.g. N=1024,M=512; got {text!r}")
        out[name] = int(value)
    return out


def tile(text: str) -> str | tuple[int, ...] | None:
    """An argparse type for ``auto``, ``none`` or positive sizes ``32,32``."""
    if text in ("auto", "none"):
        return None if text == "none" else text
    items = [t.strip() for t in text.split(",")]
    if not all(t.isdigit() and int(t) > 0 for t in items):
        raise argparse.ArgumentTypeError(f"expected auto, none or positive tile sizes like 32,32; got {text!r}")
    return tuple(int(t) for t in items)


def add_schedule_options(parser: argparse.ArgumentParser, targets: tuple[str, ...], default_target: str | None) -> None:
    """``--target`` (``args.backend``; required when ``default_target`` is None), ``--fusion``, ``--tile`` and ``--size``."""
    required = default_target is None
    default_text = "" if required else f" (default: {default_target})"
    parser.add_argument(
        "--target", dest="backend", choices=targets, default=default_target, required=required, help=f"back end{default_text}"
    )
    parser.add_argument("--fusion", choices=FUSION_POLICIES, default="smart", help="fusion policy (default: smart)")
    parser.add_argument(
        "--tile",
        type=tile,
        default="auto",
        metavar="auto|none|T1,T2,...",
        help="tile sizes: chosen by the traffic model (auto, the default), none, or explicit",
    )
    parser.add_argument(
        "--size", type=sizes, action="append", default=[], metavar="N=..,M=..", help="concrete sizes (repeatable)"
    )


def given_sizes(args: argparse.Namespace, program: Program) -> dict[str, int]:
    """The ``--size`` values, merged; a name that is not one of ``program``'s sizes is an error."""
    merged: dict[str, int] = {}
    for chunk in args.size:
        merged.update(chunk)
    unknown = [n for n in merged if n not in program.params]
    if unknown:
        raise PolyfuseError(
            f"--size names {', '.join(unknown)}, which {program.name} does not have; its sizes: {_names(program)}"
        )
    return merged


def all_sizes(args: argparse.Namespace, program: Program) -> dict[str, int]:
    """The ``--size`` values, which must give every size of ``program``."""
    values = given_sizes(args, program)
    missing = [p for p in program.params if p not in values]
    if missing:
        raise PolyfuseError(f"{program.name} needs --size for {', '.join(missing)} (its sizes: {_names(program)})")
    return values


def schedule_options(args: argparse.Namespace, params: Mapping[str, int]) -> dict[str, Any]:
    """The keyword arguments of ``pf.schedule`` (and ``pf.compile``) the options stand for."""
    return {"fusion": args.fusion, "tile": args.tile, "params": dict(params) or None}


def _names(program: Program) -> str:
    return ", ".join(program.params) or "none"
