"""Index and bound expressions of one statement's accesses for the CUDA kernels printed from a plan rather
than from an isl AST (``cuda_micro.py``'s micro-tiles, ``cuda_vector_sums.py``'s sums into a vector): the
arrays a statement touches, an iterator's first and last value over its domain, and the flat index of an
access with each iterator standing for a C expression."""

from __future__ import annotations

import re
from collections.abc import Mapping

import islpy as isl

from polyfuse.codegen.ast import as_operand, expr_to_text
from polyfuse.errors import CodegenError
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.tiling.accesses import access_coefficients


def statement_arrays(stmt: Statement) -> dict[str, bool]:
    """The arrays ``stmt`` touches, name -> whether it writes them (a template kernel's signature)."""
    out: dict[str, bool] = {}
    for k, a in enumerate(stmt.accesses):
        out[a.array] = out.get(a.array, False) or k == stmt.target
    return out


def iterator_bounds(program: Program, stmt: Statement, iterator: str, context: isl.Set | None, dialect) -> tuple[str, str]:
    """The first and last value of ``iterator`` over ``stmt``'s domain (functions of the sizes), printed
    in ``dialect`` under ``context`` (the fixed sizes, or None)."""
    dom = stmt.domain.intersect_params(program.context)
    d = stmt.iterators.index(iterator)
    ctx = context if context is not None else program.context.params()
    build = isl.AstBuild.from_context(ctx)
    lo = build.expr_from_pw_aff(dom.dim_min(d).gist_params(ctx))
    hi = build.expr_from_pw_aff(dom.dim_max(d).gist_params(ctx))
    return expr_to_text(lo, dialect), expr_to_text(hi, dialect)


def flat_index(program: Program, stmt: Statement, access: int, values: Mapping[int, str], dialect,
               sizes: Mapping[str, int] | None = None) -> str:
    """The flat index of ``stmt``'s access ``access`` with iterator ``d`` standing for ``values[d]``; the
    sizes printed as numbers where ``sizes`` is given."""
    acc = stmt.accesses[access]
    coeffs = access_coefficients(acc.relation)
    if coeffs is None:
        raise CodegenError(f"{stmt.name}: access to {acc.array} is not one affine function")
    indices = []
    for its, params, const in coeffs:
        terms = [f"{c} * {as_operand(values[d])}" if c != 1 else as_operand(values[d]) for d, c in enumerate(its) if c]
        terms += [f"{c} * {p}" if c != 1 else p for p, c in params.items() if c]
        if const or not terms:
            terms.append(str(const))
        indices.append("(" + " + ".join(terms) + ")" if len(terms) > 1 else terms[0])
    text = dialect.access(acc.array, indices)[len(acc.array) + 1:-1]
    if sizes is not None:  # (the sizes as numbers: no 64-bit kernel argument in an int index)
        text = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(sizes[m.group(0)]) if m.group(0) in sizes else m.group(0), text)
    return text
