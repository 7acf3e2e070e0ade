"""The C printer's innermost loops: how a loop with no loop inside it is vectorised. Its statements'
sums and maxima into local scalars get ``#pragma omp simd reduction(...)`` (:func:`lane_updates` keeps
each lane's running max free of NaN tests); array elements it adds into stay in scalar accumulators
(``_element_reduction``); a loop proven free of dependences and walking memory contiguously gets a plain
``#pragma omp simd`` (``_simd_safe``); one that writes a streamed output is split around its
non-temporal stores (``c_stream.py``); one that calls ``exp`` runs whole explicit AVX-512 vectors before
its scalar loop, and one that reduces into a scalar runs four vector accumulators (``c_lanes.py``). A
mixin of ``codegen/c.py``'s printer, which provides ``_index``, ``_node``, ``program``, ``sched`` and the
local scalars."""

from __future__ import annotations

import re
from collections.abc import Sequence

import islpy as isl

from polyfuse.codegen.ast import block_children, expr_ids, loop_schedule, statement_call
from polyfuse.codegen.c_expressions import strip_parens
from polyfuse.codegen.c_lanes import lane_body, loop_lines
from polyfuse.codegen.c_openmp import element_reduction, holds_loop, simd_clauses, simd_safe, user_nodes
from polyfuse.codegen.c_prefetch import PrefetchPlan, is_planned, prefetch_lines
from polyfuse.codegen.c_shift import shift_lines
from polyfuse.codegen.c_stream import stream_lines
from polyfuse.ir.program import Program
from polyfuse.schedule.deps import dependences_of, union_of
from polyfuse.schedule.model import Schedule

INDENT = "    "
INDEX_TYPE = "int64_t"


class InnermostLoopPrinter:
    """Prints innermost loops (module docstring); mixed into the C printer."""

    program: Program
    sched: Schedule
    local_scalars: frozenset[str]
    streamed: frozenset[str]
    shifts: set[tuple[str, int]]
    uses_streams: bool
    uses_vectors: bool
    uses_lanes: bool
    stream_unfenced: bool
    prefetch_plan: PrefetchPlan | None
    _deps: isl.UnionMap | None

    def _index(self, expr: isl.AstExpr) -> str:
        raise NotImplementedError

    def _node(self, node: isl.AstNode, depth: int, parallel: str | None) -> list[str]:
        raise NotImplementedError

    def _innermost(self, node: isl.AstNode, depth: int, parallel: str | None
                   ) -> tuple[list[str] | None, list[str], list[tuple[str, str]]]:
        """For the innermost, non-parallel loop ``node``: (the whole loop where it is printed here, else
        ``None``; the pragma lines to print above it; its ``omp simd`` clauses as ``(operator, scalar)``)."""
        pad = INDENT * depth
        reductions = self._simd_reductions(node.for_get_body()) if self.sched.reassociate else []
        if reductions:
            pragma = [f"{pad}#pragma omp simd " + " ".join(
                f"private({name})" if op == "private" else f"reduction({op}:{name})" for op, name in reductions)]
            lines = self._prefetched(node, depth, parallel, pragma, reductions)
            return lines or self._lanes(node, depth, parallel, pragma, reductions), pragma, reductions
        promoted = self._element_reduction(node, depth, parallel) if self.sched.reassociate else None
        if promoted is not None:
            return promoted, [], []
        simd = self._simd_safe(node)
        streamed = stream_lines(self, node, depth, INDENT, simd) if self.streamed else None
        if streamed is not None:
            self.uses_streams = self.stream_unfenced = True
            return streamed, [], []
        shifted = shift_lines(self, node, depth, INDENT) if simd else None
        if shifted is not None:
            return shifted, [], []
        pragma = [f"{pad}#pragma omp simd"] if simd else []
        return self._prefetched(node, depth, parallel, pragma, []) or self._lanes(node, depth, parallel, pragma, []), pragma, []

    def _prefetched(self, node: isl.AstNode, depth: int, parallel: str | None, pragma: list[str],
                    reductions: list[tuple[str, str]]) -> list[str] | None:
        """The loop ``node`` prefetching the next row (``c_prefetch.py``) where the row loop around it
        chose it, else ``None`` (printed as usual with ``pragma``)."""
        plan = self.prefetch_plan
        if plan is None or not is_planned(plan, self, node):
            return None
        body = self._scalar_body(node, depth, parallel, reductions)
        return prefetch_lines(self, plan, node, depth, INDENT, pragma, reductions, body, lane_body(self, node))

    def _scalar_body(self, node: isl.AstNode, depth: int, parallel: str | None,
                     reductions: list[tuple[str, str]]) -> list[str]:
        """The body of the loop ``node`` at ``depth + 1``, its maxima and minima as SIMD lane updates."""
        body = self._node(node.for_get_body(), depth + 1, parallel)
        extrema = [(op, name) for op, name in reductions if op in ("max", "min")]
        return lane_updates(body, extrema) if extrema else body

    def _lanes(self, node: isl.AstNode, depth: int, parallel: str | None, pragma: list[str],
               reductions: list[tuple[str, str]]) -> list[str] | None:
        """The loop ``node`` as whole explicit vectors, then its scalar loop (``c_lanes.py``), where its body
        has an explicit vector form; else ``None``."""
        lanes = lane_body(self, node, reductions)
        if lanes is None:
            return None
        self.uses_vectors = self.uses_lanes = True
        return loop_lines(self, node, depth, INDENT, lanes, pragma, self._scalar_body(node, depth, parallel, reductions))

    def _element_reduction(self, node: isl.AstNode, depth: int, parallel: str | None) -> list[str] | None:
        """The innermost loop ``node`` with the array elements its statements fold values into (sums,
        maxima, minima: :func:`polyfuse.codegen.c_openmp.element_reduction`) kept in scalar accumulators,
        or ``None``: every statement of the body folds into its own element, which does not move along the
        loop and which no other statement of the body touches."""
        body = node.for_get_body()
        nodes = list(block_children(body)) if body.get_type() == isl.ast_node_type.block else [body]
        if not nodes or any(n.get_type() != isl.ast_node_type.user for n in nodes):
            return None
        calls = [statement_call(n) for n in nodes]
        it = self._index(node.for_get_iterator())
        targets = [c.statement.write.array for c in calls]
        ops = [element_reduction(c.statement, self.program.arrays) for c in calls]
        if len(set(targets)) != len(targets) or None in ops or any(
                it in expr_ids(c.write)
                or any(a.array in targets and a.array != c.statement.write.array for a in c.statement.accesses)
                for c in calls):
            return None
        pad = INDENT * depth
        accs = [(f"pf_acc{k}", self._index(c.write), self.program.arrays[c.statement.write.array].dtype.c_name)
                for k, c in enumerate(calls)]
        cond = strip_parens(self._index(node.for_get_cond()))
        # sums go to the SIMD lanes; a maximum or minimum keeps the source order (the compiler may still
        # vectorise an integer one, whose result no order changes)
        simd = [f"{pad}{INDENT}#pragma omp simd " + " ".join(f"reduction(+:{name})" for name, _, _ in accs)] if set(ops) == {"+"} else []
        lines = [f"{pad}{{", *(f"{pad}{INDENT}{ctype} {name} = {target};" for name, target, ctype in accs), *simd,
                 f"{pad}{INDENT}for ({INDEX_TYPE} {it} = {self._index(node.for_get_init())}; {cond}; "
                 f"{it} += {self._index(node.for_get_inc())}) {{"]
        for line in self._node(body, depth + 2, parallel):
            for name, target, _ in accs:
                line = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(target), name, line)
            lines.append(line)
        return [*lines, f"{pad}{INDENT}}}", *(f"{pad}{INDENT}{target} = {name};" for name, target, _ in accs), f"{pad}}}"]

    def _simd_safe(self, node: isl.AstNode) -> bool:
        """Whether innermost loop ``node`` gets a plain ``#pragma omp simd`` (:func:`simd_safe`): not where
        its statements write a local scalar (one copy shared by the lanes)."""
        body = node.for_get_body()
        if holds_loop(body):
            return False
        schedule = loop_schedule(node)
        if schedule is None:
            return False
        stmts = [statement_call(n).statement for n in user_nodes(body)]
        if not stmts or any(st.write.array in self.local_scalars for st in stmts):
            return False
        if self._deps is None:
            self._deps = union_of(dependences_of(self.program), space=self.program.context.get_space())
        return simd_safe(schedule, self._deps, stmts)

    def _simd_reductions(self, body: isl.AstNode) -> list[tuple[str, str]]:
        """The clauses of ``#pragma omp simd`` for the innermost loop with this body (see
        :func:`polyfuse.codegen.c_openmp.simd_clauses`); empty when the loop gets none."""
        nodes = list(block_children(body)) if body.get_type() == isl.ast_node_type.block else [body]
        if not nodes or any(n.get_type() != isl.ast_node_type.user for n in nodes):
            return []
        return simd_clauses([statement_call(n).statement for n in nodes], self.local_scalars, self.program.arrays)


def lane_updates(lines: list[str], reductions: Sequence[tuple[str, str]]) -> list[str]:
    """``lines`` with each update ``s = pf_fmax_T(s, e)`` (or ``pf_fmax_T(e, s)``, and min) of a scalar under
    ``omp simd reduction(max|min:s)`` printed with ``pf_fmax_lane_T(s, e)``: each SIMD lane's copy of ``s``
    starts at the operator's identity, never NaN, where the NaN test of ``pf_fmax_T`` on the accumulator would
    lengthen the loop-carried chain (a softmax row's max ran 2.7x slower). Results are the same."""
    out = list(lines)
    for op, name in reductions:
        pattern = re.compile(rf"^(\s*){re.escape(name)} = pf_f{op}_(f32|f64)\((.*)\);(\s*/\*.*\*/)?$")
        for k, line in enumerate(out):
            m = pattern.match(line)
            if m is None:
                continue
            args = m.group(3)
            if args.startswith(f"{name}, "):
                other = args[len(name) + 2:]
            elif args.endswith(f", {name}"):
                other = args[: -len(name) - 2]
            else:
                continue
            if _balanced(other):
                out[k] = f"{m.group(1)}{name} = pf_f{op}_lane_{m.group(2)}({name}, {other});{m.group(4) or ''}"
    return out


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0
