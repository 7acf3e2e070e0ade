"""Commands that transform a program without running it: ``schedule`` and ``codegen``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import islpy as isl

from polyfuse.cli.commands import add_target_argument, command
from polyfuse.cli.loading import load
from polyfuse.cli.options import add_schedule_options, given_sizes, schedule_options
from polyfuse.codegen import codegen as generate
from polyfuse.errors import PolyfuseError
from polyfuse.schedule import schedule as schedule_program
from polyfuse.schedule.model import Kernel, Schedule
from polyfuse.schedule.text import SECTION

try:  # the traffic model is optional: without it `schedule --size` prints no traffic
    from polyfuse.cost import format_traffic
except ImportError:
    format_traffic = None

SCHEDULE_TARGETS = ("c", "cuda")
INDENT = "  "
_NODE = isl.schedule_node_type
_PARAMS_PREFIX = re.compile(r"^\[[\w, ]*\] -> (?=[\[{])")


def _schedule_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_argument(parser)
    add_schedule_options(parser, SCHEDULE_TARGETS, default_target="c")


def _codegen_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_argument(parser)
    add_schedule_options(parser, SCHEDULE_TARGETS, default_target=None)
    parser.add_argument("-o", "--output", metavar="OUT", help="write the code to OUT instead of printing it")
    parser.add_argument("--resources", action="store_true",
                        help="CUDA: also print each kernel's registers, spills, shared memory and barriers (ptxas -v) and, "
                             "with every --size, its launches and theoretical occupancy")
    parser.add_argument("--arch", default="sm_90", help="the architecture --resources compiles for (default sm_90)")


def scheduled(args: argparse.Namespace) -> Schedule:
    """The program of ``args`` scheduled with its ``--target``, ``--fusion``, ``--tile`` and ``--size``."""
    program = load(args)
    options = schedule_options(args, given_sizes(args, program))
    if getattr(args, "threads", None) is not None:
        if args.backend != "c":
            raise PolyfuseError("--threads applies to the C target (the OpenMP threads of each call)")
        options["threads"] = args.threads  # (one thread: the scheduler may trade parallel loops for locality)
    return schedule_program(program, target=args.backend, **options)


@command(
    "schedule",
    "schedule a program: fusion decisions, kernels, contracted arrays, the schedule tree "
    "and (with every --size) the modelled traffic",
    configure=_schedule_arguments,
)
def schedule(args: argparse.Namespace) -> int:
    sched = scheduled(args)
    sections = [sched.explain(), format_kernels(sched), "schedule tree:\n" + format_tree(sched.tree)]
    traffic = format_schedule_traffic(sched)
    if traffic:
        sections.append(traffic)
    sections.append(f"{SECTION}\n{sched.to_text().rstrip()}")
    print("\n\n".join(sections))
    return 0


@command("codegen", "print (or write with -o) the code generated for a program", configure=_codegen_arguments)
def codegen(args: argparse.Namespace) -> int:
    sched = scheduled(args)
    if args.resources and sched.target != "cuda":
        raise PolyfuseError("--resources reports CUDA kernels: use it with --target cuda")
    code = generate(sched)
    text = code.text
    if args.output is None:
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        try:
            Path(args.output).write_text(text if text.endswith("\n") else text + "\n")
        except OSError as e:
            raise PolyfuseError(f"{args.output}: cannot write the code: {e.strerror or e}") from None
    if args.resources:
        sizes = given_sizes(args, sched.program)
        print(code.resources(sizes if set(sizes) >= set(sched.program.params) else None, args.arch))
    return 0


def format_kernels(sched: Schedule) -> str:
    """One line per kernel (statements, parallel depth, tiles, launch shape), then the contracted arrays."""
    lines = [f"kernels ({len(sched.kernels)}):"]
    lines.extend(INDENT + _kernel_line(k) for k in sched.kernels)
    contracted = ", ".join(sorted(sched.contracted)) or "none"
    lines.append(f"contracted arrays (no global buffer): {contracted}")
    return "\n".join(lines)


def _kernel_line(k: Kernel) -> str:
    parts = [f"parallel depth {k.parallel_depth}", "tiles " + ("x".join(map(str, k.tile_sizes)) if k.tile_sizes else "none")]
    if k.grid or k.block:
        parts.append(f"grid {_extent(k.grid)}, block {_extent(k.block)}")
    if k.shared_bytes:
        parts.append(f"shared {k.shared_bytes} B")
    return f"{k.name}: {', '.join(k.statements)}  ({'; '.join(parts)})"


def _extent(dims: tuple[int, ...]) -> str:
    """``(8, 4)``; "symbolic" when the extents depend on sizes not given (stored as zeros)."""
    return "(" + ", ".join(map(str, dims)) + ")" if dims and any(dims) else "symbolic (give --size)"


def format_schedule_traffic(sched: Schedule) -> str | None:
    """The modelled traffic per kernel and array when every size is known and the model is present."""
    if format_traffic is None or not hasattr(sched, "traffic") or not sched.params:
        return None
    missing = [p for p in sched.program.params if p not in sched.params]
    if missing:
        return f"traffic: not modelled (give --size for {', '.join(missing)} as well)"
    try:
        return format_traffic(sched.traffic())
    except PolyfuseError as e:  # the schedule stands without its traffic report
        return f"traffic: not modelled ({str(e).splitlines()[0]})"


def format_tree(tree: isl.Schedule) -> str:
    """The schedule tree one node per line, children indented; parameters are named once, at the top."""
    root = tree.get_root()
    params = root.get_domain().get_space()
    names = [params.get_dim_name(isl.dim_type.param, i) for i in range(params.dim(isl.dim_type.param))]
    lines = [f"params: {', '.join(names) or 'none'}"]
    _walk(root, 0, lines)
    return "\n".join(lines)


def _walk(node: isl.ScheduleNode, depth: int, lines: list[str]) -> None:
    kind = node.get_type()
    text = _describe(node, kind)
    if text is not None:
        lines.append(INDENT * depth + text)
        depth += 1
    for i in range(node.n_children()):
        _walk(node.child(i), depth, lines)


def _describe(node: isl.ScheduleNode, kind) -> str | None:
    if kind == _NODE.leaf:
        return None
    if kind == _NODE.domain:
        return f"domain {_bare(node.domain_get_domain())}"
    if kind == _NODE.band:
        n = node.band_n_member()
        flags = ["permutable"] if node.band_get_permutable() and n > 1 else []
        coincident = [str(int(node.band_member_get_coincident(i))) for i in range(n)]
        if any(c == "1" for c in coincident):
            flags.append("coincident " + ",".join(coincident))
        suffix = f" ({'; '.join(flags)})" if flags else ""
        return f"band{suffix}: {_bare(node.band_get_partial_schedule())}"
    if kind == _NODE.mark:
        return f"mark {node.mark_get_id().get_name()}"
    if kind == _NODE.filter:
        return f"filter {_bare(node.filter_get_filter())}"
    if kind == _NODE.sequence:
        return "sequence"
    if kind == _NODE.set:
        return "set (any order)"
    if kind == _NODE.context:
        return f"context {_bare(node.context_get_context())}"
    if kind == _NODE.guard:
        return f"guard {_bare(node.guard_get_guard())}"
    if kind == _NODE.extension:
        return f"extension {_bare(node.extension_get_extension())}"
    return str(kind)


def _bare(obj: object) -> str:
    """isl's text of ``obj`` without the leading ``[N, M] -> `` parameter list."""
    return _PARAMS_PREFIX.sub("", str(obj))
