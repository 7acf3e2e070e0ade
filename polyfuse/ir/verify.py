"""Well-formedness of a :class:`Program`: the invariants every pass may rely on.

A failure here is a bug in polyfuse (a frontend or a pass built a malformed program), never a user error,
so it raises :class:`IRVerificationError` rather than a :class:`~polyfuse.errors.PolyfuseError`. The
checks are cheap (no dependence analysis), so ``check_program`` runs them on every program it sees.

Invariants, for a program ``P``:

* statement names are ``S0, S1, ...`` in order; each domain's tuple name is its statement's name, and its
  params are among ``P.params``;
* each access relation lives in ``domain space -> array[rank]`` of an existing array, its kind is one of
  ``read / write / update``, and its domain lies inside the statement's domain (under the context);
* ``accesses[target]`` is the only write or update, with kind ``write`` for ``=`` and ``update`` for
  ``+=, -=, *=``; every :class:`Read` names a ``read`` access, and every read access is read by some node;
* expression types agree: reads and scalars have their declared types, operands match their node's type,
  conditions have no type, the value has the target's type, index values live on the statement's domain;
* ``P.context`` is a set of params only; ``P.schedule``'s domain holds each statement's domain exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl
import numpy as np

from polyfuse.ir.expr import (
    BINARY_OPS,
    COMPARE_OPS,
    LOGICAL_OPS,
    UNARY_OPS,
    Binary,
    Cast,
    Compare,
    Const,
    Expr,
    IndexValue,
    Logical,
    Read,
    ScalarArg,
    Unary,
    Where,
)
from polyfuse.ir.program import ACCESS_KINDS, ARRAY_ROLES

if TYPE_CHECKING:
    from polyfuse.ir.program import Program, Statement

OP_KIND = {"=": "write", "+=": "update", "-=": "update", "*=": "update"}


class IRVerificationError(Exception):
    """A Program breaks one of the invariants of :mod:`polyfuse.ir.verify` (a bug in polyfuse)."""


def verify_program(prog: Program) -> None:
    """Raise :class:`IRVerificationError` unless ``prog`` satisfies every invariant listed above."""
    _verify_declarations(prog)
    if prog.context.dim(isl.dim_type.set) != 0:
        _fail(prog, "context", f"the context must constrain params only, got {prog.context}")
    _verify_params(prog, "context", prog.context.get_space())
    for k, stmt in enumerate(prog.statements):
        if stmt.name != f"S{k}":
            _fail(prog, stmt.name, f"statement {k} is named {stmt.name!r}, expected 'S{k}'")
        _verify_statement(prog, stmt)
    _verify_schedule(prog)


def _fail(prog: Program, where: str, message: str) -> None:
    raise IRVerificationError(f"program {prog.name!r}, {where}: {message}")


def _verify_declarations(prog: Program) -> None:
    for name, arr in prog.arrays.items():
        if arr.name != name:
            _fail(prog, f"array {name}", f"registered under {name!r} but named {arr.name!r}")
        if arr.role not in ARRAY_ROLES:
            _fail(prog, f"array {name}", f"unknown role {arr.role!r}")
        for size in arr.shape:
            unknown = [p for p, _ in size.terms if p not in prog.params]
            if unknown:
                _fail(prog, f"array {name}", f"shape uses {unknown}, which are not params of the program")
    for arg in prog.arguments:
        if arg not in prog.arrays and arg not in prog.scalars:
            _fail(prog, "arguments", f"argument {arg!r} is neither an array nor a scalar")
    if len(set(prog.arguments)) != len(prog.arguments):
        _fail(prog, "arguments", f"duplicate names in {prog.arguments}")
    both = set(prog.arrays) & set(prog.scalars)
    if both:
        _fail(prog, "arguments", f"{sorted(both)} are both arrays and scalars")


def _verify_params(prog: Program, where: str, space: isl.Space) -> None:
    extra = [p for p in space.get_var_names(isl.dim_type.param) if p not in prog.params]
    if extra:
        _fail(prog, where, f"uses params {extra} that the program does not declare ({prog.params})")


def _verify_statement(prog: Program, stmt: Statement) -> None:
    where = f"statement {stmt.name} (line {stmt.line})"
    dom = stmt.domain
    if dom.get_tuple_name() != stmt.name:
        _fail(prog, where, f"domain tuple is {dom.get_tuple_name()!r}, expected {stmt.name!r}")
    _verify_params(prog, where, dom.get_space())
    if stmt.op not in OP_KIND:
        _fail(prog, where, f"unknown assignment operator {stmt.op!r}")
    if not 0 <= stmt.target < len(stmt.accesses):
        _fail(prog, where, f"target index {stmt.target} out of range for {len(stmt.accesses)} accesses")
    dom_space = dom.get_space()
    for k, acc in enumerate(stmt.accesses):
        what = f"{where}, access {k} ({acc.kind} {acc.array})"
        if acc.kind not in ACCESS_KINDS:
            _fail(prog, what, f"unknown access kind {acc.kind!r}")
        if acc.array not in prog.arrays:
            _fail(prog, what, f"array {acc.array!r} is not declared")
        rel = acc.relation
        if not rel.domain().get_space().is_equal(dom_space):
            _fail(prog, what, f"relation domain space {rel.domain().get_space()} differs from the domain's {dom_space}")
        if rel.get_tuple_name(isl.dim_type.out) != acc.array:
            _fail(prog, what, f"relation range is {rel.get_tuple_name(isl.dim_type.out)!r}, expected {acc.array!r}")
        if rel.dim(isl.dim_type.out) != prog.arrays[acc.array].ndim:
            _fail(prog, what, f"relation has {rel.dim(isl.dim_type.out)} subscripts for a rank-{prog.arrays[acc.array].ndim} array")
        if not rel.domain().intersect_params(prog.context).is_subset(dom.intersect_params(prog.context)):
            _fail(prog, what, "relation is defined outside the statement's domain")
        is_target = k == stmt.target
        if is_target and acc.kind != OP_KIND[stmt.op]:
            _fail(prog, what, f"the target of {stmt.op!r} must be a {OP_KIND[stmt.op]} access")
        if not is_target and acc.kind != "read":
            _fail(prog, what, "only the target access may write or update")
    used = _verify_expr(prog, stmt, stmt.value, where)
    target_type = prog.arrays[stmt.write.array].dtype if stmt.write.array in prog.arrays else None
    if stmt.value.dtype != target_type:
        _fail(prog, where, f"value type {stmt.value.dtype} differs from the target's {target_type}")
    unread = [k for k, a in enumerate(stmt.accesses) if a.kind == "read" and k not in used]
    if unread:
        _fail(prog, where, f"read accesses {unread} are not used by the value")


def _verify_expr(prog: Program, stmt: Statement, expr: Expr, where: str) -> set[int]:
    """Check the types and references of ``expr``; return the access indices its reads use."""
    used: set[int] = set()
    for node in expr.walk():
        bad = _node_problem(prog, stmt, node)
        if bad:
            _fail(prog, where, f"{bad} in {node!r}")
        if isinstance(node, Read):
            used.add(node.access)
    return used


def _node_problem(prog: Program, stmt: Statement, node: Expr) -> str | None:  # noqa: C901 - one case per node type
    if isinstance(node, Const):
        number = (float, np.floating) if node.dtype is not None and node.dtype.is_float else (int, np.integer)
        if node.dtype is None or isinstance(node.value, (bool, np.bool_)) or not isinstance(node.value, number):
            return f"constant {node.value!r} does not match its type {node.dtype}"
    elif isinstance(node, Read):
        if not 0 <= node.access < len(stmt.accesses):
            return f"read of access {node.access}, which does not exist"
        acc = stmt.accesses[node.access]
        if acc.kind != "read":
            return f"read of access {node.access}, a {acc.kind} access"
        if acc.array in prog.arrays and node.dtype != prog.arrays[acc.array].dtype:
            return f"read typed {node.dtype} of a {prog.arrays[acc.array].dtype} array"
    elif isinstance(node, ScalarArg):
        if prog.scalars.get(node.name) != node.dtype:
            return f"scalar {node.name!r} typed {node.dtype}, declared {prog.scalars.get(node.name)}"
    elif isinstance(node, IndexValue):
        space = node.value.get_domain_space()
        if space.dim(isl.dim_type.set) != stmt.depth:
            return f"index value on {space.dim(isl.dim_type.set)} dimensions in a depth-{stmt.depth} statement"
        if any(p not in prog.params for p in space.get_var_names(isl.dim_type.param)):
            return "index value uses undeclared params"
        if node.dtype is None or node.dtype.is_float:
            return "index value with a non-integer type"
    elif isinstance(node, Unary):
        if node.op not in UNARY_OPS:
            return f"unknown unary operator {node.op!r}"
        if (node.op == "not") != (node.operand.dtype is None) or node.dtype != node.operand.dtype:
            return "unary operand type mismatch"
    elif isinstance(node, Binary):
        if node.op not in BINARY_OPS:
            return f"unknown binary operator {node.op!r}"
        if node.dtype is None or node.lhs.dtype != node.dtype or node.rhs.dtype != node.dtype:
            return "binary operand type mismatch"
        if node.op in ("tdiv", "trem", "&", "|", "^", "<<", ">>") and node.dtype.is_float:
            return f"integer operator {node.op} on floating-point values"
    elif isinstance(node, Compare):
        if node.op not in COMPARE_OPS or node.dtype is not None or node.lhs.dtype is None or node.lhs.dtype != node.rhs.dtype:
            return "malformed comparison"
    elif isinstance(node, Logical):
        if node.op not in LOGICAL_OPS or node.dtype is not None or node.lhs.dtype is not None or node.rhs.dtype is not None:
            return "malformed logical operation"
    elif isinstance(node, Where):
        if node.cond.dtype is not None or node.dtype is None or node.if_true.dtype != node.dtype or node.if_false.dtype != node.dtype:
            return "malformed where"
    elif isinstance(node, Cast):
        if node.dtype is None or node.operand.dtype is None:
            return "cast of a condition"
    else:
        return f"unknown expression node {type(node).__name__}"
    return None


def _verify_schedule(prog: Program) -> None:
    seen: dict[str, isl.Set] = {}
    domain = prog.schedule.get_domain()
    sets: list[isl.Set] = []
    domain.foreach_set(sets.append)
    for s in sets:
        name = s.get_tuple_name()
        if name in seen:
            _fail(prog, "schedule", f"statement {name} appears twice in the schedule domain")
        seen[name] = s
    names = [st.name for st in prog.statements]
    extra = sorted(set(seen) - set(names))
    if extra:
        _fail(prog, "schedule", f"the schedule domain holds unknown statements {extra}")
    ctx = prog.context
    for stmt in prog.statements:
        if stmt.name not in seen:
            if stmt.domain.intersect_params(ctx).is_empty():
                continue  # an empty domain may be dropped from the union
            _fail(prog, "schedule", f"statement {stmt.name} is missing from the schedule domain")
        elif not seen[stmt.name].intersect_params(ctx).is_equal(stmt.domain.intersect_params(ctx)):
            _fail(prog, "schedule", f"the schedule domain of {stmt.name} differs from its iteration domain")
