"""Readable text of a Program: what ``print(prog)`` and ``polyfuse show`` display."""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyfuse.ir.expr import format_expr

if TYPE_CHECKING:
    from polyfuse.ir.program import Program, Statement


def format_size(size) -> str:
    """``N + 1`` for an affine size expression."""
    parts = [(n if c == 1 else f"-{n}" if c == -1 else f"{c}*{n}") for n, c in size.terms]
    if size.constant or not parts:
        parts.append(str(size.constant))
    return " + ".join(parts).replace("+ -", "- ")


def format_statement(stmt: Statement) -> str:
    """``S0: B[i, j] = (A[i, j] + 1.0)``"""
    names = [a.text or a.array for a in stmt.accesses]
    return f"{stmt.name}: {names[stmt.target]} {stmt.op} {format_expr(stmt.value, names)}"


def format_program(prog: Program) -> str:
    lines = [f"program {prog.name}({', '.join(prog.arguments)})  [{prog.filename}:{prog.line}]"]
    lines.append(f"  params:  {', '.join(prog.params) or '(none)'}")
    lines.append(f"  context: {prog.context}")
    lines.extend(f"  assumed: {a.describe()}" for a in prog.assumptions)
    lines.append("  arrays:")
    for a in prog.arrays.values():
        shape = ", ".join(format_size(s) for s in a.shape)
        lines.append(f"    {a.name:<10} {a.dtype.name}[{shape}]  {a.role}")
    for name, dt in prog.scalars.items():
        lines.append(f"    {name:<10} {dt.name}  scalar")
    lines.append("  statements:")
    for s in prog.statements:
        lines.append(f"    {format_statement(s)}    (line {s.line})")
        lines.append(f"      domain: {s.domain}")
        for a in s.accesses:
            lines.append(f"      {a.kind:<6} {a.relation}")
    lines.append("  source schedule:")
    lines.append("    " + str(prog.schedule.get_map()))
    return "\n".join(lines)
