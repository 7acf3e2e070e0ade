"""The one place where an isl schedule tree becomes an isl AST, and the shared printer of AST expressions.

:func:`build_ast` runs ``isl.AstBuild.node_from_schedule`` and annotates every user node with a
:class:`StatementCall`: the statement it executes plus, for each of the statement's accesses and each
:class:`~polyfuse.ir.expr.IndexValue` in its value, an ``isl.AstExpr`` built by isl in terms of the AST's
loop iterators, and every ``for`` node with a :class:`LoopSchedule`. With ``sched`` the schedule map of the user node, the iterator map is ``sched^-1`` (schedule
point -> statement instance), and an access function ``f`` is printed as
``access_from_pw_multi_aff(f o sched^-1)``; so no index is ever produced by string substitution.

Mark nodes of the tree (``kernel``, ``parallel``, ``grid``, ``block``; see :mod:`polyfuse.schedule.model`)
come through as AST mark nodes whose id carries the same name and user object; printers that do not care
about them walk straight into ``mark_get_node()``.

:func:`expr_to_text` prints an ``isl.AstExpr`` through a :class:`Dialect`, so the Python, C and CUDA
printers share one walker and differ only in spelling. Every dialect must give ``fdiv_q`` exact floor
semantics (``floor(a / b)`` for ``b > 0`` and any sign of ``a``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import islpy as isl

from polyfuse.errors import CodegenError
from polyfuse.ir.expr import Expr, IndexValue
from polyfuse.ir.program import Access, Program, Statement

Op = isl.ast_expr_op_type


@dataclass(frozen=True, eq=False)
class StatementCall:
    """What one AST user node executes: ``statement`` at the instance given by the AST's iterators.

    ``accesses[k]`` is the AST expression (op type ``access``: array id, then one index per dimension) of
    ``statement.accesses[k]``. ``index_values`` pairs every :class:`IndexValue` node of ``statement.value``
    (in :meth:`Expr.walk` order) with its AST expression. ``arguments`` are the statement's iterators as AST
    expressions (the arguments of isl's own call expression ``S0(c0, c1)``). ``member_values`` gives, for
    the schedule dimensions :func:`build_ast` was asked about (by loop iterator name), their value at this
    node as an AST expression, also where isl printed no loop for the dimension (its value fixed by the
    loops around: substituted).
    """

    statement: Statement
    accesses: tuple[isl.AstExpr, ...]
    index_values: tuple[tuple[IndexValue, isl.AstExpr], ...]
    arguments: tuple[isl.AstExpr, ...]
    member_values: Mapping[str, isl.AstExpr] | None = None

    @property
    def write(self) -> isl.AstExpr:
        """The AST expression of the written (or updated) element."""
        return self.accesses[self.statement.target]

    def index_expr(self, node: IndexValue) -> isl.AstExpr:
        """The AST expression of ``node``, which must be a node of ``statement.value`` (matched by identity)."""
        for candidate, expr in self.index_values:
            if candidate is node:
                return expr
        raise KeyError(f"{node!r} is not an index value of {self.statement.name}")


@dataclass(frozen=True, eq=False)
class LoopSchedule:
    """What isl's AST build knew at a ``for`` node (its annotation): ``schedule`` maps every statement
    instance the loop runs to the values of the loops around it and of this one (the last dimension)."""

    schedule: isl.UnionMap


def loop_schedule(node: isl.AstNode) -> isl.UnionMap | None:
    """The :class:`LoopSchedule` map :func:`build_ast` attached to the ``for`` node ``node`` (``None`` for
    an AST built otherwise)."""
    try:
        info = node.get_annotation().user
    except isl.Error:  # no annotation
        return None
    return info.schedule if isinstance(info, LoopSchedule) else None


def index_value_nodes(expr: Expr) -> tuple[IndexValue, ...]:
    """Every :class:`IndexValue` node of ``expr``, in :meth:`Expr.walk` order."""
    return tuple(n for n in expr.walk() if isinstance(n, IndexValue))


def statement_call(node: isl.AstNode) -> StatementCall:
    """The :class:`StatementCall` that :func:`build_ast` attached to the user node ``node``."""
    try:
        call = node.get_annotation().user
    except isl.Error:  # isl reports a missing annotation as an error
        call = None
    if not isinstance(call, StatementCall):
        raise CodegenError("an AST user node carries no statement; was the AST built by polyfuse.codegen.ast.build_ast?")
    return call


def build_ast(
    program: Program,
    schedule: isl.Schedule,
    context: isl.Set | None = None,
    statements: Mapping[str, Statement] | None = None,
    member_values: Mapping[str, Mapping[str, isl.PwAff]] | None = None,
) -> isl.AstNode:
    """The isl AST of ``schedule`` (a schedule tree over ``program``'s statements), user nodes annotated.

    ``context`` adds constraints on the size params (e.g. concrete sizes) to ``program.context``.
    ``statements`` adds or overrides statements by name, for statements the scheduler introduced (copy
    statements); every domain in the tree must name one of them. Upper loop bounds are atomic: a for
    node's condition is a single comparison ``iterator <= min(...)`` (or ``<``). ``member_values`` maps a
    statement name to schedule dimensions (iterator name -> the dimension's value on the statement's
    domain) whose AST expressions its calls should carry (:attr:`StatementCall.member_values`).
    """
    table: dict[str, Statement] = {s.name: s for s in program.statements}
    if statements:
        table.update(statements)
    params = program.context.params()
    if context is not None:
        params = params.intersect(context.params())
    domains = schedule.get_domain().get_set_list()
    unknown = sorted({domains.get_at(k).get_tuple_name() for k in range(domains.n_set())} - set(table))
    if unknown:
        raise CodegenError(f"the schedule executes {', '.join(unknown)}, which the program does not define")
    keep_alive: list[StatementCall] = []
    failures: list[BaseException] = []
    executed: list[isl.UnionSet] = []

    def at_each_domain(node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
        # An exception escaping an islpy callback aborts isl half-way (and may corrupt its state), so
        # failures are recorded here and re-raised once isl has returned.
        try:
            name = node.user_get_expr().get_op_arg(0).get_id().get_name()
            executed.append(build.get_schedule().domain())
            call = _statement_call(node, build, table, (member_values or {}).get(name))
        except Exception as e:  # noqa: BLE001 - re-raised below
            failures.append(e)
            return node
        keep_alive.append(call)
        return node.set_annotation(isl.Id(call.statement.name, user=call))

    def before_each_for(build: isl.AstBuild) -> isl.Id:
        info = LoopSchedule(build.get_schedule())
        keep_alive.append(info)
        return isl.Id("loop", user=info)

    with _atomic_upper_bounds(params.get_ctx()):
        build = isl.AstBuild.from_context(params).set_iterators(_iterator_id_list(iterator_names(program, table)))
        build, handle = build.set_at_each_domain(at_each_domain)
        build, loop_handle = build.set_before_each_for(before_each_for)
        try:
            tree = build.node_from_schedule(schedule)
        finally:
            # islpy requires the callbacks' handles to outlive node_from_schedule.
            del handle, loop_handle
    if failures:
        raise CodegenError(f"cannot build the AST expressions of a statement: {failures[0]}") from failures[0]
    check_ast_coverage(schedule, params, executed)
    return tree


class AstCoverageError(CodegenError):
    """isl's AST executes fewer instances of a statement than the schedule holds (an isl bug)."""


def check_ast_coverage(schedule: isl.Schedule, params: isl.Set, executed: Sequence[isl.UnionSet]) -> None:
    """Raise :class:`AstCoverageError` unless the AST runs every instance the schedule tree holds: the
    statements of its domain and those its extension nodes add (copies, barriers).

    The isl of islpy 2026.2.2 can lose instances in AST generation when a schedule dimension is a quasi-affine function (a
    ``mod``) whose value the outer loops fix: ``{ C[i, o] -> [i, o + 128 (o mod 2)] : (i - o) mod 3 = 0,
    0 <= o <= 2 }`` prints ``if (c0 % 3 == 0) C(c0, 0)``, dropping ``o = 1, 2``. A fuzzed CUDA kernel's
    copy-out of a shared buffer met this; a wrong result is worse than the cost of this check."""
    ran = isl.UnionSet.empty(schedule.get_domain().get_space())
    for dom in executed:
        ran = ran.union(dom)
    expected = schedule.get_domain()
    extensions: list[isl.UnionSet] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if node.get_type() == isl.schedule_node_type.extension:
            reached = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain()).range()
            extensions.append(node.extension_get_extension().intersect_domain(reached).range())
        return True

    try:
        schedule.get_root().foreach_descendant_top_down(visit)
    except isl.Error:  # (a domain below nested extensions: those statements are not checked)
        extensions.clear()
    for added in extensions:
        expected = expected.union(added)
    missing = expected.intersect_params(params).subtract(ran.intersect_params(params))
    if not missing.is_empty():
        names = sorted({missing.get_set_list().get_at(k).get_tuple_name() for k in range(missing.get_set_list().n_set())})
        raise AstCoverageError(f"isl's AST generation dropped instances of {', '.join(names)} (an isl bug): {missing}")


def iterator_names(program: Program, statements: Mapping[str, Statement] | None = None, count: int = 64) -> list[str]:
    """Names of the AST's loop iterators by schedule depth (``c0, c1, ...``), skipping any the program
    already uses for an array, scalar or size, so that printed loops never shadow a program name
    (PolyBench's deriche has scalars ``c1`` and ``c2``). The loop of schedule dimension ``d`` is named
    ``iterator_names(...)[d]``."""
    taken = set(program.arrays) | set(program.scalars) | set(program.params)
    for stmt in (statements or {s.name: s for s in program.statements}).values():
        taken.update(a.array for a in stmt.accesses)
    names: list[str] = []
    k = 0
    while len(names) < count:
        if f"c{k}" not in taken:
            names.append(f"c{k}")
        k += 1
    return names


def _iterator_id_list(names: list[str]) -> isl.IdList:
    ids = isl.IdList.alloc(isl.DEFAULT_CONTEXT, len(names))
    for n in names:
        ids = ids.add(isl.Id(n))
    return ids


def _statement_call(node: isl.AstNode, build: isl.AstBuild, table: Mapping[str, Statement],
                    member_values: Mapping[str, isl.PwAff] | None = None) -> StatementCall:
    """Index expressions of one statement at the user node ``node`` (called from ``at_each_domain``)."""
    call_expr = node.user_get_expr()
    name = call_expr.get_op_arg(0).get_id().get_name()
    stmt = table[name]
    schedule = isl.Map.from_union_map(build.get_schedule())
    iterator_map = isl.PwMultiAff.from_map(schedule.reverse())
    accesses = tuple(_access_expr(build, a, iterator_map) for a in stmt.accesses)
    domain_id = stmt.domain.get_tuple_id()
    index_values = tuple(
        (iv, build.expr_from_pw_aff(iv.value.set_tuple_id(isl.dim_type.in_, domain_id).pullback_pw_multi_aff(iterator_map)))
        for iv in index_value_nodes(stmt.value)
    )
    arguments = tuple(call_expr.get_op_arg(k) for k in range(1, call_expr.get_op_n_arg()))
    values = {it: build.expr_from_pw_aff(pa.pullback_pw_multi_aff(iterator_map)) for it, pa in (member_values or {}).items()}
    return StatementCall(stmt, accesses, index_values, arguments, values)


def _access_expr(build: isl.AstBuild, access: Access, iterator_map: isl.PwMultiAff) -> isl.AstExpr:
    return build.access_from_pw_multi_aff(access.function.pullback_pw_multi_aff(iterator_map))


@contextmanager
def _atomic_upper_bounds(ctx: isl.Context) -> Iterator[None]:
    """Set isl's ``ast_build_atomic_upper_bound`` for one build and restore the previous value."""
    before = ctx.get_ast_build_atomic_upper_bound()
    ctx.set_ast_build_atomic_upper_bound(1)
    try:
        yield
    finally:
        ctx.set_ast_build_atomic_upper_bound(before)


# ----- expression printing --------------------------------------------------------------------------


class Dialect:
    """How one target language spells isl AST expressions; subclass and override to customise.

    ``infix`` maps an ``isl.ast_expr_op_type`` to its binary operator. Operations missing from it are
    printed by the methods below. Every operation is fully parenthesised, so precedence never matters.
    """

    infix: Mapping[int, str] = {}

    def name(self, ident: str) -> str:
        """The spelling of an isl id (an iterator, a size param, an array or a function)."""
        return ident

    def integer(self, value: int) -> str:
        return str(value)

    def minus(self, operand: str) -> str:
        return f"(-{operand})"

    def min(self, args: Sequence[str]) -> str:
        raise NotImplementedError

    def max(self, args: Sequence[str]) -> str:
        raise NotImplementedError

    def floor_div(self, num: str, den: str) -> str:
        """``floor(num / den)`` for a positive ``den``: isl's ``fdiv_q``."""
        raise NotImplementedError

    def select(self, cond: str, if_true: str, if_false: str) -> str:
        raise NotImplementedError

    def call(self, function: str, args: Sequence[str]) -> str:
        """A call; ``function`` is the isl name, not yet passed through :meth:`name`."""
        return f"{self.name(function)}({', '.join(args)})"

    def access(self, array: str, indices: Sequence[str]) -> str:
        """An array element; ``array`` is the isl name (the program's array name), not yet passed through
        :meth:`name`; ``indices`` are printed already, one per dimension (none for a 0-d array)."""
        raise NotImplementedError


class PythonDialect(Dialect):
    """Python spelling: ``//`` and ``%`` already have floor semantics; ``A[i, j]`` indexes numpy arrays."""

    infix = {
        Op.add: "+", Op.sub: "-", Op.mul: "*",
        Op.div: "//", Op.pdiv_q: "//", Op.pdiv_r: "%", Op.zdiv_r: "%",
        Op.eq: "==", Op.le: "<=", Op.lt: "<", Op.ge: ">=", Op.gt: ">",
        Op.and_: "and", Op.and_then: "and", Op.or_: "or", Op.or_else: "or",
    }

    def min(self, args: Sequence[str]) -> str:
        return f"min({', '.join(args)})"

    def max(self, args: Sequence[str]) -> str:
        return f"max({', '.join(args)})"

    def floor_div(self, num: str, den: str) -> str:
        return f"({num} // {den})"

    def select(self, cond: str, if_true: str, if_false: str) -> str:
        return f"({if_true} if {cond} else {if_false})"

    def access(self, array: str, indices: Sequence[str]) -> str:
        return f"{self.name(array)}[{', '.join(indices) if indices else '()'}]"


C_HELPERS = """\
#define polyfuse_floord(n, d) (((n) < 0) ? -((-(n) + (d) - 1) / (d)) : (n) / (d))
#define polyfuse_min(a, b) ((a) < (b) ? (a) : (b))
#define polyfuse_max(a, b) ((a) > (b) ? (a) : (b))
"""
"""Macros that :class:`CDialect` output relies on; emit them once at the top of a C or CUDA file."""


class CDialect(Dialect):
    """C99 / CUDA spelling. ``/`` and ``%`` truncate in C, so ``fdiv_q`` goes through ``polyfuse_floord``
    (see :data:`C_HELPERS`); isl only emits ``pdiv_q``/``pdiv_r`` for non-negative numerators and uses
    ``zdiv_r`` only in comparisons with zero, where truncation does not matter. ``access`` prints
    ``A[i][j]``; printers with flattened arrays override it."""

    infix = {
        Op.add: "+", Op.sub: "-", Op.mul: "*",
        Op.div: "/", Op.pdiv_q: "/", Op.pdiv_r: "%", Op.zdiv_r: "%",
        Op.eq: "==", Op.le: "<=", Op.lt: "<", Op.ge: ">=", Op.gt: ">",
        Op.and_: "&&", Op.and_then: "&&", Op.or_: "||", Op.or_else: "||",
    }

    def min(self, args: Sequence[str]) -> str:
        return _fold("polyfuse_min", args)

    def max(self, args: Sequence[str]) -> str:
        return _fold("polyfuse_max", args)

    def floor_div(self, num: str, den: str) -> str:
        return f"polyfuse_floord({num}, {den})"

    def select(self, cond: str, if_true: str, if_false: str) -> str:
        return f"({cond} ? {if_true} : {if_false})"

    def access(self, array: str, indices: Sequence[str]) -> str:
        return self.name(array) + "".join(f"[{i}]" for i in indices)


def _fold(function: str, args: Sequence[str]) -> str:
    out = args[0]
    for a in args[1:]:
        out = f"{function}({out}, {a})"
    return out


def as_operand(text: str) -> str:
    """``text`` safe as an operand of a binary operator: parenthesised unless it is a name, a number or
    one call (a conditional ``c ? a : b`` followed by ``+ x`` would take the ``+`` into its branch)."""
    if re.fullmatch(r"-?[A-Za-z0-9_.]+", text):
        return text
    call = re.match(r"[A-Za-z_]\w*\(", text)
    if call and text.endswith(")"):
        depth = 0
        for k in range(call.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            if depth == 0:
                if k == len(text) - 1:
                    return text
                break
    return f"({text})"


def expr_to_text(expr: isl.AstExpr, dialect: Dialect) -> str:
    """``expr`` in the language of ``dialect``, fully parenthesised."""
    kind = expr.get_type()
    if kind == isl.ast_expr_type.int:
        return dialect.integer(expr.get_val().to_python())
    if kind == isl.ast_expr_type.id:
        return dialect.name(expr.get_id().get_name())
    if kind != isl.ast_expr_type.op:
        raise CodegenError(f"unexpected isl AST expression {expr.to_C_str()!r}")
    t = expr.get_op_type()
    args = [expr.get_op_arg(k) for k in range(expr.get_op_n_arg())]
    if t in (Op.access, Op.call):
        # The array or function is passed by its isl name; the dialect spells it (and may look it up).
        head = args[0].get_id().get_name()
        rest = [expr_to_text(a, dialect) for a in args[1:]]
        return dialect.access(head, rest) if t == Op.access else dialect.call(head, rest)
    texts = [expr_to_text(a, dialect) for a in args]
    if t in dialect.infix:
        return f"({texts[0]} {dialect.infix[t]} {texts[1]})"
    if t == Op.minus:
        return dialect.minus(texts[0])
    if t == Op.min:
        return dialect.min(texts)
    if t == Op.max:
        return dialect.max(texts)
    if t == Op.fdiv_q:
        return dialect.floor_div(texts[0], texts[1])
    if t in (Op.select, Op.cond):
        return dialect.select(texts[0], texts[1], texts[2])
    raise CodegenError(f"unsupported isl AST operation in {expr.to_C_str()!r}")


PYTHON = PythonDialect()
C = CDialect()


def expr_ids(expr: isl.AstExpr) -> set[str]:
    """The names of every identifier (iterators, sizes) ``expr`` mentions."""
    kind = expr.get_type()
    if kind == isl.ast_expr_type.id:
        return {expr.get_id().get_name()}
    if kind == isl.ast_expr_type.op:
        return set().union(*(expr_ids(expr.get_op_arg(k)) for k in range(expr.get_op_n_arg())))
    return set()


def block_children(node: isl.AstNode) -> Iterator[isl.AstNode]:
    """The nodes of an AST block, in order."""
    children = node.block_get_children()
    for k in range(children.n_ast_node()):
        yield children.get_at(k)


def constant_range(loop: isl.AstNode, iterator: str | None = None) -> tuple[int, int, int] | None:
    """``(first, last, step)`` of the ``for`` node ``loop`` when its start, step and bound are integers (the
    sizes were given at compile time) and its condition is ``it <= bound`` or ``it < bound``; else None.
    ``iterator``: also require the condition to test that name. ``last`` is the bound, not the last value
    taken (equal only when the step divides the distance)."""
    if loop.get_type() != isl.ast_node_type.for_:
        return None
    init, inc, cond = loop.for_get_init(), loop.for_get_inc(), loop.for_get_cond()
    if (init.get_type() != isl.ast_expr_type.int or inc.get_type() != isl.ast_expr_type.int
            or cond.get_type() != isl.ast_expr_type.op or cond.get_op_n_arg() != 2):
        return None
    op = cond.get_op_type()
    lhs, bound = cond.get_op_arg(0), cond.get_op_arg(1)
    if bound.get_type() != isl.ast_expr_type.int or op not in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt):
        return None
    if iterator is not None and (lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != iterator):
        return None
    first, step, last = (int(e.get_val().to_python()) for e in (init, inc, bound))
    return first, last - (op == isl.ast_expr_op_type.lt), step
