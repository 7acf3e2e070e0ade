"""The options shared by the commands that schedule a program, as argparse types (a malformed value is bad
usage, status 2) and the keyword arguments of ``pf.schedule`` / ``pf.compile`` they stand for.

* ``--size N=1024,M=512`` (repeatable; later values win) -> ``params={"N": 1024, "M": 512}``
* ``--tile auto`` -> ``"auto"``, ``--tile none`` -> ``None``, ``--tile 32,32`` -> ``(32, 32)``;
  ``--tile S0:32,32 --tile S2:64`` -> ``{"S0": (32, 32), "S2": (64,)}`` (the sizes of the kernel band
  holding that statement; statements not named get the automatic choice)
* ``--parallel S1:j`` / ``--map S1:i,j`` (repeatable) -> ``parallel={"S1": ("j",)}``: the loop(s) of that
  statement's kernel to run in parallel (C: the OpenMP loop; CUDA: the mapped dimensions, outermost first),
  checked like an explicit schedule (a loop that carries a dependence is refused, naming it)
* ``--isl-budget 1000000`` / ``none`` -> ``isl_budget=1000000`` / ``None`` (unbounded)
* ``--reassociate`` / ``--no-reassociate`` -> ``reassociate=True`` / ``False`` (absent: the default)
* ``--threads N`` -> ``threads=N`` (C target: OpenMP threads; absent: ``OMP_NUM_THREADS`` or every core)
* ``--tune K`` (``run`` only: it compiles) -> ``tune=K``
* ``--schedule FILE`` -> ``schedule=<the text of FILE>``: an explicit schedule, checked for legality; FILE
  may hold what ``polyfuse schedule`` printed (its "schedule text" section is read), ``sched.to_text()``,
  or an isl union map
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polyfuse.errors import PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule import schedule as schedule_program
from polyfuse.schedule.fusion.scheduler import DEFAULT_ISL_BUDGET, FUSION_POLICIES


def sizes(text: str) -> dict[str, int]:
    """An argparse type for ``N=1024,M=512``: every item ``NAME=INT`` with a non-negative integer."""
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name.isidentifier() or not value.isdigit():
            raise argparse.ArgumentTypeError(f"expected NAME=INT[,NAME=INT...], e.g. N=1024,M=512; got {text!r}")
        out[name] = int(value)
    return out


def tile(text: str) -> str | tuple[int, ...] | tuple[str, tuple[int, ...]] | None:
    """An argparse type for ``auto``, ``none``, positive sizes ``32,32``, or ``S0:32,32`` (one statement's)."""
    if text in ("auto", "none"):
        return None if text == "none" else text
    statement, sep, sizes_text = text.rpartition(":")
    items = [t.strip() for t in sizes_text.split(",")]
    if (sep and not statement.strip().isidentifier()) or not all(t.isdigit() and int(t) > 0 for t in items):
        raise argparse.ArgumentTypeError(
            f"expected auto, none, positive tile sizes like 32,32, or STATEMENT:SIZES like S0:32,32; got {text!r}"
        )
    sizes = tuple(int(t) for t in items)
    return (statement.strip(), sizes) if sep else sizes


def parallel(text: str) -> tuple[str, tuple[str, ...]]:
    """An argparse type for ``S1:j`` or ``S1:i,j`` (a statement's parallel loops by iterator name)."""
    statement, sep, names = text.partition(":")
    its = tuple(t.strip() for t in names.split(","))
    if not sep or not statement.strip().isidentifier() or not all(t.isidentifier() for t in its):
        raise argparse.ArgumentTypeError(f"expected STATEMENT:ITERATOR[,ITERATOR] like S1:j or S1:i,j; got {text!r}")
    return statement.strip(), its


def budget(text: str) -> int | None:
    """An argparse type for ``--isl-budget``: a positive number of isl operations, or ``none`` (unbounded)."""
    if text.lower() == "none":
        return None
    value = text.replace("_", "")
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of isl operations or none; got {text!r}")
    return int(value)


def positive(text: str) -> int:
    """An argparse type for a positive integer."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text!r}")
    return int(text)


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
        action="append",
        default=[],
        metavar="auto|none|T1,T2,..|S:T1,T2,..",
        help="tile sizes: chosen by the traffic model (auto, the default), none, explicit, or per statement "
        "(S0:32,32, repeatable: the band of the kernel holding S0)",
    )
    parser.add_argument(
        "--size", type=sizes, action="append", default=[], metavar="N=..,M=..", help="concrete sizes (repeatable)"
    )
    parser.add_argument(
        "--parallel", "--map", dest="parallel", type=parallel, action="append", default=[], metavar="S:I[,J]",
        help="run these loops of statement S's kernel in parallel (C: the OpenMP loop; CUDA: the mapped dimensions, "
        "outermost first); repeatable; refused, naming the dependence, where a loop carries one",
    )
    parser.add_argument(
        "--isl-budget",
        type=budget,
        default=DEFAULT_ISL_BUDGET,
        metavar="OPS|none",
        help=f"isl operations each scheduler call may take before falling back (default: {DEFAULT_ISL_BUDGET}; none: unbounded)",
    )
    parser.add_argument(
        "--reassociate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="may float reductions be reassociated (FMA, SIMD lanes, per-thread partial sums)? "
        "(default: yes; --no-reassociate keeps the source order of every operation)",
    )
    parser.add_argument(
        "--schedule", metavar="FILE", help="an explicit schedule (e.g. the output of `polyfuse schedule`, edited), checked for legality"
    )
    parser.add_argument(
        "--threads", type=positive, metavar="N", help="C target: OpenMP threads (default: OMP_NUM_THREADS, else every core)"
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


def tile_option(values: list[Any]) -> Any:
    """The ``tile=`` of the ``--tile`` values: the last plain one, or a dict of the per-statement ones."""
    if not values:
        return "auto"
    per_statement = [v for v in values if isinstance(v, tuple) and v and isinstance(v[0], str)]
    plain = [v for v in values if not (isinstance(v, tuple) and v and isinstance(v[0], str))]
    if per_statement and plain:
        raise PolyfuseError("--tile: give either one setting for every kernel (auto, none, 32,32) or per-statement sizes (S0:32,32), not both")
    if plain:
        return plain[-1]
    return {name: sizes for name, sizes in per_statement}


def schedule_options(args: argparse.Namespace, params: Mapping[str, int]) -> dict[str, Any]:
    """The keyword arguments of ``pf.schedule`` (and ``pf.compile``) the options stand for; options left
    at their defaults are left out, so each function applies its own default."""
    out: dict[str, Any] = {"fusion": args.fusion, "tile": tile_option(args.tile), "params": dict(params) or None}
    if args.isl_budget != DEFAULT_ISL_BUDGET:
        out["isl_budget"] = args.isl_budget
    if getattr(args, "parallel", None):
        out["parallel"] = dict(args.parallel)
    if args.reassociate is not None:
        out["reassociate"] = args.reassociate
    if getattr(args, "schedule", None):
        out["schedule"] = _read(args.schedule)
    accepted = inspect.signature(schedule_program).parameters
    for option, flag in (("reassociate", "--[no-]reassociate"),):
        if option in out and option not in accepted:
            raise PolyfuseError(f"{flag}: this polyfuse's pf.schedule has no {option}= option")
    return out


def compile_options(args: argparse.Namespace, params: Mapping[str, int]) -> dict[str, Any]:
    """The keyword arguments of ``pf.compile``: :func:`schedule_options` and ``tune``."""
    out = schedule_options(args, params)
    if getattr(args, "tune", None):
        out["tune"] = args.tune
    if getattr(args, "threads", None) is not None:
        out["threads"] = args.threads  # a pf.compile option: how many OpenMP threads each call runs with
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise PolyfuseError(f"--schedule {path}: cannot read it: {e.strerror or e}") from None


def _names(program: Program) -> str:
    return ", ".join(program.params) or "none"
