"""The Python loop DSL: ``@pf.program`` turns a function of affine loops into a :class:`Program`.

The function is never executed. Its source is parsed with :mod:`ast`; loops, conditions and assignments are
described to a :class:`~polyfuse.ir.builder.ProgramBuilder`. Subscripts, loop bounds and ``if`` conditions
must be affine in the loop iterators and the size params (``//`` and ``%`` by constants, ``min``/``max``
allowed); values may be anything the expression nodes support. Every rejected construct raises
:class:`SourceError` pointing at it.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import textwrap
from collections.abc import Callable
from typing import Any

import islpy as isl

from polyfuse.analysis.checks import check_program
from polyfuse.errors import SourceError
from polyfuse.frontend import intrinsics
from polyfuse.frontend.values import ValueTranslator
from polyfuse.ir.builder import ProgramBuilder, Scope
from polyfuse.ir.program import Program
from polyfuse.types import ArrayType, DType, Param, SizeExpr, f32, f64, promote

AFFINE_HINT = "subscripts, loop bounds and conditions must be affine: sums of iterators and sizes times constants, with // and % by constants, min and max"


def program(fn: Callable | None = None, *, assume: str | None = None, name: str | None = None) -> Any:
    """Decorator: ``@pf.program`` or ``@pf.program(assume="N >= 2")`` returns a :class:`Program`."""
    if fn is None:
        return lambda f: program(f, assume=assume, name=name)
    return DslReader(fn, assume=assume, name=name).read()


class DslReader:
    """Reads one decorated function into a Program."""

    def __init__(self, fn: Callable, *, assume: str | None = None, name: str | None = None) -> None:
        self.fn = fn
        self.assume = assume
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        try:
            raw_lines, self.first_line = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise SourceError(f"cannot read the source of {fn.__name__!r}: {e}") from None
        raw = "".join(raw_lines)
        dedented = textwrap.dedent(raw)
        self.col_shift = len(raw_lines[0]) - len(raw_lines[0].lstrip()) if dedented != raw else 0
        tree = ast.parse(dedented)
        self.fdef = tree.body[0]
        if not isinstance(self.fdef, ast.FunctionDef):
            raise self.error(tree.body[0], "@pf.program applies to a function definition")
        self.env: dict[str, Any] = dict(fn.__globals__)
        closure = inspect.getclosurevars(fn)
        self.env.update(closure.nonlocals)
        self.name = name or fn.__name__
        self.local_scalars: dict[str, DType] = {}
        self.builder: ProgramBuilder | None = None

    # ----- errors -------------------------------------------------------------------------------
    def error(self, node: ast.AST, message: str, hint: str | None = None) -> SourceError:
        line = self.first_line + getattr(node, "lineno", 1) - 1
        col = getattr(node, "col_offset", 0) + self.col_shift
        return SourceError(
            message,
            filename=self.filename,
            line=line,
            col=col,
            source_line=linecache.getline(self.filename, line) or None,
            hint=hint,
        )

    def snippet(self, node: ast.AST) -> str:
        return ast.unparse(node)

    # ----- entry --------------------------------------------------------------------------------
    def read(self) -> Program:
        params = self._collect_params()
        b = self.builder = ProgramBuilder(self.name, params, self.filename, self.first_line)
        self.values = ValueTranslator(self)
        self._read_arguments()
        declared_floats = [a.dtype for a in b.arrays.values() if a.dtype.is_float]
        self.default_float = f64 if not declared_floats else _widest(declared_floats)
        for stmt in self._body(self.fdef.body):
            self.statement(stmt)
        assume = self._assume_set() if self.assume else None
        prog = b.build(assume)
        return check_program(prog)

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            return body[1:]
        return body

    def _collect_params(self) -> list[str]:
        """Every size param the function mentions, in order of first mention."""
        found: list[str] = []
        for node in ast.walk(self.fdef):
            if isinstance(node, ast.Name) and isinstance(self.env.get(node.id), Param):
                p = self.env[node.id].name
                if p not in found:
                    found.append(p)
        for node in ast.walk(self.fdef):
            if isinstance(node, ast.Name):
                for p in _params_in(self.env.get(node.id)):
                    if p not in found:
                        found.append(p)
        if self.assume:
            try:
                tree = ast.parse(self.assume, mode="eval")
            except SyntaxError:
                raise self.error(self.fdef, f"cannot parse assume={self.assume!r}") from None
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and node.id not in found:
                    v = self.env.get(node.id)
                    found.append(v.name if isinstance(v, Param) else node.id)
        return found

    def _try_eval(self, node: ast.expr) -> Any:
        try:
            return eval(compile(ast.Expression(node), "<annotation>", "eval"), self.env)  # noqa: S307
        except Exception:  # noqa: BLE001 - anything unevaluable is simply not a param
            return None

    def _read_arguments(self) -> None:
        b = self.builder
        args = self.fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(self.fdef, "program arguments must be plain annotated names (no *args, **kwargs, defaults)")
        for arg in args.args:
            if arg.annotation is None:
                raise self.error(arg, f"argument {arg.arg!r} needs an annotation such as pf.f32[N, M] or pf.f32")
            ann = self._try_eval(arg.annotation)
            if isinstance(ann, ArrayType):
                shape = self._shape(ann.shape, arg.annotation)
                b.add_array(arg.arg, shape, ann.dtype, "input", argument=True)
            elif isinstance(ann, DType):
                b.add_scalar(arg.arg, ann)
            else:
                raise self.error(arg.annotation, f"unsupported annotation {self.snippet(arg.annotation)!r} for argument {arg.arg!r}",
                                 hint="use pf.f32[N, M] for arrays, pf.f32 / pf.f64 / pf.i32 for scalars")

    def _shape(self, dims: tuple, node: ast.AST) -> list[SizeExpr]:
        shape = []
        for d in dims:
            try:
                e = SizeExpr.of(d)
            except TypeError as err:
                raise self.error(node, f"array shape entry {d!r} is not affine in the sizes: {err}") from None
            shape.append(e)
        return shape

    def _assume_set(self) -> isl.Set:
        tree = ast.parse(self.assume, mode="eval")
        scope = self.builder.param_scope()
        # Report problems at the decorator line, the only place the text appears.
        holder = self.fdef.decorator_list[0] if self.fdef.decorator_list else self.fdef
        try:
            return self.condition(tree.body, scope)
        except SourceError as e:
            raise self.error(holder, f"in assume={self.assume!r}: {e.reason}") from None

    # ----- statements ---------------------------------------------------------------------------
    def statement(self, node: ast.stmt) -> None:
        b = self.builder
        if isinstance(node, ast.For):
            self._for(node)
        elif isinstance(node, ast.If):
            cond = self.condition(node.test, b.scope())
            with b.condition(cond):
                for s in node.body:
                    self.statement(s)
            if node.orelse:
                with b.condition(b.scope().universe().subtract(cond)):
                    for s in node.orelse:
                        self.statement(s)
        elif isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise self.error(node, "chained assignment `a = b = ...` is not supported", hint="assign each target separately")
            self._assign(node, node.targets[0], "=", node.value)
        elif isinstance(node, ast.AnnAssign):
            if not isinstance(node.target, ast.Name) or node.value is None:
                raise self.error(node, "annotated assignments declare local scalars: `acc: pf.f32 = 0.0`")
            dt = self._try_eval(node.annotation)
            if not isinstance(dt, DType):
                raise self.error(node.annotation, f"local scalar annotation must be pf.f32, pf.f64 or pf.i32, not {self.snippet(node.annotation)!r}")
            self._declare_local(node.target, dt)
            self._assign(node, node.target, "=", node.value)
        elif isinstance(node, ast.AugAssign):
            ops = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*="}
            op = ops.get(type(node.op))
            if op is None:
                raise self.error(node, f"augmented assignment {ast.unparse(node).split()[1]!r} is not supported", hint="use +=, -=, *= or a plain assignment")
            self._assign(node, node.target, op, node.value)
        elif isinstance(node, ast.Pass):
            pass
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            pass  # a stray string or constant: documentation, not code
        else:
            what = {ast.While: "while loops", ast.Return: "return", ast.Break: "break", ast.Continue: "continue",
                    ast.With: "with blocks", ast.FunctionDef: "nested functions", ast.Expr: "expression statements (calls)",
                    ast.Import: "imports", ast.ImportFrom: "imports", ast.Delete: "del", ast.Global: "global",
                    ast.Nonlocal: "nonlocal", ast.Try: "try blocks", ast.Raise: "raise", ast.Assert: "assert"}.get(type(node), type(node).__name__)
            raise self.error(node, f"unsupported statement: {what}",
                             hint="a program body holds for-range loops, affine ifs and assignments to array elements or local scalars")

    def _for(self, node: ast.For) -> None:
        b = self.builder
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "a loop variable must be a single name")
        it = node.target.id
        scope = b.scope()
        if it in scope.iterators:
            raise self.error(node.target, f"loop variable {it!r} shadows an enclosing loop's variable")
        if scope.has(it) or it in b.arrays or it in b.scalars or it in self.local_scalars:
            raise self.error(node.target, f"loop variable {it!r} reuses the name of a size, array or scalar")
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range" and not call.keywords and 1 <= len(call.args) <= 3):
            raise self.error(node.iter, f"unsupported loop `for {it} in {self.snippet(node.iter)}`", hint="loops must be `for i in range(lo, hi[, step])`")
        if node.orelse:
            raise self.error(node, "for-else is not supported")
        args = call.args
        if len(args) == 1:
            lo, hi = scope.const(0), self.affine(args[0], scope)
        else:
            lo, hi = self.affine(args[0], scope), self.affine(args[1], scope)
        step = 1
        if len(args) == 3:
            step = self.constant_int(args[2])
            if step is None or step <= 0:
                raise self.error(args[2], f"loop step {self.snippet(args[2])!r} must be a positive integer constant")
        with b.loop(it, lo, hi, step):
            for s in node.body:
                self.statement(s)

    def _declare_local(self, target: ast.Name, dtype: DType) -> None:
        b = self.builder
        name = target.id
        if name in b.arrays and b.arrays[name].ndim > 0 or name in b.scalars or b.scope().has(name):
            raise self.error(target, f"{name!r} is already an array, scalar argument, size or loop variable")
        if name not in self.local_scalars:
            self.local_scalars[name] = dtype
            b.add_array(name, [], dtype, "temp", argument=False)

    def _assign(self, node: ast.stmt, target: ast.expr, op: str, value: ast.expr) -> None:
        b = self.builder
        if isinstance(target, ast.Name):
            name = target.id
            if op == "=" and isinstance(value, ast.Call) and self._resolve(value.func) is intrinsics.empty:
                self._declare_temp(target, value)
                return
            if name not in self.local_scalars:
                if op != "=":
                    raise self.error(target, f"{name!r} is updated before it is assigned")
                if name in b.arrays or name in b.scalars or b.scope().has(name):
                    raise self.error(target, f"cannot assign to {name!r}: it is an array, a scalar argument, a size or a loop variable",
                                     hint="write array elements with subscripts; scalar arguments are read-only")
                self._declare_local(target, self.values.infer_dtype(value, b.scope()))
            subs: list[isl.PwAff] = []
            array = name
        elif isinstance(target, ast.Subscript):
            array, subs = self.subscript(target, b.scope(), store=True)
        else:
            raise self.error(target, f"cannot assign to `{self.snippet(target)}`", hint="assign to an array element A[i, j] or a local scalar")
        if b.arrays[array].role == "input" and array in b.arguments:
            b.set_role(array, "output")
        scope = b.scope()
        text = ast.get_source_segment(self._source(), node) or ast.unparse(node)
        line = self.first_line + node.lineno - 1
        target_dtype = b.arrays[array].dtype
        b.add_statement(
            (array, subs, self.snippet(target)), op,
            lambda read: self.values.translate(value, scope, read, target_dtype),
            line, text.strip(),
        )

    def _source(self) -> str:
        return textwrap.dedent("".join(inspect.getsourcelines(self.fn)[0]))

    def _declare_temp(self, target: ast.Name, call: ast.Call) -> None:
        b = self.builder
        name = target.id
        if b.scope().iterators:
            raise self.error(call, "pf.empty must be called at the top level of the program, outside loops")
        if name in b.arrays or name in b.scalars or name in self.local_scalars:
            raise self.error(target, f"{name!r} is declared twice")
        if len(call.args) != 2 or call.keywords:
            raise self.error(call, "pf.empty takes a shape tuple and a dtype: pf.empty((N, M), pf.f32)")
        shape = self._try_eval(call.args[0])
        dtype = self._try_eval(call.args[1])
        if not isinstance(dtype, DType):
            raise self.error(call.args[1], f"{self.snippet(call.args[1])!r} is not a dtype (pf.f32, pf.f64, pf.i32)")
        if shape is None:
            raise self.error(call.args[0], f"cannot evaluate the shape {self.snippet(call.args[0])!r}")
        if not isinstance(shape, tuple):
            shape = (shape,)
        b.add_array(name, self._shape(shape, call.args[0]), dtype, "temp", argument=False)

    # ----- affine expressions -------------------------------------------------------------------
    def _resolve(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            return self.env[node.id] if node.id in self.env else getattr(builtins, node.id, None)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return getattr(base, node.attr, None) if base is not None else None
        return None

    def constant_int(self, node: ast.expr) -> int | None:
        """The value of an integer constant expression (literals and global ints), else None."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and self.builder is not None and node.id not in self.builder.scope().iterators:
            v = self.env.get(node.id)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.constant_int(node.operand)
            return None if v is None else -v
        if isinstance(node, ast.BinOp):
            a, c = self.constant_int(node.left), self.constant_int(node.right)
            if a is None or c is None:
                return None
            ops = {ast.Add: lambda: a + c, ast.Sub: lambda: a - c, ast.Mult: lambda: a * c,
                   ast.FloorDiv: lambda: a // c if c else None, ast.Mod: lambda: a % c if c else None,
                   ast.Pow: lambda: a**c if c >= 0 else None}
            f = ops.get(type(node.op))
            return f() if f else None
        return None

    def affine(self, node: ast.expr, scope: Scope) -> isl.PwAff:
        """The (quasi-)affine function that ``node`` denotes in ``scope``."""
        k = self.constant_int(node)
        if k is not None:
            return scope.const(k)
        if isinstance(node, ast.Name):
            if node.id in scope.iterators:
                return scope.var(node.id)
            v = self.env.get(node.id)
            if isinstance(v, Param) and v.name in scope.params:
                return scope.var(v.name)
            if node.id in scope.params:
                return scope.var(node.id)
            if self.builder is not None and (node.id in self.builder.arrays or node.id in self.builder.scalars):
                raise self.error(node, f"non-affine expression `{node.id}`: array and scalar values cannot appear in subscripts, bounds or conditions", hint=AFFINE_HINT)
            raise self.error(node, f"unknown name {node.id!r} in an affine expression", hint=AFFINE_HINT)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, (ast.Add, ast.Sub)):
                a, c = self.affine(node.left, scope), self.affine(node.right, scope)
                return a + c if isinstance(node.op, ast.Add) else a - c
            if isinstance(node.op, ast.Mult):
                kl, kr = self.constant_int(node.left), self.constant_int(node.right)
                if kl is not None:
                    return self.affine(node.right, scope) * kl
                if kr is not None:
                    return self.affine(node.left, scope) * kr
                raise self.error(node, f"non-affine expression `{self.snippet(node)}`: a product of two variables", hint=AFFINE_HINT)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
                d = self.constant_int(node.right)
                if d is None or d <= 0:
                    raise self.error(node, f"non-affine expression `{self.snippet(node)}`: // and % need a positive integer constant on the right", hint=AFFINE_HINT)
                a = self.affine(node.left, scope)
                if isinstance(node.op, ast.FloorDiv):
                    return a.scale_down_val(isl.Val.int_from_si(a.get_ctx(), d)).floor()
                return a.mod_val(isl.Val.int_from_si(a.get_ctx(), d))
            raise self.error(node, f"non-affine expression `{self.snippet(node)}`: operator {type(node.op).__name__} is not allowed", hint=AFFINE_HINT)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            a = self.affine(node.operand, scope)
            return -a if isinstance(node.op, ast.USub) else a
        if isinstance(node, ast.Call):
            f = self._resolve(node.func)
            kind = {min: "min", max: "max", intrinsics.min: "min", intrinsics.max: "max"}.get(f) if f is not None else None
            if kind and len(node.args) >= 2 and not node.keywords:
                parts = [self.affine(a, scope) for a in node.args]
                out = parts[0]
                for p in parts[1:]:
                    out = out.min(p) if kind == "min" else out.max(p)
                return out
            raise self.error(node, f"non-affine expression `{self.snippet(node)}`: only min(...) and max(...) calls are allowed here", hint=AFFINE_HINT)
        if isinstance(node, ast.Subscript):
            raise self.error(node, f"non-affine expression `{self.snippet(node)}`: array values cannot appear in subscripts, bounds or conditions (indirect access)", hint=AFFINE_HINT)
        if isinstance(node, ast.Constant):
            raise self.error(node, f"non-integer constant {node.value!r} in an affine expression", hint=AFFINE_HINT)
        raise self.error(node, f"non-affine expression `{self.snippet(node)}`", hint=AFFINE_HINT)

    def condition(self, node: ast.expr, scope: Scope) -> isl.Set:
        """The set of points of ``scope`` where the affine condition ``node`` holds."""
        if isinstance(node, ast.BoolOp):
            parts = [self.condition(v, scope) for v in node.values]
            out = parts[0]
            for p in parts[1:]:
                out = out & p if isinstance(node.op, ast.And) else out | p
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return scope.universe().subtract(self.condition(node.operand, scope))
        if isinstance(node, ast.Compare):
            out = scope.universe()
            left = self.affine(node.left, scope)
            for op, right_node in zip(node.ops, node.comparators):
                right = self.affine(right_node, scope)
                cmp = {ast.Lt: left.lt_set, ast.LtE: left.le_set, ast.Gt: left.gt_set, ast.GtE: left.ge_set,
                       ast.Eq: left.eq_set, ast.NotEq: left.ne_set}.get(type(op))
                if cmp is None:
                    raise self.error(node, f"unsupported comparison in `{self.snippet(node)}`", hint="use < <= > >= == != between affine expressions")
                out = out & cmp(right)
                left = right
            return out
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return scope.universe() if node.value else scope.universe().subtract(scope.universe())
        raise self.error(node, f"non-affine condition `{self.snippet(node)}`",
                         hint="conditions compare affine expressions of iterators and sizes, joined by and / or / not; use pf.where for data-dependent choices")

    def subscript(self, node: ast.Subscript, scope: Scope, store: bool = False) -> tuple[str, list[isl.PwAff]]:
        """The array and affine subscripts of ``A[i, j]``, checked against the array's rank."""
        if not isinstance(node.value, ast.Name):
            raise self.error(node, f"unsupported subscript base `{self.snippet(node.value)}`", hint="subscript a named array: A[i, j]")
        name = node.value.id
        b = self.builder
        if name not in b.arrays or (name in self.local_scalars):
            what = "scalar" if name in b.scalars or name in self.local_scalars else "unknown array"
            raise self.error(node.value, f"{what} {name!r} cannot be subscripted")
        index = node.slice
        elems = list(index.elts) if isinstance(index, ast.Tuple) else [index]
        for e in elems:
            if isinstance(e, ast.Slice):
                raise self.error(e, f"slices are not supported in `{self.snippet(node)}`", hint="write an explicit loop and index single elements")
        arr = b.arrays[name]
        if len(elems) != arr.ndim:
            raise self.error(node, f"array {name!r} has {arr.ndim} dimensions but `{self.snippet(node)}` gives {len(elems)} subscripts")
        return name, [self.affine(e, scope) for e in elems]


def _widest(dtypes: list[DType]) -> DType:
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote(out, d)
    return out if out.is_float else f32


def _params_in(value: Any) -> list[str]:
    if isinstance(value, Param):
        return [value.name]
    if isinstance(value, SizeExpr):
        return [n for n, _ in value.terms]
    if isinstance(value, ArrayType):
        return [p for d in value.shape for p in _params_in(d)]
    if isinstance(value, tuple):
        return [p for d in value for p in _params_in(d)]
    return []
