"""The Python loop DSL: ``@pf.program`` turns a function of affine loops into a :class:`Program`.

The function is never executed. Its source is parsed with :mod:`ast`, and its loops, conditions and
assignments are described to a :class:`~polyfuse.ir.builder.ProgramBuilder`. Subscripts, loop bounds and
``if`` conditions must be affine (see :mod:`polyfuse.frontend.affine`); right-hand sides may be anything
the expression nodes support (see :mod:`polyfuse.frontend.values`). Every rejected construct raises a
:class:`SourceError` that points at it (``file:line:col``, the source line and a caret) and says what is
allowed instead.

Names mean what Python would make them mean: closure variables and globals of the decorated function
(``pf.params`` sizes, integer constants, modules such as ``pf`` or ``math``), its arguments, the enclosing
loop variables, and local scalars, which become 0-d temporaries.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from collections.abc import Callable
from typing import Any

import islpy as isl
import numpy as np

from polyfuse.analysis.checks import check_program
from polyfuse.errors import SourceError, api_boundary, caller_frame
from polyfuse.frontend import intrinsics
from polyfuse.frontend.affine import AffineTranslator, Binding, NameKind
from polyfuse.frontend.source import FunctionSource, binding_of, params_in, without_docstring
from polyfuse.frontend.values import ValueTranslator
from polyfuse.ir.builder import ProgramBuilder, Scope
from polyfuse.ir.program import Program
from polyfuse.types import ArrayType, DType, SizeExpr, f64, promote

ANNOTATION_HINT = "annotate arrays as pf.f32[N, M] (sizes are ints or affine expressions of pf.params) and scalars as pf.f32, pf.f64 or pf.i32"
BODY_HINT = "a program body holds `for i in range(...)` loops, affine `if`s, and assignments (=, +=, -=, *=) to array elements or local scalars"
_STATEMENT_NAMES = {
    ast.While: "a while loop", ast.Return: "return", ast.Break: "break", ast.Continue: "continue",
    ast.With: "a with block", ast.AsyncWith: "a with block", ast.FunctionDef: "a nested function",
    ast.AsyncFunctionDef: "a nested function", ast.ClassDef: "a class", ast.Import: "an import",
    ast.ImportFrom: "an import", ast.Delete: "del", ast.Global: "global", ast.Nonlocal: "nonlocal",
    ast.Try: "a try block", ast.Raise: "raise", ast.Assert: "assert", ast.AsyncFor: "async for",
}
_STATEMENT_HINTS = {
    ast.While: "loops are `for i in range(lo, hi[, step])` with affine bounds",
    ast.Break: "loops always run their whole range; guard the body with an affine `if` instead",
    ast.Continue: "loops always run their whole range; guard the body with an affine `if` instead",
    ast.Return: "a program returns nothing: it writes its results into its array arguments",
}
_AUG_OPS = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*="}


@api_boundary
def program(fn: Callable | None = None, *, assume: str | None = None, name: str | None = None) -> Any:
    """Decorator: ``@pf.program`` or ``@pf.program(assume="N >= 2")`` returns a :class:`Program`.

    ``assume`` holds affine constraints on the sizes (``and`` / ``or`` / ``not`` of comparisons); they
    become the program's context, on top of every size being non-negative.
    """
    frame = inspect.currentframe()
    caller = caller_frame(frame.f_back) if frame is not None else None
    namespace = dict(caller.f_locals) if caller is not None else {}
    del frame, caller
    if fn is None:
        return api_boundary(lambda f: DslReader(f, assume=assume, name=name, namespace=namespace).read())
    return DslReader(fn, assume=assume, name=name, namespace=namespace).read()


class DslReader:
    """Reads one decorated function into a Program (one reader per function, used once)."""

    def __init__(self, fn: Callable, *, assume: Any = None, name: str | None = None,
                 namespace: dict[str, Any] | None = None) -> None:
        self.assume = assume
        self.name = name or getattr(fn, "__name__", "program")
        self.src = FunctionSource(fn, self.name, namespace)
        self.fdef = self.src.fdef
        self.env = self.src.env
        self.assigned_names = self.src.assigned_names
        self.local_scalars: dict[str, DType] = {}
        self.inferred_locals: dict[str, int] = {}  # local scalars typed by their first assignment -> its line
        self.builder: ProgramBuilder | None = None
        self.affine = AffineTranslator(self)
        self.values = ValueTranslator(self)
        self.default_float: DType = f64
        self._nesting = 0  # loops and ifs around the current statement
        self._origin: tuple[int, int] | None = None  # where the assume= text starts, while it is translated

    # ----- errors and names ---------------------------------------------------------------------
    def error(self, node: ast.AST, message: str, hint: str | None = None) -> SourceError:
        """A SourceError at ``node`` of the function's source (or of the ``assume=`` text)."""
        return self.src.error(node, message, hint, self._origin)

    def lookup(self, name: str, scope: Scope) -> Binding:
        """What ``name`` denotes at the point of the program whose naming context is ``scope``."""
        if name in scope.iterators:
            return Binding(NameKind.ITERATOR)
        if name in self.local_scalars:
            return Binding(NameKind.LOCAL)
        if self.builder is not None and name in self.builder.arrays:
            return Binding(NameKind.ARRAY)
        if self.builder is not None and name in self.builder.scalars:
            return Binding(NameKind.SCALAR_ARG)
        if name in self.env:
            return binding_of(self.env[name])
        if name in scope.params:
            return Binding(NameKind.PARAM, name)
        if hasattr(builtins, name):
            return Binding(NameKind.OTHER, getattr(builtins, name))
        return Binding(NameKind.UNKNOWN)

    def resolve(self, node: ast.expr, scope: Scope) -> Any:
        """The Python object a dotted name (``pf.exp``, ``math.sqrt``, ``max``) refers to, else None."""
        if isinstance(node, ast.Name):
            b = self.lookup(node.id, scope)
            return b.value if b.kind in (NameKind.OTHER, NameKind.INT, NameKind.FLOAT) else None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, scope)
            return getattr(base, node.attr, None) if base is not None else None
        return None

    # ----- entry --------------------------------------------------------------------------------
    def read(self) -> Program:
        """Translate the whole function; the result has passed the static checks."""
        annotations = self._annotations()
        params = self._collect_params(annotations)
        b = self.builder = ProgramBuilder(self.name, params, self.src.filename, self.src.first_line)
        self._read_arguments(annotations)
        floats = [a.dtype for a in b.arrays.values() if a.dtype.is_float] + [d for d in b.scalars.values() if d.is_float]
        self.default_float = _widest(floats) if floats else f64
        assume = self._assume_set() if self.assume is not None else None
        self.block(without_docstring(self.fdef.body))
        if not b.statements:
            raise self.error(self.fdef, f"program {self.name!r} has no statements", hint=BODY_HINT)
        return check_program(b.build(assume))

    def _annotations(self) -> dict[str, Any]:
        """Each argument's annotation object; string annotations are evaluated where the function is."""
        args = self.fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(self.fdef, "program arguments must be plain annotated names (no *args, **kwargs, keyword-only arguments or defaults)",
                             hint=ANNOTATION_HINT)
        given = self.src.annotations
        out: dict[str, Any] = {}
        for arg in args.args:
            if arg.annotation is None:
                raise self.error(arg, f"argument `{arg.arg}` needs an annotation", hint=ANNOTATION_HINT)
            obj = given.get(arg.arg, arg.annotation)
            if isinstance(obj, (str, ast.AST)):
                text = obj if isinstance(obj, str) else ast.unparse(arg.annotation)
                obj = self.src.evaluate(text, arg.annotation, self.src.annotation_env, f"the annotation of argument `{arg.arg}`", ANNOTATION_HINT)
            out[arg.arg] = obj
        return out

    def _collect_params(self, annotations: dict[str, Any]) -> list[str]:
        """Every size the program mentions: argument shapes first, then the body in source order, then
        ``assume=``."""
        found: list[str] = []

        def add(names: list[str]) -> None:
            found.extend(p for p in dict.fromkeys(names) if p not in found)

        for obj in annotations.values():
            add(params_in(obj))
        names = sorted((n for stmt in self.fdef.body for n in ast.walk(stmt) if isinstance(n, ast.Name)),
                       key=lambda n: (n.lineno, n.col_offset))
        for n in names:
            add(params_in(self.env.get(n.id)))
        if self.assume is not None:
            for n in self._assume_names():
                v = self.env.get(n.id)
                ps = params_in(v)
                if not ps and n.id not in found and not isinstance(v, (int, np.integer)):
                    raise self._assume_error(n, f"unknown size `{n.id}` in assume={self.assume!r}",
                                             hint="assume= constrains sizes created with pf.params")
                add(ps)
        for arg in self.fdef.args.args:
            if arg.arg in found:
                raise self.error(arg, f"argument `{arg.arg}` has the name of a size", hint="rename the argument or the pf.params size")
        return found

    # ----- assume= ------------------------------------------------------------------------------
    def _assume_node(self) -> ast.expr:
        """Where ``assume=`` is written: its value in the decorator call, else the decorator or def."""
        for dec in self.fdef.decorator_list:
            if isinstance(dec, ast.Call):
                for kw in dec.keywords:
                    if kw.arg == "assume":
                        return kw.value
        return self.fdef.decorator_list[0] if self.fdef.decorator_list else self.fdef

    def _assume_tree(self) -> ast.expr:
        node = self._assume_node()
        if not isinstance(self.assume, str):
            raise self.error(node, f"assume= must be a string of constraints on the sizes, not {type(self.assume).__name__}",
                             hint='e.g. assume="N >= 2 and M >= N"')
        try:
            return ast.parse(self.assume.strip(), mode="eval").body
        except SyntaxError:
            raise self.error(node, f"cannot parse assume={self.assume!r}", hint='write Python comparisons, e.g. assume="N >= 2 and M >= N"') from None

    def _assume_names(self) -> list[ast.Name]:
        return sorted((n for n in ast.walk(self._assume_tree()) if isinstance(n, ast.Name)), key=lambda n: n.col_offset)

    def _assume_origin(self) -> tuple[int, int] | None:
        """File position of the first character of the (stripped) assume text, when it can be located."""
        origin = self.src.literal_origin(self._assume_node(), self.assume)
        if origin is None:
            return None
        return (origin[0], origin[1] + len(self.assume) - len(self.assume.lstrip()))

    def _assume_error(self, sub: ast.AST, message: str, hint: str | None = None) -> SourceError:
        """An error at ``sub`` of the assume text, or at the assume= argument when it cannot be located."""
        origin = self._assume_origin()
        if origin is None:
            return self.error(self._assume_node(), message, hint)
        self._origin = origin
        try:
            return self.error(sub, message, hint)
        finally:
            self._origin = None

    def _assume_set(self) -> isl.Set:
        tree = self._assume_tree()
        origin = self._assume_origin()
        self._origin = origin
        try:
            scope = self.builder.param_scope()
            assumed = self.affine.condition(tree, scope)
            nonneg = scope.universe()
            for p in scope.params:
                nonneg = nonneg & scope.var(p).ge_set(scope.const(0))
            if (assumed & nonneg).is_empty():
                raise self.error(tree, f"assume={self.assume!r} can never hold (sizes are also non-negative)",
                                 hint="state constraints that some sizes satisfy")
            return assumed
        except SourceError as e:
            if origin is not None:
                raise
            raise self.error(self._assume_node(), f"in assume={self.assume!r}: {e.reason}", e.hint) from None
        finally:
            self._origin = None

    # ----- declarations -------------------------------------------------------------------------
    def _read_arguments(self, annotations: dict[str, Any]) -> None:
        b = self.builder
        for arg in self.fdef.args.args:
            ann = annotations[arg.arg]
            if isinstance(ann, ArrayType):
                b.add_array(arg.arg, self._shape(ann.shape, arg.annotation), ann.dtype, "input", argument=True)
            elif isinstance(ann, DType):
                b.add_scalar(arg.arg, ann)
            else:
                raise self.error(arg.annotation, f"unsupported annotation `{ast.unparse(arg.annotation)}` for argument `{arg.arg}`",
                                 hint=ANNOTATION_HINT)

    def _shape(self, dims: Any, node: ast.AST) -> list[SizeExpr]:
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        shape = []
        for d in dims:
            try:
                shape.append(SizeExpr.of(d))
            except TypeError:
                raise self.error(node, f"array shape entry `{d!r}` in `{ast.unparse(node)}` is not a size",
                                 hint="a shape entry is an int or an affine expression of pf.params such as N + 1 or 2 * N") from None
        return shape

    def _declare_local(self, node: ast.AST, name: str, dtype: DType, inferred: bool) -> None:
        if name in self.local_scalars:
            if self.local_scalars[name] != dtype and not inferred:
                raise self.error(node, f"local scalar `{name}` is redeclared as {dtype.name}; it is {self.local_scalars[name].name}")
            return
        self.local_scalars[name] = dtype
        if inferred:
            self.inferred_locals[name] = self.src.line_of(node)
        self.builder.add_array(name, [], dtype, "temp", argument=False)

    def _declare_temp(self, target: ast.Name, call: ast.Call) -> None:
        """``B = pf.empty(shape, dtype)``: a temporary array (a local scalar when the shape is ``()``)."""
        name = target.id
        if self._nesting:
            raise self.error(call, f"`{self.src.segment(call)}` must be at the top level of the program body, outside loops and ifs",
                             hint="declare the temporary once before the loops and index it inside them")
        b = self.lookup(name, self.builder.scope())
        if b.kind in (NameKind.ARRAY, NameKind.LOCAL, NameKind.SCALAR_ARG, NameKind.PARAM, NameKind.SIZE_EXPR):
            raise self.error(target, f"`{name}` is already declared (a {b.kind.value})")
        args = {**dict(zip(("shape", "dtype"), call.args)), **{kw.arg: kw.value for kw in call.keywords}}
        if len(call.args) > 2 or set(args) != {"shape", "dtype"}:
            raise self.error(call, f"`{ast.unparse(call)}`: pf.empty takes a shape and a dtype", hint="pf.empty((N, M), pf.f32)")
        shape = self.src.evaluate(ast.unparse(args["shape"]), args["shape"], self.env, "the shape")
        dtype = self.src.evaluate(ast.unparse(args["dtype"]), args["dtype"], self.env, "the dtype")
        if not isinstance(dtype, DType):
            raise self.error(args["dtype"], f"`{ast.unparse(args['dtype'])}` is not a dtype", hint="use pf.f32, pf.f64 or pf.i32")
        dims = self._shape(shape, args["shape"])
        if not dims:
            self._declare_local(target, name, dtype, inferred=False)
        else:
            self.builder.add_array(name, dims, dtype, "temp", argument=False)

    # ----- statements ---------------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, node: ast.stmt) -> None:
        """Translate one statement of the body."""
        if isinstance(node, ast.For):
            self._for(node)
        elif isinstance(node, ast.If):
            self._if(node)
        elif isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise self.error(node.targets[1], f"chained assignment `{self.src.segment(node)}` is not supported",
                                 hint="assign each target in its own statement")
            self._assign(node, node.targets[0], "=", node.value)
        elif isinstance(node, ast.AnnAssign):
            self._annotated(node)
        elif isinstance(node, ast.AugAssign):
            op = _AUG_OPS.get(type(node.op))
            if op is None:
                sym = ast.unparse(ast.BinOp(ast.Name("a"), node.op, ast.Name("b"))).split()[1] + "="
                t = ast.unparse(node.target)
                raise self.error(node, f"augmented assignment `{sym}` in `{self.src.segment(node)}` is not supported",
                                 hint=f"use +=, -=, *=, or write it out: `{t} = {t} {sym[:-1]} {ast.unparse(node.value)}`")
            self._assign(node, node.target, op, node.value)
        elif isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            pass  # `pass`, a stray string or `...`: no code
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Call):
                raise self.error(node, f"the call `{ast.unparse(node.value)}` stands alone as a statement", hint=BODY_HINT)
            raise self.error(node, f"the expression `{ast.unparse(node.value)}` has no effect", hint=BODY_HINT)
        else:
            what = _STATEMENT_NAMES.get(type(node), "this statement")
            first = ast.unparse(node).splitlines()[0]
            raise self.error(node, f"unsupported statement `{first}`: {what} is not allowed in a program",
                             hint=_STATEMENT_HINTS.get(type(node), BODY_HINT))

    def _if(self, node: ast.If) -> None:
        b = self.builder
        scope = b.scope()
        cond = self.affine.condition(node.test, scope)
        self._nesting += 1
        try:
            with b.condition(cond):
                self.block(node.body)
            if node.orelse:
                with b.condition(scope.universe().subtract(cond)):
                    self.block(node.orelse)
        finally:
            self._nesting -= 1

    def _for(self, node: ast.For) -> None:
        b = self.builder
        scope = b.scope()
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, f"the loop variable `{ast.unparse(node.target)}` must be a single name", hint="for i in range(N)")
        it = node.target.id
        taken = self.lookup(it, scope)
        if taken.kind is NameKind.ITERATOR:
            raise self.error(node.target, f"loop variable `{it}` shadows the enclosing loop's variable `{it}`", hint="give the inner loop its own name")
        if taken.kind in (NameKind.LOCAL, NameKind.ARRAY, NameKind.SCALAR_ARG, NameKind.PARAM, NameKind.SIZE_EXPR):
            raise self.error(node.target, f"loop variable `{it}` reuses the name of a {taken.kind.value}")
        call = node.iter
        is_range = (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"
                    and self.lookup("range", scope).value is range)
        if not is_range:
            raise self.error(node.iter, f"unsupported loop `for {it} in {ast.unparse(node.iter)}`",
                             hint="loops are `for i in range(lo, hi[, step])` with affine bounds and a positive constant step")
        if call.keywords or not 1 <= len(call.args) <= 3 or any(isinstance(a, ast.Starred) for a in call.args):
            raise self.error(call, f"`{ast.unparse(call)}`: range takes one to three positional arguments", hint="range(hi), range(lo, hi) or range(lo, hi, step)")
        if node.orelse:
            raise self.error(self.src.else_keyword(node), f"for-else is not supported: `else:` after `for {it} in {ast.unparse(call)}:`",
                             hint="move the else block after the loop")
        args = call.args
        if len(args) == 1:
            lo, hi = scope.const(0), self.affine.affine(args[0], scope, "loop bound")
        else:
            lo, hi = self.affine.affine(args[0], scope, "loop bound"), self.affine.affine(args[1], scope, "loop bound")
        step = 1
        if len(args) == 3:
            k = self.affine.constant_int(args[2], scope)
            if k is None:
                raise self.error(args[2], f"loop step `{ast.unparse(args[2])}` is not an integer constant", hint="steps are positive integer constants")
            if k <= 0:
                shown = f"`{ast.unparse(args[2])}`" + ("" if ast.unparse(args[2]) == str(k) else f" = {k}")
                raise self.error(args[2], f"loop step {shown} is not positive",
                                 hint="write the loop forwards with a positive step and reverse the subscripts")
            step = k
        self._nesting += 1
        try:
            with b.loop(it, lo, hi, step):
                self.block(node.body)
        finally:
            self._nesting -= 1

    def _annotated(self, node: ast.AnnAssign) -> None:
        """``acc: pf.f32 = 0.0`` declares (and assigns) a local scalar of that type."""
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "annotations in a program body declare local scalars: `acc: pf.f32 = 0.0`",
                             hint="assign array elements without an annotation")
        dt = self.src.evaluate(ast.unparse(node.annotation), node.annotation, self.env, "the annotation")
        if not isinstance(dt, DType):
            raise self.error(node.annotation, f"a local scalar's annotation is pf.f32, pf.f64 or pf.i32, not `{ast.unparse(node.annotation)}`")
        taken = self.lookup(node.target.id, self.builder.scope())
        if taken.kind not in (NameKind.LOCAL, NameKind.UNKNOWN, NameKind.OTHER, NameKind.INT, NameKind.FLOAT):
            raise self.error(node.target, f"cannot declare `{node.target.id}`: it is a {taken.kind.value}")
        self._declare_local(node.target, node.target.id, dt, inferred=False)
        if node.value is not None:
            self._assign(node, node.target, "=", node.value)

    def _assign(self, node: ast.stmt, target: ast.expr, op: str, value: ast.expr) -> None:
        b = self.builder
        scope = b.scope()
        if isinstance(target, ast.Name):
            name = target.id
            if isinstance(value, ast.Call) and self.resolve(value.func, scope) is intrinsics.empty and op == "=" and isinstance(node, ast.Assign):
                self._declare_temp(target, value)
                return
            self._check_local_target(target, op, value, scope)
            array, subs = name, []
        elif isinstance(target, ast.Subscript):
            array, subs = self.affine.subscript(target, scope)
        elif isinstance(target, (ast.Tuple, ast.List)):
            raise self.error(target, f"tuple assignment `{ast.unparse(node)}` is not supported", hint="assign one target per statement")
        else:
            raise self.error(target, f"cannot assign to `{ast.unparse(target)}`", hint="assign to an array element A[i, j] or a local scalar")
        text, line = self.src.segment(node), self.src.line_of(node)
        target_dtype = b.arrays[array].dtype
        b.add_statement((array, subs, ast.unparse(target)), op,
                        lambda read: self.values.translate(value, scope, read, target_dtype), line, text)

    def _check_local_target(self, target: ast.Name, op: str, value: ast.expr, scope: Scope) -> None:
        """Validate ``name op value`` for a local scalar target, declaring it on its first assignment."""
        name = target.id
        kind = self.lookup(name, scope).kind
        if kind is NameKind.LOCAL:
            dt = self.local_scalars[name]
            if name in self.inferred_locals and not dt.is_float:
                vt = self.values.infer_dtype(value, scope)
                if vt.is_float:
                    raise self.error(
                        target, f"local scalar `{name}` holds {dt.name} values (from its first assignment on line "
                        f"{self.inferred_locals[name]}) but is given a {vt.name} value here",
                        hint=f"start it with a float literal (`{name} = 0.0`) or declare its type (`{name}: pf.{vt.name} = 0`)")
            return
        messages = {
            NameKind.ITERATOR: f"cannot assign to the loop variable `{name}`",
            NameKind.PARAM: f"cannot assign to the size `{name}`",
            NameKind.SIZE_EXPR: f"cannot assign to the size expression `{name}`",
            NameKind.ARRAY: f"cannot assign to the whole array `{name}`",
            NameKind.SCALAR_ARG: f"cannot assign to the scalar argument `{name}`: scalar arguments are read-only",
        }
        hints = {
            NameKind.ARRAY: "assign its elements: A[i, j] = ...",
            NameKind.SCALAR_ARG: "copy it into a local scalar, or write results into an array argument",
            NameKind.ITERATOR: "use a local scalar with another name",
        }
        if kind in messages:
            raise self.error(target, messages[kind], hint=hints.get(kind, "sizes are fixed for a whole call; use a local scalar"))
        if op != "=":
            raise self.error(target, f"local scalar `{name}` is updated with {op} before it is assigned", hint=f"initialise it first: `{name} = 0.0`")
        self._declare_local(target, name, self.values.infer_dtype(value, scope), inferred=True)


def _widest(dtypes: list[DType]) -> DType:
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote(out, d)
    return out if out.is_float else f64
