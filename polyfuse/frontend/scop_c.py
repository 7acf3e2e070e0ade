"""The C frontend: ``pf.from_c`` reads the ``#pragma scop`` region of a C function into a :class:`Program`.

The file is preprocessed and parsed (:mod:`polyfuse.frontend.c_source`), the function is chosen (the named
one, else the only one holding a ``#pragma scop``, else the only one), and the statements between
``#pragma scop`` and ``#pragma endscop`` (the whole body when there is no pragma) are described to a
:class:`~polyfuse.ir.builder.ProgramBuilder`. Code outside the region is ignored. Subscripts, loop bounds
and ``if`` conditions must be affine (:mod:`polyfuse.frontend.c_affine`); right-hand sides follow C's typing
(:mod:`polyfuse.frontend.c_values`). Every rejected construct is a :class:`SourceError` at the user's
``file:line:col``, with the line and a caret.

What names mean:

* ``int`` (and other integer) parameters of the function, and non-``const`` integer globals, are the
  program's **size params**, in declaration order, when the region or an array's extents mention them;
* array parameters (``double A[n][m]``, ``double A[N][M]``, PolyBench's ``POLYBENCH_2D(A, N, M, n, m)``,
  which reads ``A[n][m]``) and global arrays the region uses are the program's arrays; their extents are
  affine in the size params and constants;
* ``float`` / ``double`` parameters and globals are scalar arguments; integer macros and ``const int``
  variables with constant initialisers are constants;
* variables declared in the function (before or inside the region) are loop variables where a ``for``
  uses them, else local scalars (0-d temporaries) or, for arrays, temporary arrays;
* a local initialised before the region and only read in it (``DATA_TYPE eps = SCALAR_VAL(0.1);``,
  ``int last = n - 1;``) is a constant of its type when the initialiser is constant, an int one stands for
  its affine initialiser, a float one computable in the region is assigned at the region's start, and
  anything else (a call) is captured as a scalar input argument of the same name;
* element types are ``char``/``short``/``int``/``long``, their ``unsigned`` forms (``uint32_t``,
  ``uint64_t``, ``size_t``), ``float``/``double`` and scalar ``typedef``s of them (``typedef char base;``),
  with C's meaning (:mod:`polyfuse.frontend.c_values`); unsigned sizes and loop variables are affine where
  no unsigned value can wrap around (:mod:`polyfuse.frontend.c_affine`), else a :class:`SourceError`.

Statements are assignments with any of C's assignment operators, chained assignments (``a = b = v;``: two
statements, ``a`` reading ``b``'s new value) and ``x++``/``x--`` statements.

Sizes and constant extents. With PolyBench's C99 macros every array is shaped by the int parameters, so
the program is fully symbolic. Where an array is declared with a constant extent (``double A[N][N]`` with
``#define N 400``) but indexed up to an int parameter (``for (i = 0; i < n; i++) A[i][i]``), the C code is
only valid for sizes that fit the array, so those constraints (here ``n <= 400``) are added to the
program's context; accesses to constant extents derive such bounds only when they leave some sizes of at
least 1 possible, so a subscript that overflows for every size is still a :class:`BoundsError`. ``assume=``
adds constraints of the caller's (a C condition on the sizes: ``"n >= 2 && m >= n"``), and ``defines``
turns sizes into constants.

Loops are ``for (init; cond; step)`` with ``i = lo`` or ``int i = lo``, a condition of ``&&``-joined
comparisons of ``i`` with bounds, and a constant step (``i++``, ``++i``, ``i += c``, ``i = i + c`` and the
decreasing forms, which keep their source order through the builder's ``reverse`` loops).
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl
import numpy as np
from pycparser import c_ast

from polyfuse.analysis.checks import check_program
from polyfuse.errors import SourceError, api_boundary
from polyfuse.frontend.affine import Binding, NameKind
from polyfuse.frontend.c_affine import CAffine
from polyfuse.frontend.c_loops import LOOP_HINT, CLoops, assigned_names, loop_variables, walk
from polyfuse.frontend.c_source import CUnit, assume_condition, functions_in, has_scop, node_text, read_c, scop_region
from polyfuse.frontend.c_values import CValues, c_common_type, dtype_of_names, fold_constant
from polyfuse.ir.builder import ProgramBuilder, Scope
from polyfuse.ir.expr import Const
from polyfuse.ir.program import Array, Program
from polyfuse.types import DType

BODY_HINT = "a SCoP holds for loops with affine bounds and constant steps, affine ifs, and assignments (= += -= *= /= ..., ++, --) to array elements or local scalars"
_STATEMENT_NAMES = {
    c_ast.While: "a while loop", c_ast.DoWhile: "a do-while loop", c_ast.Goto: "goto", c_ast.Break: "break",
    c_ast.Continue: "continue", c_ast.Return: "return", c_ast.Switch: "switch", c_ast.Label: "a label",
    c_ast.Case: "case", c_ast.Default: "default",
}
_OPS = ("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=")


@api_boundary
def from_c(source: str, function: str | None = None, defines: dict[str, object] | None = None,
           assume: str | None = None, include_dirs: Sequence[str] = ()) -> Program:
    """The :class:`Program` of the SCoP in a C file (a path) or C text.

    ``source`` is C text when it holds a newline or ``{``, else a path. ``function`` names the function;
    without it the file's only function holding a ``#pragma scop`` (or its only function) is read.
    ``defines`` maps macro names to values (``-D NAME=VALUE``; they override the file's own ``#define``).
    ``assume`` is a C condition on the size parameters added to the program's context. ``include_dirs``:
    folders searched for ``#include`` files after the file's own (``-I``).
    """
    unit = read_c(source, defines, assume, include_dirs)
    fdef = select_function(unit, function)
    return CReader(unit, fdef).read()


def select_function(unit: CUnit, function: str | None) -> c_ast.FuncDef:
    """The function to read: the named one, else the only one with a SCoP, else the only one."""
    funcs = functions_in(unit)
    names = ", ".join(f.decl.name for f in funcs) or "none"
    if function is not None:
        for f in funcs:
            if f.decl.name == function:
                return f
        raise SourceError(f"{unit.filename}: no function named {function!r}; functions defined: {names}")
    with_scop = [f for f in funcs if has_scop(f)]
    if len(with_scop) == 1:
        return with_scop[0]
    if len(with_scop) > 1:
        raise SourceError(f"{unit.filename}: several functions hold a #pragma scop: "
                          f"{', '.join(f.decl.name for f in with_scop)}; choose one: FILE::NAME on the command line, "
                          "function=NAME in pf.from_c")
    if len(funcs) == 1:
        return funcs[0]
    raise SourceError(f"{unit.filename}: no function holds a #pragma scop and there is not exactly one function "
                      f"(functions defined: {names}); choose one: FILE::NAME on the command line, function=NAME in pf.from_c")


class _Var:
    """A declared C variable: its declaration, element dtype (None if unsupported), extents, and flags."""

    def __init__(self, decl: c_ast.Decl, typedefs: dict[str, list[str]]) -> None:
        self.decl = decl
        self.dims: list[c_ast.Node | None] = []
        self.pointer = False
        t = decl.type
        while isinstance(t, (c_ast.ArrayDecl, c_ast.PtrDecl)):
            if isinstance(t, c_ast.PtrDecl):
                self.pointer = True
            else:
                self.dims.append(t.dim)
            t = t.type
        self.const = "const" in (decl.quals or []) or (isinstance(t, c_ast.TypeDecl) and "const" in (t.quals or []))
        self.dtype: DType | None = None
        self.what = "a variable of an unsupported type"
        if isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.IdentifierType):
            names = t.type.names
            self.dtype = dtype_of_names(names, typedefs)
            self.what = f"a `{' '.join(names)}` variable"
            if self.dims and not self.pointer and self.dtype is None:
                self.what = (f"an array of `{' '.join(names)}` elements, a type polyfuse does not support "
                             "(element types: signed/unsigned char, short, int, long, float, double)")
        elif isinstance(t, c_ast.TypeDecl) and isinstance(t.type, (c_ast.Struct, c_ast.Union)):
            self.what = "a struct"
        if self.pointer:
            self.what = "a pointer"

    @property
    def is_int_scalar(self) -> bool:
        return self.dtype is not None and not self.dtype.is_float and not self.dims and not self.pointer


class CReader:
    """Reads the SCoP of one C function into a Program (one reader per function, used once)."""

    def __init__(self, unit: CUnit, fdef: c_ast.FuncDef) -> None:
        self.unit = unit
        self.fdef = fdef
        self.name = fdef.decl.name
        self.region = scop_region(unit, fdef)
        self.typedefs: dict[str, list[str]] = {
            e.name: e.type.type.names for e in unit.ast.ext
            if isinstance(e, c_ast.Typedef) and isinstance(e.type, c_ast.TypeDecl) and isinstance(e.type.type, c_ast.IdentifierType)
        }
        self.affine = CAffine(self)
        self.values = CValues(self)
        self.loops = CLoops(self)
        self.params_decl: dict[str, _Var] = {}
        for p in (fdef.decl.type.args.params if fdef.decl.type.args is not None else []):
            if isinstance(p, c_ast.Decl) and p.name:
                self.params_decl[p.name] = _Var(p, self.typedefs)
        self.globals: dict[str, _Var] = {}
        for e in unit.ast.ext:
            if isinstance(e, c_ast.Decl) and e.name and not isinstance(e.type, c_ast.FuncDecl) and "typedef" not in (e.storage or []):
                self.globals[e.name] = _Var(e, self.typedefs)
        self.locals: dict[str, _Var] = {}
        for d in walk(fdef.body):
            if isinstance(d, c_ast.Decl) and d.name and not isinstance(d.type, c_ast.FuncDecl):
                self.locals.setdefault(d.name, _Var(d, self.typedefs))
        self.constants: dict[str, int] = {}
        self.value_constants: dict[str, Const] = {}
        self.aliases: dict[str, c_ast.Node] = {}
        self.captured: set[str] = set()
        self.builder: ProgramBuilder | None = None
        self.assumed: isl.Set | None = None
        self._const_arrays: set[str] = set()

    # ----- errors and names ---------------------------------------------------------------------
    def error(self, node: c_ast.Node | None, message: str, hint: str | None = None) -> SourceError:
        return self.unit.error(node, message, hint)

    def lookup(self, name: str, scope: Scope | None) -> Binding:
        """What ``name`` denotes at the point whose naming context is ``scope``."""
        if scope is not None and name in scope.iterators:
            return Binding(NameKind.ITERATOR)
        if name in self.constants:
            return Binding(NameKind.INT, self.constants[name])
        if name in self.value_constants:
            return Binding(NameKind.FLOAT, self.value_constants[name])
        if name in self.aliases:
            return Binding(NameKind.SIZE_EXPR, self.aliases[name])
        if name in self.captured:
            return Binding(NameKind.SCALAR_ARG)
        for table, is_local in ((self.locals, True), (self.params_decl, False), (self.globals, False)):
            var = table.get(name)
            if var is None:
                continue
            if var.pointer or var.dtype is None:
                return Binding(NameKind.OTHER, var.what)
            if var.dims:
                return Binding(NameKind.ARRAY)
            if is_local:
                return Binding(NameKind.LOCAL)
            if var.dtype.is_float:
                return Binding(NameKind.SCALAR_ARG)
            return Binding(NameKind.PARAM, name)
        return Binding(NameKind.UNKNOWN)

    def declared_type(self, name: str) -> DType | None:
        """The declared dtype of the variable ``name`` (a local, else a parameter, else a global)."""
        var = self.locals.get(name) or self.params_decl.get(name) or self.globals.get(name)
        return None if var is None else var.dtype

    def type_of_names(self, names: list[str]) -> DType | None:
        return dtype_of_names(names, self.typedefs)

    def domain_at(self, scope: Scope) -> isl.Set:
        """The points of ``scope`` that the enclosing loops and conditions allow, sizes >= 0 and assumed."""
        b = self.builder
        dom = scope.universe()
        if b is not None and len(scope.iterators) == len(b.scope().iterators):
            dom = b._current_domain(scope)  # noqa: SLF001 - the builder's own view of the nest
        for p in scope.params:
            dom = dom & scope.var(p).ge_set(scope.const(0))
        return dom if self.assumed is None else dom.intersect_params(self.assumed.params())

    def array(self, name: str, node: c_ast.Node) -> Array:
        """The program array ``name`` (a local array is declared as a temporary on first use)."""
        b = self.builder
        if name not in b.arrays:
            var = self.locals[name]
            shape = [self.affine.size(d, var.decl, b.params) for d in var.dims]
            b.add_array(name, shape, var.dtype, "temp", argument=False)
            if any(not s.terms for s in shape):
                self._const_arrays.add(name)
        return b.arrays[name]

    def local_scalar(self, name: str, node: c_ast.Node) -> DType:
        """The dtype of local scalar ``name``, declared as a 0-d temporary on first use."""
        if name not in self.builder.arrays:
            self.builder.add_array(name, [], self.locals[name].dtype, "temp", argument=False)
        return self.builder.arrays[name].dtype

    # ----- entry --------------------------------------------------------------------------------
    def read(self) -> Program:
        """Translate the region; the result has passed the static checks."""
        self._collect_constants()
        params = self._collect_params()
        coord = self.fdef.coord
        b = self.builder = ProgramBuilder(self.name, params, self.unit.filename, coord.line if coord else 0)
        self._declare_arguments()
        assume = self.assumed = self._assume()
        self._initial_values()
        self.block(self.region)
        if not b.statements:
            raise self.error(self.fdef, f"function `{self.name}` has no statements in its SCoP", hint=BODY_HINT)
        derived = self._fitting_sizes(assume)
        if derived is not None:
            assume = derived if assume is None else assume & derived
        return check_program(b.build(assume))

    def _collect_constants(self) -> None:
        """``const`` integer variables with constant initialisers (globals, then locals) are constants, and
        so are int locals initialised to a constant before the region and never assigned in it."""
        for table in (self.globals, self.locals):
            for name, var in table.items():
                if var.is_int_scalar and var.decl.init is not None and (var.const or self._set_before_region(name)):
                    k = self.affine.constant_int(var.decl.init, None)
                    if k is not None:
                        self.constants[name] = int(np.array(k).astype(var.dtype.numpy))  # as C converts the initialiser
                    elif table is self.locals:  # `int m = n - 1;`: an alias of its (affine) initialiser
                        self.aliases[name] = var.decl.init

    def _set_before_region(self, name: str) -> bool:
        """Whether local ``name`` is initialised by its declaration before the region (not inside it), read
        in the region and never assigned there nor used as a loop variable."""
        var = self.locals.get(name)
        if var is None or var.decl.init is None or var.dims or var.pointer or var.dtype is None:
            return False
        if any(n is var.decl for item in self.region for n in walk(item)):
            return False
        used = {n.name for item in self.region for n in walk(item) if isinstance(n, c_ast.ID)}
        return name in used and name not in assigned_names(self.region)

    def _initial_values(self) -> None:
        """Locals initialised before the region and read in it (``DATA_TYPE eps = SCALAR_VAL(0.1);``): a
        constant initialiser is a constant of the variable's type; one computable from the sizes, scalar
        parameters and arrays becomes an assignment at the start of the region; anything else (a call,
        say) is captured as a scalar input argument of the same name. A local that the region also assigns
        starts with an assignment of its initialiser."""
        scope = self.builder.param_scope()
        for name, var in self.locals.items():
            if name in self.constants or name in self.aliases or var.decl.init is None or var.dims or var.pointer or var.dtype is None:
                continue
            if any(n is var.decl for item in self.region for n in walk(item)):
                continue
            used = {n.name for item in self.region for n in walk(item) if isinstance(n, c_ast.ID)}
            if name not in used or name in loop_variables(self.region):
                continue
            written = name in assigned_names(self.region)
            if not written:
                try:
                    value = self.values.translate(var.decl.init, scope, _no_reads, var.dtype)
                except SourceError:
                    value = None
                value = fold_constant(value) or value if value is not None else None
                if isinstance(value, Const):
                    self.value_constants[name] = value
                    continue
                if value is None and var.dtype.is_float and not self._translatable(var.decl.init):
                    self.captured.add(name)
                    self.builder.add_scalar(name, var.dtype)
                    continue
            self._assign(var.decl, c_ast.ID(name, var.decl.coord), "=", var.decl.init)

    def _translatable(self, node: c_ast.Node) -> bool:
        """Whether ``node`` is a value the region could compute (array reads allowed)."""
        try:
            self.values.type_of(node, self.builder.param_scope())
        except SourceError:
            return False
        return True

    def _collect_params(self) -> list[str]:
        """Integer parameters and non-const integer globals that the region or an array's extents mention."""
        used = {n.name for item in [*self.region, *self.aliases.values()] for n in walk(item) if isinstance(n, c_ast.ID)}
        cond = assume_condition(self.unit)
        if cond is not None:
            used |= {n.name for n in walk(cond) if isinstance(n, c_ast.ID)}
        for table in (self.params_decl, self.globals, self.locals):
            for name, var in table.items():
                if var.dims and (table is self.params_decl or name in used):
                    used |= {n.name for d in var.dims if d is not None for n in walk(d) if isinstance(n, c_ast.ID)}
        out = []
        for table in (self.params_decl, self.globals):
            for name, var in table.items():
                if var.is_int_scalar and name in used and name not in self.locals and name not in self.constants and name not in out:
                    out.append(name)
        return out

    def _declare_arguments(self) -> None:
        """Array and float scalar parameters (all of them, in order), then the globals the region uses."""
        used = {n.name for item in self.region for n in walk(item) if isinstance(n, c_ast.ID)}
        b = self.builder
        for table, everything in ((self.params_decl, True), (self.globals, False)):
            for name, var in table.items():
                if name in b.arrays or name in b.scalars or name in self.locals or not (everything or name in used):
                    continue
                if var.pointer or var.dtype is None:
                    continue  # reported where the region uses it
                if var.dims:
                    shape = [self.affine.size(d, var.decl, b.params) for d in var.dims]
                    b.add_array(name, shape, var.dtype, "input", argument=True)
                    if any(not s.terms for s in shape):
                        self._const_arrays.add(name)
                elif var.dtype.is_float:
                    b.add_scalar(name, var.dtype)

    def _assume(self) -> isl.Set | None:
        cond = assume_condition(self.unit)
        return None if cond is None else self.affine.condition(cond, self.builder.param_scope())

    def _fitting_sizes(self, assume: isl.Set | None) -> isl.Set | None:
        """The sizes for which every access to a constant extent stays inside it (see the module docstring),
        or None when that adds nothing or would leave no size of at least 1."""
        b = self.builder
        if not b.params or not self._const_arrays:
            return None
        scope = b.param_scope()
        fits = scope.universe()
        for stmt in b.statements:
            for acc in stmt.accesses:
                arr = b.arrays[acc.array]
                if acc.array not in self._const_arrays:
                    continue
                outside = acc.relation.intersect_domain(stmt.domain).subtract_range(_constant_extent(arr, b.params))
                fits = fits.subtract(isl.Set.from_params(outside.params()))
        if fits.is_equal(scope.universe()):
            return None
        positive = scope.universe()
        for p in b.params:
            positive = positive & scope.var(p).ge_set(scope.const(1))
        if assume is not None:
            positive = positive & assume
        return None if (fits & positive).is_empty() else fits.coalesce()

    # ----- statements ---------------------------------------------------------------------------
    def block(self, items: list[c_ast.Node]) -> None:
        for item in items:
            self.statement(item)

    def statement(self, node: c_ast.Node) -> None:
        """Translate one statement of the region."""
        if isinstance(node, c_ast.Compound):
            self.block(node.block_items or [])
        elif isinstance(node, c_ast.For):
            self.loops.read_for(node)
        elif isinstance(node, c_ast.If):
            scope = self.builder.scope()
            cond = self.affine.condition(node.cond, scope)
            with self.builder.condition(cond):
                self.statement(node.iftrue)
            if node.iffalse is not None:
                with self.builder.condition(scope.universe().subtract(cond)):
                    self.statement(node.iffalse)
        elif isinstance(node, c_ast.Assignment):
            if node.op not in _OPS:
                raise self.error(node, f"assignment operator `{node.op}` in `{self.unit.segment(node)}` is not supported",
                                 hint=f"use one of {' '.join(_OPS)}")
            if isinstance(node.rvalue, c_ast.Assignment):  # a = b = v: first b = v, then a = b (b's new value)
                self.statement(node.rvalue)
                self._assign(node, node.lvalue, node.op, node.rvalue.lvalue)
            else:
                self._assign(node, node.lvalue, node.op, node.rvalue)
        elif isinstance(node, c_ast.Decl):
            self._declaration(node)
        elif isinstance(node, c_ast.DeclList):
            for d in node.decls:
                self._declaration(d)
        elif isinstance(node, (c_ast.EmptyStatement, c_ast.Pragma)):
            pass  # `;` and other pragmas (OpenMP, ivdep): no code
        elif isinstance(node, c_ast.UnaryOp) and node.op in ("++", "--", "p++", "p--"):
            self._assign(node, node.expr, "+=" if "++" in node.op else "-=", c_ast.Constant("int", "1", node.coord))
        elif isinstance(node, c_ast.FuncCall):
            raise self.error(node, f"the call `{node_text(node)}` is not allowed in a SCoP",
                             hint="a SCoP only computes on arrays; move I/O and other calls outside #pragma scop")
        elif type(node) in _STATEMENT_NAMES:
            raise self.error(node, f"unsupported statement `{node_text(node).splitlines()[0]}`: {_STATEMENT_NAMES[type(node)]} "
                                   "is not allowed in a SCoP", hint=LOOP_HINT if isinstance(node, (c_ast.While, c_ast.DoWhile)) else BODY_HINT)
        else:
            raise self.error(node, f"unsupported statement `{node_text(node)}`", hint=BODY_HINT)

    def _declaration(self, node: c_ast.Decl) -> None:
        """A declaration in the region: a local; its initialiser (if any) is an assignment."""
        var = self.locals.get(node.name)
        if var is None:
            raise self.error(node, f"unsupported declaration `{node_text(node)}`", hint=BODY_HINT)
        if var.pointer or var.dtype is None:
            raise self.error(node, f"`{node.name}` is {var.what}; a SCoP declares int, float or double scalars and arrays")
        if node.init is not None:
            if var.dims:
                raise self.error(node, f"array initialiser in `{node_text(node)}` is not supported", hint="assign the elements in a loop")
            self._assign(node, c_ast.ID(node.name, node.coord), "=", node.init)

    def _assign(self, node: c_ast.Node, target: c_ast.Node, op: str, value: c_ast.Node) -> None:
        b = self.builder
        scope = b.scope()
        text = self.unit.segment(node)
        if isinstance(target, c_ast.ID):
            kind = self.lookup(target.name, scope)
            if kind.kind is not NameKind.LOCAL:
                raise self._bad_target(target, kind)
            array, subs = target.name, []
            self.local_scalar(target.name, target)
        elif isinstance(target, c_ast.ArrayRef):
            array, subs = self.affine.subscript(target, scope)
        else:
            raise self.error(target, f"cannot assign to `{node_text(target)}`",
                             hint="assign to an array element A[i][j] or a local scalar (no pointers or struct members)")
        dtype = b.arrays[array].dtype
        ttext = node_text(target)
        if op != "=" and not (op in ("+=", "-=", "*=") and c_common_type(dtype, self.values.type_of(value, scope)) == dtype):
            # `x op= v` is `x = (T)(x op v)`, with the operation in the common type of x and v: an update
            # statement only where that type is x's own (no conversion to round differently)
            value, op = c_ast.BinaryOp(op[:-1], target, value, node.coord), "="

        def make_value(read):  # noqa: ANN001, ANN202 - the builder's callback
            return self.values.translate(value, scope, read, dtype)

        line = node.coord.line if node.coord else 0
        b.add_statement((array, subs, ttext), op, make_value, line, text)

    def _bad_target(self, target: c_ast.ID, b: Binding) -> SourceError:
        name = target.name
        messages = {
            NameKind.ITERATOR: f"cannot assign to the loop variable `{name}`",
            NameKind.PARAM: f"cannot assign to the size parameter `{name}`",
            NameKind.INT: f"cannot assign to the constant `{name}`",
            NameKind.ARRAY: f"cannot assign to the whole array `{name}`",
            NameKind.SCALAR_ARG: f"cannot assign to the scalar parameter `{name}`: scalar parameters are read-only in a SCoP",
            NameKind.UNKNOWN: f"assignment to the undeclared name `{name}`",
        }
        msg = messages.get(b.kind, f"cannot assign to `{name}`: it is {b.value}")
        return self.error(target, msg, hint="copy it into a local scalar declared in the function, or assign array elements")


def _constant_extent(arr: Array, params: tuple[str, ...]) -> isl.Set:
    """``{ A[a0, ...] : 0 <= ak < shape_k }`` for the dimensions of constant extent only."""
    space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=[f"a{k}" for k in range(arr.ndim)], params=list(params))
    v = isl.affs_from_space(space)
    ext = isl.Set.universe(space)
    for k, size in enumerate(arr.shape):
        if not size.terms:
            ext = ext & v[f"a{k}"].ge_set(v[0]) & v[f"a{k}"].lt_set(v[0] + size.constant)
    return ext.set_tuple_name(arr.name)


def _no_reads(array: str, subs: list, text: str) -> int:
    raise SourceError(f"`{text}` reads an array")

