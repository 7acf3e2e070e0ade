"""The body of one CUDA kernel: the AST below a ``"kernel"`` mark printed as the statements of a
``__global__`` function (:class:`KernelPrinter`), in the dialect of :class:`CudaDialect` (flat row-major
arrays, registers and shared buffers, 64-bit index helpers). ``codegen/cuda.py`` builds the translation
unit and the host plan around it.

Thread mapping. Under the ``"grid"`` mark the first ``len(kernel.grid)`` members of the band map to
``blockIdx`` (innermost member to ``.x``), under ``"block"`` to ``threadIdx`` likewise. The invariant the
printer enforces: each mapped loop ``for (c = init; cond; c += s)`` is printed as
``const long long c = lo + s * blockIdx.x; if (c >= init && cond) { ... }`` (plain ``init`` where it is
``lo``), and the launch extent along that axis is ``(hi - lo) / s + 1`` with ``lo``/``hi`` the extreme
values of ``c`` over the kernel's instances at the current host iteration (see
:func:`~polyfuse.codegen.host_plan.mapped_ranges`), which bounds every trip count. Counting from ``lo``,
the same in every loop of the kernel, gives each element one thread: a loop start that moves with a
sequential loop inside the kernel, or differs between two loop nests, would hand one element to two threads
with no barrier between them (``tests/test_cuda_races.py``). Kernels with buffers promoted to shared memory
keep ``init``: their barriers order the copy and compute phases, and their mapping follows the copies'. A mapped member that isl did not print as a loop (a single value, substituted) is guarded by
``blockIdx.x == 0`` so that only one block (or thread) along that axis executes the statements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.codegen.ast import (
    CDialect,
    StatementCall,
    as_operand,
    expr_to_text,
    statement_call,
)
from polyfuse.codegen.c_expressions import strip_parens
from polyfuse.codegen.cuda_rows import print_cyclic_for, print_row_mark
from polyfuse.codegen.cuda_values import value_text
from polyfuse.errors import CodegenError
from polyfuse.ir.expr import ScalarArg
from polyfuse.ir.program import Array, Program
from polyfuse.schedule.model import CYCLIC_MARK, KERNEL_MARK, REDUCE_MARK, SYNC_MARK
from polyfuse.types import SizeExpr


class CudaDialect(CDialect):
    """CUDA spelling of isl AST expressions: 64-bit helpers, flattened arrays, registers for private names."""

    def __init__(self, arrays: Mapping[str, Array], private: frozenset[str], shared: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self.arrays = arrays
        self.private = private
        self.shared = dict(shared or {})  # promoted __shared__ buffers: name -> shape (indexed A[i][j])
        self.renamed: dict[str, str] = {}  # arrays printed as a register while one part of a kernel is printed

    def min(self, args: Sequence[str]) -> str:
        return _fold("pf_min", args)

    def max(self, args: Sequence[str]) -> str:
        return _fold("pf_max", args)

    def floor_div(self, num: str, den: str) -> str:
        return f"pf_floordiv({num}, {den})"

    def access(self, array: str, indices: Sequence[str]) -> str:
        if array in self.renamed:
            return self.renamed[array]
        if array in self.private:
            return array
        if array in self.shared:
            return array + "".join(f"[{i}]" for i in indices)
        shape = self.arrays[array].shape
        flat = ""
        for k, index in enumerate(indices):
            flat = index if k == 0 else f"({flat}) * {_size(shape[k])} + {index}"
        return f"{array}[{flat or '0'}]"


def _plus(init: str, step: str) -> str:
    return step if init == "0" else f"{as_operand(init)} + {step}"


def _fold(function: str, args: Sequence[str]) -> str:
    out = args[0]
    for a in args[1:]:
        out = f"{function}({out}, {a})"
    return out


def _size(e: SizeExpr) -> str:
    terms = [n if c == 1 else f"{c} * {n}" for n, c in e.terms]
    if e.constant or not terms:
        terms.append(str(e.constant))
    return terms[0] if len(terms) == 1 else "(" + " + ".join(terms) + ")"


# ----- kernels ----------------------------------------------------------------------------------------


class KernelPrinter:
    """Prints the AST under one kernel mark as a ``__global__`` function body and records what it uses.

    ``axes`` maps the iterator name of each mapped band member to ``blockIdx.x`` etc.; ``strides`` collects
    the AST stride of every mapped loop printed (for the launch extents).
    """

    def __init__(self, program: Program, dialect: CudaDialect, axes: Mapping[str, str]) -> None:
        self.program = program
        self.dialect = dialect
        self.axes = dict(axes)
        self.strides: dict[str, int] = {}
        self.lines: list[str] = []
        self.statements: list[str] = []
        self.arrays: dict[str, bool] = {}  # name -> written
        self.scalars: set[str] = set()
        self.barriers: frozenset[str] = frozenset()
        self.promoted: dict = {}  # name -> schedule.model.Buffer promoted in this kernel
        self.buffers: set[str] = set()  # promoted buffers (shared arrays, registers) the kernel uses
        self._scopes: list[set[str]] = [set()]
        self.cyclic = ""  # the iterator of the kernel's cyclic (cooperative-row) loops, if any
        self._in_cyclic = False
        self.grid_cyclic = False  # the cyclic loop is shared by every block's threads (block_reductions.py)
        self.cyclic_width = 0  # the block's thread count where the launch fixes it (a constant stride), else 0
        self.cyclic_blocks = 0  # the grid's block count where the launch fixes it (a grid-wide cyclic loop), else 0
        self.cyclic_unroll = 0  # how far the cyclic loops are unrolled (Kernel.unroll; 0: cuda_rows' default)
        self.origins: dict[str, str] = {}  # mapped iterator -> the value its index 0 stands for (launch extents' lo)

    def emit(self, node: isl.AstNode, depth: int, bound: frozenset[str]) -> None:
        pad = "  " * depth
        t = node.get_type()
        if t == isl.ast_node_type.block:
            children = node.block_get_children()
            for k in range(children.n_ast_node()):
                self.emit(children.get_at(k), depth, bound)
        elif t == isl.ast_node_type.mark:
            name = node.mark_get_id().get_name()
            if name == KERNEL_MARK:
                raise CodegenError("a kernel mark lies inside another kernel")
            if name in (CYCLIC_MARK, REDUCE_MARK, SYNC_MARK):
                self._row_mark(node, name, depth, bound)
                return
            mapped = [f"{it} -> {ax}" for it, ax in self.axes.items() if ax.startswith({"grid": "blockIdx", "block": "threadIdx"}.get(name, "-"))]
            self.lines.append(f"{pad}/* {name}{': ' + ', '.join(mapped) if mapped else ''} */")
            self.emit(node.mark_get_node(), depth, bound)
        elif t == isl.ast_node_type.for_:
            self._for(node, depth, bound)
        elif t == isl.ast_node_type.if_:
            self.lines.append(f"{pad}if ({self._x(node.if_get_cond())}) {{")
            self._scoped(node.if_get_then_node(), depth + 1, bound)
            if node.if_has_else_node():
                self.lines.append(f"{pad}}} else {{")
                self._scoped(node.if_get_else_node(), depth + 1, bound)
            self.lines.append(f"{pad}}}")
        elif t == isl.ast_node_type.user:
            self._user(node, depth, bound)
        else:
            raise CodegenError(f"unexpected isl AST node {t} in a kernel")

    def _row_mark(self, node: isl.AstNode, name: str, depth: int, bound: frozenset[str]) -> None:
        print_row_mark(self, node, name, depth, bound)

    def _scoped(self, node: isl.AstNode, depth: int, bound: frozenset[str]) -> None:
        self._scopes.append(set())
        self.emit(node, depth, bound)
        self._scopes.pop()

    def _x(self, expr: isl.AstExpr) -> str:
        return strip_parens(expr_to_text(expr, self.dialect))

    def _for(self, node: isl.AstNode, depth: int, bound: frozenset[str]) -> None:
        pad = "  " * depth
        it = node.for_get_iterator().get_id().get_name()
        init, cond = self._x(node.for_get_init()), self._x(node.for_get_cond())
        inc = int(node.for_get_inc().get_val().to_python())
        axis = self.axes.get(it)
        if self._in_cyclic and it == self.cyclic:
            print_cyclic_for(self, node, it, init, cond, inc, depth, bound)
            return
        if axis is None:
            self.lines.append(f"{pad}for (long long {it} = {init}; {cond}; {it} += {inc}) {{")
            self._scoped(node.for_get_body(), depth + 1, bound)
            self.lines.append(f"{pad}}}")
            return
        origin = self.origins.get(it)
        # from the axis's origin, one value per thread (a strided loop leaves threads idle): the mapping
        # is the same in every loop of the kernel, whatever its start and step
        self.strides[it] = math.gcd(self.strides.get(it, 0), 1 if origin is not None else inc)
        step = f"(long long) {axis}" if inc == 1 or origin is not None else f"{inc} * (long long) {axis}"
        opened = it in self._scopes[-1]
        if opened:  # a second mapped loop on the same axis in this C scope: give it its own block
            self.lines.append(f"{pad}{{")
            depth += 1
            pad = "  " * depth
            self._scopes.append(set())
        self._scopes[-1].add(it)
        if origin is not None and (strip_parens(origin) != strip_parens(init) or inc != 1):
            # counted from the axis's origin (the launch extent's low end), not from this loop's start: a
            # start that moves with a loop around it inside the kernel (nussinov's k tiles), or differs
            # between two loop nests on the axis, would give one element to two threads with no barrier
            # between them; from the origin, each element has one thread in every loop of the kernel
            self.lines.append(f"{pad}const long long {it} = {_plus(origin, step)};  /* one element, one thread: from the axis's origin */")
            start = "" if strip_parens(origin) == strip_parens(init) else f"{it} >= {as_operand(init)} && "
            stride = "" if inc == 1 else f"({it} - {as_operand(init)}) % {inc} == 0 && "
            self.lines.append(f"{pad}if ({start}{stride}({cond})) {{")
        else:
            self.lines.append(f"{pad}const long long {it} = {_plus(init, step)};")
            self.lines.append(f"{pad}if ({cond}) {{")
        self._scoped(node.for_get_body(), depth + 1, bound | {it})
        self.lines.append(f"{pad}}}")
        if opened:
            self._scopes.pop()
            self.lines.append("  " * (depth - 1) + "}")

    def _user(self, node: isl.AstNode, depth: int, bound: frozenset[str]) -> None:
        pad = "  " * depth
        call = statement_call(node)
        stmt = call.statement
        self.statements.append(stmt.name)
        if stmt.name in self.barriers:
            # every thread of the block reaches it: only block-uniform guards
            unbound = [ax for it, ax in self.axes.items() if it not in bound and ax.startswith("blockIdx")]
            guard = f"if ({' && '.join(f'{ax} == 0' for ax in unbound)}) " if unbound else ""
            self.lines.append(f"{pad}{guard}__syncthreads();  /* {stmt.name} */")
            return
        for k, a in enumerate(stmt.accesses):
            if a.array in self.promoted:
                self.buffers.add(a.array)
            elif a.array not in self.dialect.private:
                self.arrays[a.array] = self.arrays.get(a.array, False) or k == stmt.target
        self.scalars.update(n.name for n in stmt.value.walk() if isinstance(n, ScalarArg))
        unbound = [self._pinned(it, ax, call) for it, ax in self.axes.items() if it not in bound]
        if self._in_cyclic and self.cyclic not in bound:
            unbound.append("threadIdx.x")  # the shared loop was not printed (one iteration): thread 0 runs it
            if self.grid_cyclic:
                unbound.append("blockIdx.x")
        elif self.cyclic and not self._in_cyclic and stmt.write.array not in self.dialect.private:
            unbound.append("threadIdx.x")  # a per-row statement writing memory: thread 0 alone (cuda_rows.py)
        target = expr_to_text(call.write, self.dialect)
        text = f"{target} {stmt.op} {value_text(stmt.value, call, self.dialect)};  /* {stmt.name} */"
        if unbound:
            guard = " && ".join(ax if " == " in ax else f"{ax} == 0" for ax in unbound)
            text = f"if ({guard}) {text}"
        self.lines.append(pad + text)

    def _pinned(self, it: str, axis: str, call: StatementCall) -> str:
        """The guard of a statement for a mapped member isl printed no loop for (its value is fixed by the
        loops around): on a thread axis, the thread that value maps to, counted from the axis's origin as
        the printed loops are, so that the thread matches the one the barrier placement assumed
        (``schedule/movement/barriers.py``); on a block axis (or without the value), index 0."""
        origin = self.origins.get(it)
        value = (call.member_values or {}).get(it)
        if not axis.startswith("threadIdx") or origin is None or value is None:
            return axis
        return f"(long long) {axis} == {as_operand(self._x(value))} - {as_operand(origin)}"


# ----- the translation unit ---------------------------------------------------------------------------
