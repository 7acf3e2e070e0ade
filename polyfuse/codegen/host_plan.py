"""The host side of a CUDA program: a small tree of steps (loops, guards, kernel launches) run in Python.

Everything above the ``"kernel"`` marks of a schedule tree is host code: sequences, guards and host loops
(bands that carry dependences around kernel launches, such as a stencil's time loop). The CUDA back end
turns that part of the isl AST into a :class:`HostPlan`, an immutable value whose expressions are Python
text printed by isl (:data:`polyfuse.codegen.ast.PYTHON`), and :func:`run_host_plan` interprets it with a
caller-supplied launch function. The pycuda runtime passes a function that launches kernels; tests pass
one that records the launches, so the plan is testable without a GPU.

Launch extents are computed at run time from isl expressions in the size params and the enclosing host
loop iterators. For a mapped band member ``c`` whose instances span ``lo <= c <= hi`` -- ``hi`` for the
current host iterators, ``lo`` the least over all of them (see :func:`mapped_ranges`) -- with AST stride
``s``, the extent is ``(hi - lo) // s + 1``: an upper bound on the trip count of every mapped loop
``for (c = init; cond; c += s)``, since ``lo <= init`` and every iterated value is at most ``hi``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType
from typing import Union

import islpy as isl

from polyfuse.codegen.ast import PYTHON, expr_to_text
from polyfuse.errors import CodegenError
from polyfuse.ir.program import Array
from polyfuse.types import DType

ARG_KINDS = ("array", "scalar", "size", "iterator")


@dataclass(frozen=True)
class KernelArg:
    """One parameter of a ``__global__`` function, in order.

    ``kind``: ``array`` (a device pointer to a C-contiguous buffer of ``dtype``), ``scalar`` (a program scalar
    of ``dtype``, by value), ``size`` (a size param, ``long long``) or ``iterator`` (an enclosing host loop
    iterator, ``long long``). ``written``: an array the kernel writes (it is not ``const``).
    """

    name: str
    kind: str
    dtype: DType | None = None
    written: bool = False


@dataclass(frozen=True)
class Launch:
    """Launch ``kernel`` with ``grid`` and ``block`` extents (Python expressions, CUDA's x first)."""

    kernel: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    args: tuple[KernelArg, ...]


@dataclass(frozen=True)
class Loop:
    """``for iterator = init; cond; iterator += step: body`` (isl's for node, Python expressions)."""

    iterator: str
    init: str
    cond: str
    step: int
    body: tuple[Step, ...]


@dataclass(frozen=True)
class Guard:
    """``if cond: then else: orelse``."""

    cond: str
    then: tuple[Step, ...]
    orelse: tuple[Step, ...] = ()


Step = Union[Loop, Guard, Launch]


@dataclass(frozen=True)
class HostPlan:
    """The host program: ``steps`` run in order; ``kernels`` names every ``__global__`` function.

    ``arrays`` are the program's arrays that kernels address in global memory (arguments and the
    temporaries a runtime must allocate on the device), so a runtime needs nothing but the plan.
    """

    steps: tuple[Step, ...]
    kernels: tuple[str, ...]
    arrays: tuple[Array, ...] = ()

    def launches(self) -> tuple[Launch, ...]:
        """Every launch step of the plan, in textual order."""
        out: list[Launch] = []

        def visit(steps: Sequence[Step]) -> None:
            for s in steps:
                if isinstance(s, Launch):
                    out.append(s)
                elif isinstance(s, Loop):
                    visit(s.body)
                else:
                    visit(s.then)
                    visit(s.orelse)

        visit(self.steps)
        return tuple(out)

    def __str__(self) -> str:
        lines: list[str] = []

        def show(steps: Sequence[Step], indent: str) -> None:
            for s in steps:
                if isinstance(s, Launch):
                    lines.append(f"{indent}launch {s.kernel} grid=({', '.join(s.grid)}) block=({', '.join(s.block)})")
                elif isinstance(s, Loop):
                    lines.append(f"{indent}for {s.iterator} = {s.init}; {s.cond}; {s.iterator} += {s.step}:")
                    show(s.body, indent + "    ")
                else:
                    lines.append(f"{indent}if {s.cond}:")
                    show(s.then, indent + "    ")
                    if s.orelse:
                        lines.append(f"{indent}else:")
                        show(s.orelse, indent + "    ")

        show(self.steps, "")
        return "\n".join(lines)


LaunchFn = Callable[[Launch, tuple[int, ...], tuple[int, ...], Mapping[str, int]], None]


def run_host_plan(plan: HostPlan, launch_fn: LaunchFn, sizes: Mapping[str, int]) -> int:
    """Interpret ``plan`` at the given size params; return the number of launches made.

    ``launch_fn(launch, grid, block, env)`` is called for every launch whose extents are all positive (a
    kernel with no instance at this host iteration is skipped); ``env`` maps the size params and the
    enclosing host iterators to their values, for the ``size`` and ``iterator`` arguments.
    """
    count = 0

    def run(steps: Sequence[Step], env: dict[str, int]) -> None:
        nonlocal count
        for s in steps:
            if isinstance(s, Launch):
                grid = tuple(_eval(e, env) for e in s.grid)
                block = tuple(_eval(e, env) for e in s.block)
                if all(g > 0 for g in grid + block):
                    launch_fn(s, grid, block, env)
                    count += 1
            elif isinstance(s, Loop):
                inner = dict(env)
                inner[s.iterator] = _eval(s.init, env)
                while _eval(s.cond, inner):
                    run(s.body, inner)
                    inner[s.iterator] += s.step
            elif _eval(s.cond, env):
                run(s.then, env)
            else:
                run(s.orelse, env)

    run(plan.steps, {k: int(v) for k, v in sizes.items()})
    return count


_BUILTINS = {"__builtins__": {}, "min": min, "max": max}


@lru_cache(maxsize=4096)
def _compiled(text: str) -> CodeType:
    return compile(text, "<polyfuse host plan>", "eval")


def _eval(text: str, env: Mapping[str, int]) -> int:
    try:
        return int(eval(_compiled(text), _BUILTINS, dict(env)))  # noqa: S307 - text is isl-printed by us
    except NameError as e:
        raise CodegenError(f"host plan expression {text!r} needs a value that is not known: {e}") from None


# ----- building the plan from the isl AST ------------------------------------------------------------


def host_plan_from_ast(
    root: isl.AstNode, make_launch: Callable[[isl.AstNode, tuple[str, ...]], Launch], arrays: Mapping[str, Array]
) -> HostPlan:
    """The host plan of the AST ``root``: every AST node above a ``kernel`` mark becomes a step.

    ``make_launch(mark, host_iterators)`` is called for each kernel mark node, with the iterators of the
    host loops enclosing it (outermost first); it prints the kernel and returns its launch.
    """
    launches: list[str] = []

    def steps(node: isl.AstNode, iters: tuple[str, ...]) -> tuple[Step, ...]:
        t = node.get_type()
        if t == isl.ast_node_type.block:
            children = node.block_get_children()
            return tuple(s for k in range(children.n_ast_node()) for s in steps(children.get_at(k), iters))
        if t == isl.ast_node_type.mark:
            if node.mark_get_id().get_name() == "kernel":
                launch = make_launch(node, iters)
                launches.append(launch.kernel)
                return (launch,)
            return steps(node.mark_get_node(), iters)
        if t == isl.ast_node_type.for_:
            it = node.for_get_iterator().get_id().get_name()
            inc = node.for_get_inc().get_val().to_python()
            body = steps(node.for_get_body(), (*iters, it))
            return (Loop(it, _py(node.for_get_init()), _py(node.for_get_cond()), int(inc), body),)
        if t == isl.ast_node_type.if_:
            orelse = steps(node.if_get_else_node(), iters) if node.if_has_else_node() else ()
            return (Guard(_py(node.if_get_cond()), steps(node.if_get_then_node(), iters), orelse),)
        if t == isl.ast_node_type.user:
            raise CodegenError("a statement lies outside every kernel mark; the CUDA target runs statements only in kernels")
        raise CodegenError(f"unexpected isl AST node {t} in host code")

    plan_steps = steps(root, ())
    plan = HostPlan(plan_steps, tuple(launches))
    used = {a.name for la in plan.launches() for a in la.args if a.kind == "array"}
    return HostPlan(plan_steps, tuple(launches), tuple(a for n, a in arrays.items() if n in used))


def _py(expr: isl.AstExpr) -> str:
    return expr_to_text(expr, PYTHON)


def mapped_ranges(band: isl.ScheduleNode, members: int, host_depth: int, host_iterators: Sequence[str],
                  names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``(lo, hi)`` Python expressions bounding each of the first ``members`` members of ``band``.

    The bounds range over every instance reaching ``band`` (all blocks, all enclosing kernel loops) for fixed
    values of the size params and of the host loop iterators ``host_iterators`` (isl's ``c<depth>`` names
    of the loops enclosing the kernel); host dimensions that are not loops (isl substituted a single value)
    are projected out, which is exact. ``names[d]`` is the AST's name of the loop of schedule dimension
    ``d`` (default ``c<d>``; :func:`polyfuse.codegen.ast.iterator_names` skips names the program uses).
    """
    out = []
    for lows, hi in _mapped_bounds(band, members, host_depth, host_iterators, names):
        texts = [_py(e) for e in lows]
        out.append((texts[0] if len(texts) == 1 else f"min({texts[0]}, {texts[1]})", _py(hi)))
    return out


def mapped_lower_bounds(band: isl.ScheduleNode, members: int, host_depth: int, host_iterators: Sequence[str],
                        render: Callable[[isl.AstExpr], str], minimum: Callable[[Sequence[str]], str],
                        names: Sequence[str] | None = None) -> list[str]:
    """The lower bounds of :func:`mapped_ranges` as kernel code (``render`` prints an isl expression,
    ``minimum`` the least of several): the origin of a mapped axis, the value its index 0 stands for."""
    out = []
    for lows, _ in _mapped_bounds(band, members, host_depth, host_iterators, names):
        texts = [render(e) for e in lows]
        out.append(texts[0] if len(texts) == 1 else minimum(texts))
    return out


def _mapped_bounds(band: isl.ScheduleNode, members: int, host_depth: int, host_iterators: Sequence[str],
                   names: Sequence[str] | None = None) -> list[tuple[list[isl.AstExpr], isl.AstExpr]]:
    """``([lo, lo_anywhere?], hi)`` isl expressions for :func:`mapped_ranges`."""
    prefix = band.get_prefix_schedule_union_map()
    full = prefix.flat_range_product(band.band_get_partial_schedule_union_map())
    values = isl.Set.from_union_set(full.intersect_domain(band.get_domain()).range())
    depth = band.get_schedule_depth()
    # Host dims bound by loops become params named like the AST iterators; the rest are projected out.
    nparam = values.dim(isl.dim_type.param)
    name = (lambda k: names[k]) if names is not None else (lambda k: f"c{k}")
    keep = [k for k in range(host_depth) if name(k) in host_iterators]
    for k in reversed(range(depth)):
        if k not in keep:
            values = values.project_out(isl.dim_type.set, k, 1)
    values = values.move_dims(isl.dim_type.param, nparam, isl.dim_type.set, 0, len(keep))
    for j, k in enumerate(keep):
        values = values.set_dim_name(isl.dim_type.param, nparam + j, name(k))
    if any(b.dim(isl.dim_type.div) for b in values.get_basic_sets()):
        # Existentials (e.g. a wavefront's eliminated iterator) make exact parametric min/max very slow;
        # dropping them over-approximates the range, which only adds blocks the kernel's guards skip.
        values = values.remove_divs()
    context = values.params()
    if context.is_empty():
        ctx = band.get_ctx()
        zero, minus = isl.AstExpr.from_val(isl.Val.zero(ctx)), isl.AstExpr.from_val(isl.Val.negone(ctx))
        return [([zero], minus)] * members
    build = isl.AstBuild.from_context(context)
    # The kernel maps c = init + s * idx with ``init`` the AST loop's lower bound, which isl takes from a
    # hull over all host iterations: at one host iteration it can lie below the values present there
    # (fuzzer: a statement alone at thread 1 while the loop starts at 0 for another). So the extent runs
    # from the least value over every host iteration (only the size params fixed), which no AST lower
    # bound undercuts, or from this iteration's least value if lower.
    anywhere = values.project_out(isl.dim_type.param, nparam, len(keep))
    sizes_only = anywhere.params()
    build_sizes = isl.AstBuild.from_context(sizes_only)
    out = []
    for m in range(members):
        lo = build.expr_from_pw_aff(values.dim_min(m).gist(context))
        hi = build.expr_from_pw_aff(values.dim_max(m).gist(context))
        lows = [lo]
        if keep:
            lo_anywhere = build_sizes.expr_from_pw_aff(anywhere.dim_min(m).gist(sizes_only))
            if _py(lo_anywhere) != _py(lo):
                lows.append(lo_anywhere)
        out.append((lows, hi))
    return out
