"""The reference interpreter: run a program sequentially, in source order, on numpy arrays.

Every other back end is tested against it, so it takes the shortest path from the IR to execution: the
source schedule goes through the shared AST builder (:func:`polyfuse.codegen.ast.build_ast`), the AST is
printed as one Python function, and that function is compiled once per program and cached in
``program._cache``. Loops become ``for c in range(lo, hi + 1)``; indices are the expressions isl built, so
the interpreter and the C and CUDA printers read the same AST.

Arithmetic happens in the arrays' dtypes, as in C: constants, scalar arguments and array elements are numpy
scalars of their declared type (an ``f32`` program computes in float32), and casts are explicit ``Cast``
nodes. ``max``/``min`` on floats ignore a NaN operand like C's ``fmax``/``fmin``; integer ``//`` and ``%``
floor (the DSL's Python semantics) while ``tdiv`` and ``trem`` truncate toward zero (C's ``/`` and ``%``).
A float32 ``exp``, ``log``, ``sqrt`` or ``tanh`` is computed in float64 and rounded to float32, within
half an ulp: numpy's float32 ``exp`` is off by up to 2 ulp, more than the generated C's (0.58), and a
layer norm of a nearly constant row magnifies that past any fixed tolerance (a fuzzed 3 x 3 row).
Floating-point exceptions give inf or nan as in C, without numpy warnings. Input arrays are passed to the
generated code as read-only views, so the interpreter cannot modify them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import islpy as isl
import numpy as np

from polyfuse.codegen.ast import PythonDialect, StatementCall, build_ast, expr_to_text, statement_call
from polyfuse.errors import CodegenError, PolyfuseError, api_boundary
from polyfuse.ir.expr import Binary, Cast, Compare, Const, Expr, IndexValue, Logical, Read, ScalarArg, Unary, Where
from polyfuse.ir.program import Program
from polyfuse.runtime.args import bind, gather
from polyfuse.types import DTYPES, DType

CACHE_KEY = "reference"
INDENT = "    "
_NUMPY_UNARY = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh"}
_INFIX = {"+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>"}


@dataclass(frozen=True, eq=False)
class Interpreter:
    """A program compiled to Python: call it like a compiled executable (``pf.reference(prog)(a, b)`` or by
    keyword; outputs not passed are allocated, and the written arrays are returned).

    ``source`` is the generated Python function (print it to see what runs); outputs are written in place
    into the arrays passed.
    """

    program: Program
    source: str
    function: Callable[..., None]

    @api_boundary
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = bind(self.program, gather(self.program, args, kwargs), allocate=True)
        arrays: dict[str, np.ndarray] = {}
        for name, value in bound.arrays.items():
            if self.program.arrays[name].role == "input":
                value = value.view()
                value.flags.writeable = False
            arrays[name] = value
        for a in self.program.arrays.values():
            if a.role == "temp" and a.ndim > 0:
                arrays[a.name] = np.zeros(a.concrete_shape(bound.sizes), a.dtype.numpy)
        with np.errstate(all="ignore"):
            self.function(bound.sizes, arrays, bound.scalars)
        return bound.returned

    def __repr__(self) -> str:
        return f"<pf.reference {self.program.name}>"


@api_boundary
def reference(program: Program, schedule: isl.Schedule | None = None) -> Interpreter:
    """The sequential interpreter of ``program``: ``pf.reference(prog)(A=a, C=c)`` writes ``c`` in place.

    With ``schedule`` (a schedule tree over the program's statements, e.g. a transformed one), the
    statements run in that order instead of the source order; such interpreters are not cached.
    """
    if not isinstance(program, Program):
        hint = " (decorate the function with @pf.program)" if callable(program) else ""
        raise PolyfuseError(f"pf.reference expects a pf.Program, got {type(program).__name__} {getattr(program, '__name__', '')}".rstrip() + hint)
    if schedule is None:
        cached = program._cache.get(CACHE_KEY)
        # dataclasses.replace() hands the same _cache dict to the new Program: check whose entry it is.
        if cached is None or cached.program is not program:
            cached = program._cache[CACHE_KEY] = _compile(program, program.schedule)
        return cached
    return _compile(program, schedule)


def python_source(program: Program, schedule: isl.Schedule) -> tuple[str, tuple[Any, ...]]:
    """The Python function ``_run(_sizes, _arrays, _scalars)`` that executes ``schedule``, and the constants
    it reads from ``_K``."""
    writer = _Writer(program)
    return writer.function(build_ast(program, schedule)), tuple(writer.constants)


def _tdiv(a: Any, b: Any) -> Any:
    """C's ``a / b`` on integer numpy scalars of one dtype: the quotient truncated toward zero."""
    q = a // b
    return q + type(q)(1) if q * b != a and (a < 0) != (b < 0) else q


def _trem(a: Any, b: Any) -> Any:
    """C's ``a % b``: the remainder takes the sign of ``a``, ``a == b * (a / b) + a % b``."""
    return a - b * _tdiv(a, b)


def _compile(program: Program, schedule: isl.Schedule) -> Interpreter:
    source, constants = python_source(program, schedule)
    namespace: dict[str, Any] = {"_np": np, "_K": constants, "_tdiv": _tdiv, "_trem": _trem}
    namespace.update({f"_{d.name}": d.numpy for d in DTYPES.values()})
    exec(compile(source, f"<polyfuse reference {program.name}>", "exec"), namespace)  # noqa: S102 - our own generated code
    return Interpreter(program, source, namespace["_run"])


class _Names(PythonDialect):
    """Python names for isl ids: ``p_N`` (size), ``a_A`` (array), ``i_c0`` (AST iterator). The prefixes keep
    program names away from Python builtins and from the generator's own ``_``-names. A 0-d temporary
    is a plain local variable."""

    def __init__(self, program: Program) -> None:
        self.params = frozenset(program.params)
        self.arrays = frozenset(program.arrays)
        self.locals = frozenset(a.name for a in program.arrays.values() if a.role == "temp" and a.ndim == 0)

    def name(self, ident: str) -> str:
        if ident in self.params:
            return f"p_{ident}"
        if ident in self.arrays:
            return f"a_{ident}"
        return f"i_{ident}"

    def access(self, array: str, indices: Sequence[str]) -> str:
        if not indices and array in self.locals:
            return self.name(array)
        return super().access(array, indices)


class _Writer:
    """Prints an annotated isl AST as the body of one Python function."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.names = _Names(program)
        self.constants: list[Any] = []
        self._constant_names: dict[tuple[str, Any], str] = {}
        self.lines: list[str] = []

    def function(self, tree: isl.AstNode) -> str:
        self.lines = []
        self.node(tree, 1)
        body = self.lines
        head = ["def _run(_sizes, _arrays, _scalars):"]
        head += [f"{INDENT}{self.names.name(p)} = _sizes[{p!r}]" for p in self.program.params]
        for a in self.program.arrays.values():
            if a.name in self.names.locals:
                head.append(f"{INDENT}{self.names.name(a.name)} = _{a.dtype.name}(0)")
            else:
                head.append(f"{INDENT}{self.names.name(a.name)} = _arrays[{a.name!r}]")
        head += [f"{INDENT}s_{s} = _scalars[{s!r}]" for s in self.program.scalars]
        head += [f"{INDENT}k_{k} = _K[{k}]" for k in range(len(self.constants))]
        return "\n".join(head + body + [f"{INDENT}return None", ""])

    # ----- AST nodes ------------------------------------------------------------------------------
    def emit(self, depth: int, line: str) -> None:
        self.lines.append(INDENT * depth + line)

    def body(self, node: isl.AstNode, depth: int) -> None:
        """``node`` as an indented block; ``pass`` when it prints nothing."""
        before = len(self.lines)
        self.node(node, depth)
        if len(self.lines) == before:
            self.emit(depth, "pass")

    def node(self, node: isl.AstNode, depth: int) -> None:
        kind = node.get_type()
        if kind == isl.ast_node_type.block:
            children = node.block_get_children()
            for k in range(children.n_ast_node()):
                self.node(children.get_at(k), depth)
        elif kind == isl.ast_node_type.mark:
            self.node(node.mark_get_node(), depth)  # marks steer the parallel back ends only
        elif kind == isl.ast_node_type.if_:
            self.emit(depth, f"if {self.expr(node.if_get_cond())}:")
            self.body(node.if_get_then_node(), depth + 1)
            if node.if_has_else_node():
                self.emit(depth, "else:")
                self.body(node.if_get_else_node(), depth + 1)
        elif kind == isl.ast_node_type.for_:
            self.loop(node, depth)
        elif kind == isl.ast_node_type.user:
            self.statement(statement_call(node), depth)
        else:
            raise CodegenError(f"unexpected isl AST node:\n{node.to_C_str()}")

    def loop(self, node: isl.AstNode, depth: int) -> None:
        """An isl for node ``for (it = init; cond; it += inc)``: a ``range`` when ``cond`` bounds ``it``
        from above by an expression free of ``it`` (isl's atomic upper bound), else a ``while`` loop."""
        iterator = node.for_get_iterator()
        it = self.expr(iterator)
        init = self.expr(node.for_get_init())
        if node.for_is_degenerate():
            self.emit(depth, f"{it} = {init}")
            self.node(node.for_get_body(), depth)
            return
        cond, inc = node.for_get_cond(), self.expr(node.for_get_inc())
        upper = _upper_bound(cond, iterator.get_id().get_name())
        if upper is not None:
            bound, inclusive = upper
            stop = f"{self.expr(bound)} + 1" if inclusive else self.expr(bound)
            step = "" if inc == "1" else f", {inc}"
            self.emit(depth, f"for {it} in range({init}, {stop}{step}):")
            self.body(node.for_get_body(), depth + 1)
            return
        self.emit(depth, f"{it} = {init}")
        self.emit(depth, f"while {self.expr(cond)}:")
        self.body(node.for_get_body(), depth + 1)
        self.emit(depth + 1, f"{it} += {inc}")

    def statement(self, call: StatementCall, depth: int) -> None:
        stmt = call.statement
        target_dtype = self.program.arrays[stmt.write.array].dtype
        value = self.value(stmt.value, call)
        if stmt.value.dtype != target_dtype:
            value = f"_{target_dtype.name}({value})"
        self.emit(depth, f"{self.expr(call.write)} {stmt.op} {value}")

    # ----- expressions ----------------------------------------------------------------------------
    def expr(self, expr: isl.AstExpr) -> str:
        return expr_to_text(expr, self.names)

    def value(self, e: Expr, call: StatementCall) -> str:
        """The Python text of a value expression, computing in numpy scalars of each node's dtype."""
        v = lambda x: self.value(x, call)  # noqa: E731
        if isinstance(e, Const):
            return self.constant(e.value, e.dtype)
        if isinstance(e, Read):
            return self.expr(call.accesses[e.access])
        if isinstance(e, ScalarArg):
            return f"s_{e.name}"
        if isinstance(e, IndexValue):
            return f"_{e.dtype.name}({self.expr(call.index_expr(e))})"
        if isinstance(e, Unary):
            x = v(e.operand)
            if e.op == "neg":
                return f"(-{x})"
            if e.op == "not":
                return f"(not {x})"
            if e.op == "abs":
                return f"abs({x})"
            if e.op in _NUMPY_UNARY:
                if e.dtype.name == "f32":  # in double, then rounded: numpy's own float32 exp is off by up to 2 ulp
                    return f"_f32(_np.{_NUMPY_UNARY[e.op]}(_f64({x})))"
                return f"_np.{_NUMPY_UNARY[e.op]}({x})"
        elif isinstance(e, Binary):
            a, b = v(e.lhs), v(e.rhs)
            if e.op in _INFIX:
                return f"({a} {e.op} {b})"
            if e.op in ("max", "min"):
                fn = ("fmax" if e.op == "max" else "fmin") if e.dtype.is_float else ("maximum" if e.op == "max" else "minimum")
                return f"_np.{fn}({a}, {b})"
            if e.op == "pow":
                return f"_np.power({a}, {b})"
            if e.op in ("tdiv", "trem"):
                return f"_{e.op}({a}, {b})"
        elif isinstance(e, Compare):
            return f"({v(e.lhs)} {e.op} {v(e.rhs)})"
        elif isinstance(e, Logical):
            return f"({v(e.lhs)} {e.op} {v(e.rhs)})"
        elif isinstance(e, Where):
            return f"({v(e.if_true)} if {v(e.cond)} else {v(e.if_false)})"
        elif isinstance(e, Cast):
            return f"_{e.dtype.name}({v(e.operand)})"
        raise CodegenError(f"the reference interpreter cannot evaluate {e!r}")

    def constant(self, value: float | int, dtype: DType) -> str:
        """A local bound to the numpy scalar ``dtype(value)``, created once per function."""
        key = (dtype.name, repr(value))
        name = self._constant_names.get(key)
        if name is None:
            name = self._constant_names[key] = f"k_{len(self.constants)}"
            self.constants.append(dtype.numpy(value))
        return name


def _upper_bound(cond: isl.AstExpr, iterator: str) -> tuple[isl.AstExpr, bool] | None:
    """``(bound, inclusive)`` when ``cond`` is ``iterator <= bound`` or ``iterator < bound``."""
    if cond.get_type() != isl.ast_expr_type.op or cond.get_op_type() not in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt):
        return None
    lhs, rhs = cond.get_op_arg(0), cond.get_op_arg(1)
    if lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != iterator or _mentions(rhs, iterator):
        return None
    return rhs, cond.get_op_type() == isl.ast_expr_op_type.le


def _mentions(expr: isl.AstExpr, name: str) -> bool:
    kind = expr.get_type()
    if kind == isl.ast_expr_type.id:
        return expr.get_id().get_name() == name
    if kind == isl.ast_expr_type.op:
        return any(_mentions(expr.get_op_arg(k), name) for k in range(expr.get_op_n_arg()))
    return False
