"""A scalar accumulator stored once into an array element becomes updates of that element.

``acc = 0; for k: acc += A[i, k] * B[k, j]; C[i, j] = acc`` and ``C[i, j] = 0; for k: C[i, j] += A[i, k]
* B[k, j]`` compute the same ``C``. Written the first way, the contraction's accumulator is a 0-d
temporary: the scheduler cannot tile its ``k`` loop apart from the store, the C back end finds no
contraction to micro-tile and CUDA stages no operand in shared memory. :func:`forward_accumulators`
rewrites the first form into the second before scheduling, so that both get the same schedule:

* **When.** A contraction (some element the update reads is read for several instances of the outer
  loops: gemm's ``A[i, k]`` for every ``j``; a row reduction keeps its scalar, which CUDA's cooperative
  rows want in a register) whose 0-d temporary ``acc`` is accessed by exactly three statements,
  consecutive in the source: an
  initialisation ``acc = e0`` (``e0`` reads neither ``acc`` nor ``C``), an update ``acc op= e`` (``+=``,
  ``-=``, ``*=``) or ``acc = f(acc, e)`` (``f`` in max, min, +, *) over the same iterators plus inner loops
  (``e`` reads neither ``acc`` nor ``C``), and a store ``C[f(i)] = acc`` of the same dtype over the same
  iterators as the initialisation, writing a different element at every instance.
* **How.** The initialisation writes ``C[f(i)]``, the update updates it (``acc``'s accesses become ``C``'s,
  the element of the update's outer iterators), and the store is dropped; nothing else touches ``C`` in
  between (the statements are consecutive), so every element ends with the value the store gave it.

The result is a new :class:`Program` (the user's is unchanged); the reference interpreter and the C
frontend's own tests still run the original.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from polyfuse.ir.expr import Read
from polyfuse.ir.program import Access, Program, Statement
from polyfuse.schedule.mapping.rows import reduction_op

_UPDATES = ("+=", "-=", "*=")


def forward_accumulators(prog: Program) -> tuple[Program, tuple[str, ...]]:
    """``prog`` with every qualifying accumulator forwarded (module docstring), and one note per rewrite."""
    notes: list[str] = []
    for name, array in prog.arrays.items():
        if array.role != "temp" or array.ndim != 0:
            continue
        users = [k for k, s in enumerate(prog.statements) if any(a.array == name for a in s.accesses)]
        if len(users) != 3 or users != list(range(users[0], users[0] + 3)):
            continue
        init, update, store = (prog.statements[k] for k in users)
        rewritten = _rewrite(prog, name, init, update, store)
        if rewritten is None:
            continue
        new_init, new_update = rewritten
        statements = prog.statements[: users[0]] + (new_init, new_update) + prog.statements[users[0] + 3:]
        domains = isl.UnionSet.empty(prog.schedule.get_domain().get_space())
        for s in statements:
            domains = domains.union(isl.UnionSet.from_set(s.domain))
        arrays = {n: a for n, a in prog.arrays.items() if n != name}
        prog = dataclasses.replace(prog, statements=statements, arrays=arrays, schedule=prog.schedule.intersect_domain(domains))
        notes.append(f"{update.name}: the accumulator {name!r} is updated in {store.write.text or store.write.array} directly "
                     f"({store.name}, which stored it, is dropped), so the reduction is scheduled like one written into the array")
    return prog, tuple(notes)


def _rewrite(prog: Program, acc: str, init: Statement, update: Statement, store: Statement) -> tuple[Statement, Statement] | None:
    target = store.write.array
    if init.write.array != acc or update.write.array != acc or init.op != "=" or store.op != "=":
        return None
    if prog.arrays[target].dtype != prog.arrays[acc].dtype:
        return None
    value = store.value
    if not (isinstance(value, Read) and store.accesses[value.access].array == acc) or len(store.accesses) != 2:
        return None
    if any(a.array in (acc, target) for k, a in enumerate(init.accesses) if k != init.target):
        return None
    n = init.depth
    if store.iterators != init.iterators or update.iterators[:n] != init.iterators or update.depth <= n:
        return None
    ctx = prog.context.params()
    if not _same_set(init.domain, store.domain, ctx) or not _subset(_outer(update.domain, n), init.domain, ctx):
        return None  # (an update loop empty for some outer instances is fine: the element keeps e0, as acc did)
    element = store.write.relation  # store instance -> C element: one element per instance
    if not element.is_injective():
        return None
    acc_reads = [k for k, a in enumerate(update.accesses) if k != update.target and a.array == acc]
    if update.op in _UPDATES:
        if acc_reads:
            return None
    elif update.op != "=" or len(acc_reads) != 1 or reduction_op(update) is None:  # acc = f(acc, e)
        return None
    if any(a.array == target for k, a in enumerate(update.accesses) if k != update.target and k not in acc_reads):
        return None
    if not _reused(update, n, acc_reads):
        return None
    at_init = element.set_tuple_id(isl.dim_type.in_, init.domain.get_tuple_id())
    outer = _projection(update.domain, n).apply_range(element.set_tuple_id(isl.dim_type.in_, isl.Id(_OUTER)))
    new_init = _retarget(init, {init.target: Access(target, "write", at_init.intersect_domain(init.domain), store.write.text)})
    kind = update.write.kind if update.op in _UPDATES else "write"
    replaced = {update.target: Access(target, kind, outer.intersect_domain(update.domain), store.write.text)}
    replaced.update({k: Access(target, "read", outer.intersect_domain(update.domain), store.write.text) for k in acc_reads})
    return new_init, _retarget(update, replaced)


_OUTER = "pf_outer"


def _reused(update: Statement, n: int, skip: list[int]) -> bool:
    """Whether some element ``update`` reads is read for several outer instances (a contraction's operand:
    gemm's ``A[i, k]`` for every ``j``). A row reduction reads each element for one row only; it keeps its
    accumulator, which CUDA's cooperative rows need in a register."""
    outer = _projection(update.domain, n)
    for k, a in enumerate(update.accesses):
        if k == update.target or k in skip:
            continue
        readers = a.relation.intersect_domain(update.domain).reverse().apply_range(outer)  # element -> outer
        if not readers.is_single_valued():
            return True
    return False


def _outer(domain: isl.Set, n: int) -> isl.Set:
    return domain.project_out(isl.dim_type.set, n, domain.dim(isl.dim_type.set) - n)


def _projection(domain: isl.Set, n: int) -> isl.Map:
    """``S[i, k] -> pf_outer[i]`` on ``domain``: an update instance to its first ``n`` iterators."""
    m = isl.Map.from_domain(domain).add_dims(isl.dim_type.out, n)
    for d in range(n):
        m = m.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
    return m.set_tuple_id(isl.dim_type.out, isl.Id(_OUTER))


def _same_set(a: isl.Set, b: isl.Set, ctx: isl.Set) -> bool:
    return a.reset_tuple_id().intersect_params(ctx).is_equal(b.reset_tuple_id().intersect_params(ctx))


def _subset(a: isl.Set, b: isl.Set, ctx: isl.Set) -> bool:
    return a.reset_tuple_id().intersect_params(ctx).is_subset(b.reset_tuple_id().intersect_params(ctx))


def _retarget(stmt: Statement, replaced: dict[int, Access]) -> Statement:
    accesses = tuple(replaced.get(k, a) for k, a in enumerate(stmt.accesses))
    return dataclasses.replace(stmt, accesses=accesses)
