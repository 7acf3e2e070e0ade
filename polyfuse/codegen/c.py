"""The C back end's printer: a scheduled program as one C99 + OpenMP function.

The whole program becomes one function ``void <program>_kernel(sizes..., arrays..., scalars...,
temporaries...)``: host code (sequences, host loops such as a time loop) and every kernel run inside it, each
kernel as a commented block. One function rather than one per kernel because C has no launch boundary: a
host loop around two kernels is just a loop around two blocks, and local scalars can live across kernels.

What the printer relies on (see :mod:`polyfuse.schedule.model` for the tree conventions):

* loops, conditions and every index come from the isl AST of :func:`polyfuse.codegen.ast.build_ast`, printed
  through :class:`~polyfuse.codegen.c_expressions.FlatCDialect`, which linearises ``A[i][j]`` into ``A[i * M + j]`` from the array's shape
  (its :class:`~polyfuse.types.SizeExpr` entries are affine in the size params, which are ``int64_t``
  arguments of the same names);
* the outermost ``for`` below a ``parallel`` mark gets ``#pragma omp parallel for``; loop iterators are
  declared in the ``for`` (so they are private), and local scalars used only inside one parallel loop are
  declared at the top of its body (so they are private too);
* local scalars are the 0-d temporaries and the arrays in ``sched.contracted``; every other temporary has a
  buffer that the caller allocates and passes in (it is listed in ``Code.temporaries``);
* float intrinsics (``exp``, ``log``, ``tanh``, ``max``, ``min``, f32 ``pow``) print as the branch-free inline
  functions of :mod:`polyfuse.codegen.c_math`, and only those a program uses are emitted, so that GCC
  vectorises the innermost loops (libm's are opaque scalar calls); ``sqrt`` and ``fabs`` stay the C names,
  which compile to single instructions. Vectorisation relies on the ``restrict`` array parameters (inside an
  ``omp parallel for`` GCC loses them in the outlined function and versions the loop with an alias check
  instead) and on the flags of :mod:`polyfuse.runtime.cpu`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import islpy as isl

from polyfuse.codegen import c_math
from polyfuse.codegen.ast import (
    C_HELPERS,
    block_children,
    build_ast,
    expr_ids,
    expr_to_text,
    iterator_names,
    loop_schedule,
    statement_call,
)
from polyfuse.codegen.c_balance import schedule_clause
from polyfuse.codegen.c_expressions import VALUE_HELPERS, FlatCDialect, ValuePrinter, strip_parens
from polyfuse.codegen.c_innermost import INDENT, INDEX_TYPE, InnermostLoopPrinter, lane_updates
from polyfuse.codegen.c_jam import jam_lines
from polyfuse.codegen.c_lanes import LANE_HELPERS
from polyfuse.codegen.c_micro import microtile_lines
from polyfuse.codegen.c_openmp import (
    Marked,
    annotate_parallel_marks,
    check_openmp_loop,
    holds_loop,
    holds_parallel_mark,
    two,
)
from polyfuse.codegen.c_prefetch import PrefetchPlan, plan_prefetch
from polyfuse.codegen.c_shift import shift_helpers
from polyfuse.codegen.c_stream import STREAM_HELPERS, exceeds_cache, fence_parallel_loop, streamed_arrays
from polyfuse.codegen.c_vector import VECTOR_HELPERS
from polyfuse.codegen.code import Argument, Code
from polyfuse.errors import CodegenError
from polyfuse.ir.program import Program
from polyfuse.schedule.model import KERNEL_MARK, PARALLEL_MARK, Kernel, Schedule
from polyfuse.schedule.tiling.init_fold import FOLDED_INIT_MARK
from polyfuse.schedule.tiling.jam import JAM_MARK
from polyfuse.schedule.tiling.microtile import MICROTILE_MARK

SINGLE_LABEL = "one thread of the team: omp single"
"""The label of a kernel block that one thread of a host loop's parallel region runs (``runtime/profile.py``
times it on whichever thread that is)."""

def generate_c(sched: Schedule) -> Code:
    """C99 + OpenMP source for ``sched`` (target ``"c"``): one entry function running the whole program."""
    return _CPrinter(sched).code()


def _label(kernel: object) -> str:
    """The comment that opens a kernel's block (``runtime/profile.py`` finds kernels by it)."""
    return f"kernel {kernel.name}: {', '.join(kernel.statements)}" if isinstance(kernel, Kernel) else "kernel"


@dataclass
class _Usage:
    """Where local scalars are used: per parallel loop (numbered in traversal order), and outside any."""

    per_loop: dict[int, set[str]] = field(default_factory=dict)
    outside: set[str] = field(default_factory=set)


class _CPrinter(InnermostLoopPrinter, ValuePrinter):
    """Walks the isl AST of one schedule and prints it; one instance per :func:`generate_c` call."""

    def __init__(self, sched: Schedule) -> None:
        self.sched = sched
        self.program: Program = sched.program
        arrays = self.program.arrays
        self.local_scalars = frozenset(
            n for n, a in arrays.items() if a.role == "temp" and (a.ndim == 0 or n in sched.contracted)
        )
        self.row_buffers = {rb.buffer: rb.length for rb in sched.row_buffers}  # name -> elements (one row)
        self.buffered_temps = tuple(n for n, a in arrays.items()
                                    if a.role == "temp" and n not in self.local_scalars and n not in self.row_buffers)
        self.per_thread = sched.contracted | frozenset(self.row_buffers)  # (each parallel loop declares its own)
        self.kept_local = self.local_scalars | frozenset(self.row_buffers)  # arrays that never reach memory
        self.dialect = FlatCDialect(dict(arrays), self.local_scalars, frozenset(self.row_buffers))
        context = _params_context(self.program, sched.params)
        # Parallel marks carry their schedule depth, so the printer can recognise the marked loop by name.
        self.ast = build_ast(self.program, annotate_parallel_marks(sched.tree), context=context)
        self.iterators = iterator_names(self.program)
        self.usage = _Usage()
        self._loop_counter = 0
        self.math_parts: set[str] = set()
        self.uses_vectors = False  # set by the micro-kernel printer (``c_micro.py``) and explicit vectors
        self.uses_lanes = False  # a loop was printed with explicit 16-float vectors (``c_lanes.py``)
        self.shifts: set[tuple[str, int]] = set()  # (type, offset) of the shifted reads printed (``c_shift.py``)
        self.in_kernel = False  # printing below a kernel mark
        self.in_region = False  # printing inside a host loop's ``omp parallel`` region
        self.host_loops = 0  # host loops around the node being printed
        self.balanced = False  # the kernel being printed runs once per call: its loop may be dealt dynamically (``c_balance.py``)
        self.memory_bound = False  # ... and it touches more than the cache holds
        self._deps: isl.UnionMap | None = None  # every dependence of the program (``_simd_safe``), on first use
        self._lane_deps: isl.UnionMap | None = None  # those through arrays, not local scalars (``c_lanes.py``)
        self.streamed = streamed_arrays(self.program, sched.kernels, sched.params, self.kept_local)
        self.uses_streams = False  # a loop was printed with streaming stores (``c_stream.py``)
        self.stream_unfenced = False  # ... and no fence follows it yet
        self.prefetch_plan: PrefetchPlan | None = None  # the row loop being printed prefetches its next row (c_prefetch.py)
        self.started: dict[str, bool] = {}  # update -> every micro-kernel of it starts from its folded initialisation
        self._scan(self.ast, None, None)
        self.uses_vectors = self.uses_lanes = False  # (the scan's trial prints set them)
        self.function_scalars = self._function_scope_scalars()

    # ----- whole translation unit ---------------------------------------------------------------
    def code(self) -> Code:
        entry = f"{_identifier(self.program.name)}_kernel"
        signature = self._signature()
        params = ",\n".join(INDENT + self._declare_argument(a) for a in signature)
        body: list[str] = [INDENT + self._declare_local(n) for n in sorted(self.function_scalars)]
        self._loop_counter = 0
        body += self._node(self.ast, 1, None)
        body += self._fence(1)  # (streams printed outside any kernel block: none so far)
        text = "\n".join([
            *self._header(),
            "#include <math.h>",
            "#include <stdint.h>",
            "",
            C_HELPERS + VALUE_HELPERS + (VECTOR_HELPERS if self.uses_vectors or self.shifts else "")
            + shift_helpers(self.shifts)
            + (STREAM_HELPERS if self.uses_streams else "") + c_math.math_source(self.math_parts)
            + (LANE_HELPERS if self.uses_lanes else ""),
            f"void {entry}(\n{params})",
            "{",
            *body,
            "}",
            "",
        ])
        return Code(text, "c", tuple(self.sched.kernels), entry, signature, self.buffered_temps)

    def _header(self) -> list[str]:
        p = self.program
        lines = [f"/* polyfuse: program {p.name} ({p.filename}:{p.line}), fusion={self.sched.fusion}"]
        for k in self.sched.kernels:
            lines.append(f" *   kernel {k.name}: {', '.join(k.statements)}")
        if self.local_scalars:
            lines.append(f" *   local scalars (no buffer): {', '.join(sorted(self.local_scalars))}")
        if self.buffered_temps:
            lines.append(f" *   temporaries allocated by the caller: {', '.join(self.buffered_temps)}")
        for rb in self.sched.row_buffers:
            lines.append(f" *   row buffer {rb.buffer}: one row of {rb.array} per thread ({rb.length} elements), "
                         f"so that {rb.array} is written once")
        lines.append(" */")
        return lines

    def _signature(self) -> tuple[Argument, ...]:
        p = self.program
        out = [Argument(n, "size") for n in p.params]
        for name in p.arguments:
            if name in p.arrays:
                out.append(Argument(name, "array", p.arrays[name].dtype))
            else:
                out.append(Argument(name, "scalar", p.scalars[name]))
        out += [Argument(n, "array", p.arrays[n].dtype) for n in self.buffered_temps]
        return tuple(out)

    def _declare_argument(self, arg: Argument) -> str:
        if arg.kind == "size":
            return f"const {INDEX_TYPE} {arg.name}"
        assert arg.dtype is not None
        if arg.kind == "scalar":
            return f"const {arg.dtype.c_name} {arg.name}"
        const = "const " if self.program.arrays[arg.name].role == "input" else ""
        return f"{const}{arg.dtype.c_name} *restrict {arg.name}"

    def _declare_local(self, name: str) -> str:
        ctype = self.program.arrays[name].dtype.c_name
        if name in self.row_buffers:
            return f"{ctype} {name}[{self.row_buffers[name]}] __attribute__((aligned(64)));"
        return f"{ctype} {name};"

    # ----- where local scalars live -------------------------------------------------------------
    def _scan(self, node: isl.AstNode, loop: int | None, parallel: str | None) -> None:
        """Record, for each local scalar, the parallel loops (or none) its statements run in.

        ``parallel`` is the iterator name of the loop a ``parallel`` mark above asks to parallelise.
        """
        t = node.get_type()
        if t == isl.ast_node_type.for_:
            if self._is_parallel_loop(node, parallel) and loop is None:
                loop = self._loop_counter
                self._loop_counter += 1
                self.usage.per_loop[loop] = set()
            self._scan(node.for_get_body(), loop, self._through_degenerate(node, parallel) if loop is None else None)
        elif t == isl.ast_node_type.block:
            for child in block_children(node):
                self._scan(child, loop, parallel)
        elif t == isl.ast_node_type.if_:
            self._scan(node.if_get_then_node(), loop, parallel)
            if node.if_has_else_node():
                self._scan(node.if_get_else_node(), loop, parallel)
        elif t == isl.ast_node_type.mark:
            info = node.mark_get_id().user
            if node.mark_get_id().get_name() == MICROTILE_MARK and getattr(info, "start", None) is not None:
                # a folded initialisation is left out only where every micro-kernel of its update prints
                printed = microtile_lines(self, node, 0) is not None
                self.started[info.statement] = self.started.get(info.statement, True) and printed
            self._scan(node.mark_get_node(), loop, self._parallel_below(node, parallel) if loop is None else None)
        elif t == isl.ast_node_type.user:
            used = {a.array for a in statement_call(node).statement.accesses
                    if a.array in self.local_scalars or a.array in self.row_buffers}
            (self.usage.per_loop[loop] if loop is not None else self.usage.outside).update(used)

    def _function_scope_scalars(self) -> set[str]:
        """Local scalars used outside parallel loops, or uncontracted ones used in more than one: declared
        once, at function scope. A contracted scalar never carries a value from one iteration of a parallel
        loop to another (``privatize.py``), so each parallel loop that uses it declares its own copy."""
        out = set(self.usage.outside)
        seen: set[str] = set()
        for names in self.usage.per_loop.values():
            out |= (names & seen) - self.per_thread
            seen |= names
        return out

    def _private_scalars(self, loop: int) -> list[str]:
        """The local scalars the parallel loop number ``loop`` declares in its body (one copy per thread)."""
        used = self.usage.per_loop.get(loop, set())
        return sorted((used - self.function_scalars) | (used & self.per_thread))

    # ----- statements and control flow ----------------------------------------------------------
    def _parallel_below(self, mark: isl.AstNode, parallel: str | None) -> str | None:
        """The iterator of the loop a ``parallel`` mark designates (see :func:`polyfuse.codegen.c_openmp.annotate_parallel_marks`)."""
        ident = mark.mark_get_id()
        if ident.get_name() != PARALLEL_MARK:
            return parallel
        user = ident.user
        if not isinstance(user, tuple):
            return None
        depth, both = user
        return Marked(self.iterators[depth], both) if depth < len(self.iterators) else None

    def _is_parallel_loop(self, node: isl.AstNode, parallel: str | None) -> bool:
        """Whether ``node`` is the marked parallel loop itself. When isl elided that loop (one iteration at
        these sizes), the first loop below the mark is a deeper one: parallel only when it is the band's
        second member and that member is parallel too (a batch of 1 must not leave one thread working)."""
        if parallel is None or node.for_is_degenerate():
            return False
        name = node.for_get_iterator().get_id().get_name()
        return name == parallel or (two(parallel) and name == self._successor(parallel))

    def _through_degenerate(self, node: isl.AstNode, parallel: str | None) -> str | None:
        """What the body of loop ``node`` may still parallelise: the mark's request passes through the
        marked loop when it has a single iteration and the band's next member is parallel."""
        if parallel is not None and node.for_is_degenerate() and two(parallel):
            if node.for_get_iterator().get_id().get_name() == parallel:
                return parallel
        return None

    def _successor(self, name: str) -> str | None:
        k = self.iterators.index(name) if name in self.iterators else -1
        return self.iterators[k + 1] if 0 <= k < len(self.iterators) - 1 else None

    def _node(self, node: isl.AstNode, depth: int, parallel: str | None) -> list[str]:
        t = node.get_type()
        pad = INDENT * depth
        if t == isl.ast_node_type.for_:
            return self._for(node, depth, parallel)
        if t == isl.ast_node_type.block:
            children, lines = list(block_children(node)), []
            while children:
                run = 0
                while run < len(children) and self._runs_single(children[run]):
                    run += 1
                if run:  # consecutive kernels that one thread runs: one ``omp single``, one barrier
                    lines += self._single(children[:run], depth)
                    children = children[run:]
                else:
                    lines += self._node(children.pop(0), depth, parallel)
            return lines
        if t == isl.ast_node_type.if_:
            lines = [f"{pad}if ({self._index(node.if_get_cond())}) {{", *self._node(node.if_get_then_node(), depth + 1, parallel)]
            if node.if_has_else_node():
                lines += [f"{pad}}} else {{", *self._node(node.if_get_else_node(), depth + 1, parallel)]
            return [*lines, f"{pad}}}"]
        if t == isl.ast_node_type.mark:
            return self._mark(node, depth, parallel)
        if t == isl.ast_node_type.user:
            return [pad + self._statement(statement_call(node))]
        raise CodegenError(f"unexpected isl AST node: {node.to_C_str()}")

    def _mark(self, node: isl.AstNode, depth: int, parallel: str | None) -> list[str]:
        ident = node.mark_get_id()
        name = ident.get_name()
        if name == KERNEL_MARK:
            label = _label(ident.user)
            pad = INDENT * depth
            if self._runs_single(node):
                return self._single([node], depth)
            self.in_kernel = True
            self.balanced = not self.host_loops and isinstance(ident.user, Kernel)  # (launched once per call)
            self.memory_bound = self.balanced and exceeds_cache(self.program, ident.user, self.sched.params, self.kept_local)
            body = self._node(node.mark_get_node(), depth + 1, None) + self._fence(depth + 1)
            self.in_kernel = self.balanced = self.memory_bound = False
            return [f"{pad}/* {label} */", f"{pad}{{", *body, f"{pad}}}"]
        if name == MICROTILE_MARK:
            lines = microtile_lines(self, node, depth)
            if lines is not None:
                return lines
        if name == FOLDED_INIT_MARK and self.started.get(ident.user, False):
            return []  # (its micro-kernels start from its value: schedule/tiling/init_fold.py)
        if name == JAM_MARK:
            lines = jam_lines(self, node.mark_get_node(), depth, ident.user, parallel)
            if lines is not None:
                return lines
        return self._node(node.mark_get_node(), depth, self._parallel_below(node, parallel))

    def _runs_single(self, node: isl.AstNode) -> bool:
        """Whether ``node`` is a kernel that one thread of a host loop's parallel region runs (it has no
        OpenMP loop of its own)."""
        return (self.in_region and not self.in_kernel and node.get_type() == isl.ast_node_type.mark
                and node.mark_get_id().get_name() == KERNEL_MARK and not self._shares_work(node))

    def _single(self, kernels: list[isl.AstNode], depth: int) -> list[str]:
        """Kernels that one thread of the team runs, in one ``omp single``: its implicit barrier orders
        them before what follows, one barrier for the run instead of one per kernel (gramschmidt's four
        per column). Each keeps its own labelled block (the profiler times it)."""
        pad, inner = INDENT * depth, INDENT * (depth + 1)
        lines = [f"{pad}#pragma omp single", f"{pad}{{"]
        for node in kernels:
            label = _label(node.mark_get_id().user)
            self.in_kernel = True
            body = self._node(node.mark_get_node(), depth + 2, None) + self._fence(depth + 2)
            self.in_kernel = False
            lines += [f"{inner}/* {label} ({SINGLE_LABEL}) */", f"{inner}{{", *body, f"{inner}}}"]
        return [*lines, f"{pad}}}"]

    def _for(self, node: isl.AstNode, depth: int, parallel: str | None) -> list[str]:
        pad = INDENT * depth
        if not self.in_kernel and not self.in_region and holds_parallel_mark(node) and self._region_fits(node):
            # a host loop around parallel kernels: one parallel region for the whole loop, each kernel an
            # ``omp for`` (its implicit barrier orders the kernels), instead of a fork and join per iteration
            self.in_region = True
            loop = self._for(node, depth + 1, parallel)
            self.in_region = False
            return [f"{pad}#pragma omp parallel", f"{pad}{{", *loop, f"{pad}}}"]
        it = self._index(node.for_get_iterator())
        init = self._index(node.for_get_init())
        body_depth = depth + 1
        lines: list[str] = []
        private: list[str] = []
        reductions: list[tuple[str, str]] = []
        is_parallel = self._is_parallel_loop(node, parallel)
        if is_parallel:
            loop = self._loop_counter
            self._loop_counter += 1
            private = self._private_scalars(loop)
            collapse = " collapse(2)" if not private and it == parallel and self._collapsible(node, parallel) else ""
            inner = node.for_get_body() if collapse else node
            check_openmp_loop(self.program, loop_schedule(inner), 2 if collapse else 1, private)
            construct = "for" if self.in_region else "parallel for"
            clause = schedule_clause(node, bool(collapse), self.memory_bound) if self.balanced else "schedule(static)"
            lines.append(f"{pad}#pragma omp {construct} {clause}{collapse}")
        elif not node.for_is_degenerate():
            whole, pragma, reductions = self._innermost(node, depth, parallel)
            if whole is not None:
                return whole
            lines += pragma
        if node.for_is_degenerate():
            lines.append(f"{pad}{{")
            lines.append(f"{pad}{INDENT}const {INDEX_TYPE} {it} = {init};")
        else:
            cond = strip_parens(self._index(node.for_get_cond()))
            inc = self._index(node.for_get_inc())
            lines.append(f"{pad}for ({INDEX_TYPE} {it} = {init}; {cond}; {it} += {inc}) {{")
        lines += [INDENT * body_depth + self._declare_local(n) for n in private]
        outer_plan = self.prefetch_plan  # (a row loop, parallel or not, whose next row its body prefetches)
        self.prefetch_plan = None if node.for_is_degenerate() or (is_parallel and collapse) else plan_prefetch(self, node)
        host = not self.in_kernel  # (a host loop: the kernels below it launch once per iteration)
        self.host_loops += host
        body = self._node(node.for_get_body(), body_depth, None if is_parallel else self._through_degenerate(node, parallel))
        self.host_loops -= host
        self.prefetch_plan = outer_plan
        lanes = [(op, name) for op, name in (reductions if not is_parallel and not node.for_is_degenerate() else []) if op in ("max", "min")]
        lines += lane_updates(body, lanes) if lanes else body
        lines.append(f"{pad}}}")
        if is_parallel and self.stream_unfenced:
            self.stream_unfenced = False
            return fence_parallel_loop(lines, pad, INDENT, self.in_region)
        return lines

    def _fence(self, depth: int) -> list[str]:
        """``pf_stream_fence();`` where streaming stores printed since the last fence need one."""
        if not self.stream_unfenced:
            return []
        self.stream_unfenced = False
        return [INDENT * depth + "pf_stream_fence();"]

    def _region_fits(self, node: isl.AstNode) -> bool:
        """Whether every kernel below host node ``node`` either is one ``omp for`` loop (see
        :meth:`_shares_work`) or has no parallel loop at all (it runs as ``omp single``): a kernel with
        work outside its parallel loop keeps its own ``omp parallel for`` and the host loop no region."""
        t = node.get_type()
        if t == isl.ast_node_type.mark:
            if node.mark_get_id().get_name() == KERNEL_MARK:
                return self._shares_work(node) or not holds_parallel_mark(node.mark_get_node())
            return self._region_fits(node.mark_get_node())
        if t == isl.ast_node_type.for_:
            return self._region_fits(node.for_get_body())
        if t == isl.ast_node_type.block:
            return all(self._region_fits(c) for c in block_children(node))
        if t == isl.ast_node_type.if_:
            return self._region_fits(node.if_get_then_node()) and (
                not node.if_has_else_node() or self._region_fits(node.if_get_else_node()))
        return True

    def _shares_work(self, kernel: isl.AstNode) -> bool:
        """Whether the kernel below this ``kernel`` mark is one ``omp for`` loop with nothing outside it
        (then every thread of a host loop's region may enter it); otherwise it runs as ``omp single``."""
        node, parallel = kernel.mark_get_node(), None
        while True:
            t = node.get_type()
            if t == isl.ast_node_type.mark:
                parallel = self._parallel_below(node, parallel)
                node = node.mark_get_node()
            elif t == isl.ast_node_type.block and len(list(block_children(node))) == 1:
                node = next(block_children(node))
            elif t == isl.ast_node_type.for_ and self._is_parallel_loop(node, parallel):
                return True
            elif t == isl.ast_node_type.for_ and self._through_degenerate(node, parallel):
                node = node.for_get_body()
            else:
                return False

    def _collapsible(self, node: isl.AstNode, it: str | None) -> bool:
        """Whether the parallel loop ``node`` and the loop right inside it may share one OpenMP loop
        (``collapse(2)``): the marked band's first two members are parallel, the inner loop is the second of
        them (not a deeper loop printed right inside because isl elided that member), the two loops are
        perfectly nested, and the inner one's bounds do not depend on the outer iterator. Then a short outer loop
        (batch 1, a tile covering a whole dimension) no longer leaves threads idle."""
        if not two(it):
            return False
        inner = node.for_get_body()
        if inner.get_type() != isl.ast_node_type.for_ or inner.for_is_degenerate():
            return False
        if inner.for_get_iterator().get_id().get_name() != self._successor(it):
            return False  # isl elided the band's second member (one iteration): this is a deeper loop, which
            # may carry a dependence (2mm at MEDIUM: the k tiles of one row block ran on two threads)
        if not holds_loop(inner.for_get_body()):
            return False  # the inner loop is the innermost, the one the compiler vectorises: keep it whole
        return it not in expr_ids(inner.for_get_init()) | expr_ids(inner.for_get_cond()) | expr_ids(inner.for_get_inc())

    def _index(self, expr: isl.AstExpr) -> str:
        return expr_to_text(expr, self.dialect)

def _params_context(program: Program, sizes: dict | object) -> isl.Set | None:
    """The concrete sizes of a specialised schedule as constraints on the params (None when symbolic)."""
    values = {n: int(v) for n, v in dict(sizes).items() if n in program.params}  # type: ignore[call-overload]
    if not values:
        return None
    ctx = program.context.params()
    for name, value in values.items():
        pos = ctx.find_dim_by_name(isl.dim_type.param, name)
        ctx = ctx.fix_val(isl.dim_type.param, pos, isl.Val.int_from_si(ctx.get_ctx(), value))
    return ctx


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return ident if ident and not ident[0].isdigit() else f"p_{ident}"
