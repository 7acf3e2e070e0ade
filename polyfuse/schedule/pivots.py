"""Index-set splitting around a pivot: a statement that reads, beside its own element, the element of its row
(or column) at an outer iterator is split where its inner iterator passes that iterator.

floyd-warshall's ``path[i][j] = min(path[i][j], path[i][k] + path[k][j])`` reads ``path[i][k]``, which the
same statement writes at ``j = k``, and ``path[k][j]``, written at ``i = k``. As one statement, its ``j``
loop carries a dependence (the iterations after ``j = k`` read what that one wrote) and so does its ``i``
loop: the compiler cannot vectorise the row (``path[i][k]`` may alias every element of it) and no loop
inside ``k`` runs in parallel. Split at ``j < k``, ``j = k``, ``j > k`` (and likewise for ``i``), each piece
but the pivot's own row and column carries nothing: the rows run in parallel and each row's pieces are
plain vector loops. The pieces keep the source order among themselves (the pivot iteration runs between
the two sides, as before), so the program computes exactly what the source does; dependence analysis and
the scheduler then work on the pieces like on any statements.

:func:`split_pivots` finds, per statement, each read of the written array whose subscript is the write's
with one position's iterator ``x`` replaced by another iterator ``y`` (no constant, nothing else changed),
and cuts the domain by ``x < y``, ``x = y``, ``x > y`` where at least two of the pieces are non-empty. The
pieces are named ``S0_0``, ``S0_1``, ... in source order. Run before scheduling, on the scheduler's copy
of the program; the user's program and the reference interpreter are unchanged.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.bands import maps_union
from polyfuse.schedule.tiling.accesses import access_coefficients

MAX_PIECES = 9
"""At most this many pieces per statement (two cuts): more would multiply the statements the scheduler,
the legality check and the code generator see for a rare case."""


def split_pivots(prog: Program) -> tuple[Program, tuple[str, ...]]:
    """``prog`` with every statement that reads a pivot of its own array split around it (module
    docstring), and one note per split statement; ``prog`` itself where there is none."""
    statements: list[Statement] = []
    notes: list[str] = []
    pulls: list[isl.Map] = []
    for st in prog.statements:
        cuts = _pivot_cuts(st)
        pieces = _pieces(st.domain, cuts) if cuts else [st.domain]
        if len(pieces) < 2 or len(pieces) > MAX_PIECES:
            statements.append(st)
            pulls.append(_identity(st.domain))
            continue
        names = st.iterators
        for n, piece in enumerate(pieces):
            renamed = _renamed(st, f"{st.name}_{n}", piece)
            statements.append(renamed)
            pulls.append(_identity(renamed.domain).set_tuple_name(isl.dim_type.out, st.name))
        where = ", ".join(f"{names[x]} against {names[y]}" for x, y in cuts)
        notes.append(f"{st.name}: split at {where} into {len(pieces)} statements ({st.name}_0 .. {st.name}_{len(pieces) - 1}): "
                     "it reads the pivot element its own row writes, and apart the pieces carry no dependence along the row")
    if not notes:
        return prog, ()
    pull = isl.UnionPwMultiAff.from_union_map(maps_union(pulls))  # (split instance -> source instance)
    schedule = prog.schedule.pullback_union_pw_multi_aff(pull).intersect_domain(pull.domain())
    return dataclasses.replace(prog, statements=tuple(statements), schedule=schedule), tuple(notes)


def _pivot_cuts(st: Statement) -> list[tuple[int, int]]:
    """``(x, y)`` iterator positions for each read of the written array that is the written element with
    iterator ``x`` replaced by iterator ``y`` in one position."""
    write = access_coefficients(st.write.relation)
    if write is None:
        return []
    cuts: list[tuple[int, int]] = []
    for k, acc in enumerate(st.accesses):
        if k == st.target or acc.array != st.write.array:
            continue
        read = access_coefficients(acc.relation)
        if read is None or len(read) != len(write):
            continue
        differ = [d for d in range(len(write)) if write[d] != read[d]]
        if len(differ) != 1:
            continue
        x, y = _single(write[differ[0]]), _single(read[differ[0]])
        if x is not None and y is not None and x != y and (x, y) not in cuts:
            cuts.append((x, y))
    return cuts


def _single(dim) -> int | None:
    """The iterator position of a subscript that is exactly one iterator (coefficient 1, no parameter,
    no constant), else ``None``."""
    coeffs, params, const = dim
    used = [k for k, c in enumerate(coeffs) if c]
    if len(used) != 1 or coeffs[used[0]] != 1 or any(params.values()) or const:
        return None
    return used[0]


def _pieces(domain: isl.Set, cuts: list[tuple[int, int]]) -> list[isl.Set]:
    """``domain`` cut by ``x < y``, ``x = y``, ``x > y`` for each cut, empty pieces dropped, in source
    order (lexicographic order of the instances is kept by the schedule; the list order names them)."""
    pieces = [domain]
    for x, y in cuts:
        out = []
        for p in pieces:
            for relation in (-1, 0, 1):
                q = p.intersect(_compare(p.get_space(), x, y, relation))
                if not q.is_empty():
                    out.append(q)
        pieces = out
    return pieces


def _compare(space: isl.Space, x: int, y: int, relation: int) -> isl.Set:
    """The set of ``space`` where iterator ``x`` is below (-1), equal to (0) or above (1) iterator ``y``."""
    ls = isl.LocalSpace.from_space(space)
    if relation == 0:
        c = isl.Constraint.equality_alloc(ls).set_coefficient_val(isl.dim_type.set, x, 1).set_coefficient_val(isl.dim_type.set, y, -1)
    else:  # x < y: y - x - 1 >= 0; x > y: x - y - 1 >= 0
        c = (isl.Constraint.inequality_alloc(ls).set_coefficient_val(isl.dim_type.set, x, relation)
             .set_coefficient_val(isl.dim_type.set, y, -relation).set_constant_val(-1))
    return isl.Set.universe(space).add_constraint(c)


def _renamed(st: Statement, name: str, piece: isl.Set) -> Statement:
    accesses = tuple(dataclasses.replace(a, relation=a.relation.set_tuple_name(isl.dim_type.in_, name)) for a in st.accesses)
    return dataclasses.replace(st, name=name, domain=piece.set_tuple_name(name), accesses=accesses)


def _identity(domain: isl.Set) -> isl.Map:
    return isl.Map.identity(domain.get_space().map_from_set()).intersect_domain(domain)
