"""A scalar accumulator stored once into an array element becomes updates of that element.

``acc = 0; for k: acc += A[i, k] * B[k, j]; C[i, j] = acc`` and ``C[i, j] = 0; for k: C[i, j] += A[i, k]
* B[k, j]`` compute the same ``C``. Written the first way, the contraction's accumulator is a 0-d
temporary: the scheduler cannot tile its ``k`` loop apart from the store, the C back end finds no
contraction to micro-tile and CUDA stages no operand in shared memory. :func:`forward_accumulators`
rewrites the first form into the second before scheduling, so that both get the same schedule:

* **When.** A contraction (some element the update reads is read for several instances of the outer
  loops: gemm's ``A[i, k]`` for every ``j``; a row reduction keeps its scalar, which CUDA's cooperative
  rows want in a register) whose 0-d temporary ``acc`` is accessed by statements in groups of three,
  each group consecutive in the source (ludcmp's ``w`` serves four loop nests in turn): an
  initialisation ``acc = e0``, an update ``acc op= e`` (``+=``, ``-=``, ``*=``) or ``acc = f(acc, e)``
  (``f`` in max, min, +, *) over the same iterators plus inner loops (``e`` not reading ``acc``), and a
  store ``C[f(i)] = g(acc, ...)`` of the same dtype over the same iterators as the initialisation,
  writing a different element at every instance. ``e0`` reads neither ``acc`` nor ``C``, or is the
  store's own element (``w = A[i][j]``: the element already holds it). ``e`` may read ``C`` but never the
  element it accumulates into, and ``g`` reads that element only through ``acc``: reading it elsewhere
  would see the partial sums instead of the value it had. Each group is taken alone; one that fails
  keeps ``acc``.
* **When it pays.** The first form (``e0`` and ``e`` not reading ``C``, the store a plain copy) always;
  the others (``C`` read, or a final step ``g``) only where a read of the update strides through memory
  along the innermost loop (ludcmp's ``A[k][j]`` over ``k``): forwarded, the scheduler may put ``j``
  innermost (ludcmp at PolyBench LARGE: 1.5 s, as gcc, to 0.56 s on one thread, 0.29 s on two, where
  Polly's parallel build takes 0.65 s and 0.39 s). A dot product of contiguous rows (the substitutions'
  ``w -= A[i][j] * y[j]``) is what the scalar form does best and keeps it.
* **How.** The initialisation writes ``C[f(i)]`` (or is dropped when it reloads that element), the update
  updates it (``acc``'s accesses become ``C``'s, the element of the update's outer iterators), and the
  store is dropped, or, when it computes ``g``, reads the element instead of ``acc``; nothing else
  touches ``C`` in between (the statements are consecutive), so every element ends with the value the
  store gave it.

The result is a new :class:`Program` (the user's is unchanged); the reference interpreter and the C
frontend's own tests still run the original.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from polyfuse.ir.expr import Read
from polyfuse.ir.program import Access, Program, Statement
from polyfuse.schedule.mapping.rows import reduction_op
from polyfuse.schedule.tiling.accesses import access_coefficients, stride_along

_UPDATES = ("+=", "-=", "*=")


def forward_accumulators(prog: Program) -> tuple[Program, tuple[str, ...]]:
    """``prog`` with every qualifying accumulator forwarded (module docstring), and one note per rewrite."""
    notes: list[str] = []
    for name, array in list(prog.arrays.items()):
        if array.role != "temp" or array.ndim != 0:
            continue
        users = [k for k, s in enumerate(prog.statements) if any(a.array == name for a in s.accesses)]
        groups = [users[k:k + 3] for k in range(0, len(users), 3)]
        if not users or any(len(g) != 3 or g != list(range(g[0], g[0] + 3)) for g in groups):
            continue
        statements, kept, done = list(prog.statements), False, []
        for g in reversed(groups):  # (from the last: a rewrite may drop statements)
            init, update, store = (statements[k] for k in g)
            rewritten = _rewrite(prog, name, init, update, store)
            if rewritten is None:
                kept = True
                continue
            statements[g[0]:g[0] + 3] = rewritten
            target = store.write.text or store.write.array
            dropped = [s.name for s in (init, store) if s.name not in {r.name for r in rewritten}]
            done.insert(0, f"{update.name}: the accumulator {name!r} is updated in {target} directly"
                        + (f" ({', '.join(dropped)} dropped)" if dropped else "")
                        + ", so the reduction is scheduled like one written into the array")
        notes.extend(done)
        if len(statements) == len(prog.statements) and all(a is b for a, b in zip(statements, prog.statements)):
            continue
        domains = isl.UnionSet.empty(prog.schedule.get_domain().get_space())
        for s in statements:
            domains = domains.union(isl.UnionSet.from_set(s.domain))
        arrays = dict(prog.arrays) if kept else {n: a for n, a in prog.arrays.items() if n != name}
        prog = dataclasses.replace(prog, statements=tuple(statements), arrays=arrays,
                                   schedule=prog.schedule.intersect_domain(domains))
    return prog, tuple(notes)


def _rewrite(prog: Program, acc: str, init: Statement, update: Statement, store: Statement) -> tuple[Statement, ...] | None:
    """The statements that replace ``init, update, store`` (module docstring), or None."""
    target = store.write.array
    if init.write.array != acc or update.write.array != acc or init.op != "=" or store.op != "=":
        return None
    if prog.arrays[target].dtype != prog.arrays[acc].dtype or target == acc:
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
    at_init = element.set_tuple_id(isl.dim_type.in_, init.domain.get_tuple_id())
    # the initialisation: reads neither acc nor C, or is acc = C[that element] (the store's own element,
    # whose value the element already holds: the initialisation is dropped)
    init_reads = [a for k, a in enumerate(init.accesses) if k != init.target]
    reloads = isinstance(init.value, Read) and len(init_reads) == 1 and init_reads[0].array == target and \
        init_reads[0].relation.intersect_domain(init.domain).is_equal(at_init.intersect_domain(init.domain))
    if not reloads and any(a.array in (acc, target) for a in init_reads):
        return None
    acc_reads = [k for k, a in enumerate(update.accesses) if k != update.target and a.array == acc]
    if update.op in _UPDATES:
        if acc_reads:
            return None
    elif update.op != "=" or len(acc_reads) != 1 or reduction_op(update) is None:  # acc = f(acc, e)
        return None
    outer = _projection(update.domain, n).apply_range(element.set_tuple_id(isl.dim_type.in_, isl.Id(_OUTER)))
    outer = outer.intersect_domain(update.domain)  # update instance -> the element it accumulates into
    target_reads = [a for k, a in enumerate(update.accesses) if k != update.target and k not in acc_reads and a.array == target]
    if any(not a.relation.intersect_domain(update.domain).intersect(outer).is_empty() for a in target_reads):
        return None  # (it would read the element while it accumulates, not the value it had)
    if not _reused(update, n, acc_reads):
        return None
    store_acc = [k for k, a in enumerate(store.accesses) if k != store.target and a.array == acc]
    plain_store = isinstance(store.value, Read) and store.accesses[store.value.access].array == acc and len(store.accesses) == 2
    own = element.intersect_domain(store.domain)
    if any(a.array == target and not a.relation.intersect_domain(store.domain).intersect(own).is_empty()
           for k, a in enumerate(store.accesses) if k != store.target and k not in store_acc):
        return None  # (the store reads the element's old value besides the accumulator)
    if (reloads or target_reads or not plain_store) and not _strided(update, acc_reads):
        return None  # (C's own elements read, or a final step: worth it only where the scalar form strides)
    kind = update.write.kind if update.op in _UPDATES else "write"
    replaced = {update.target: Access(target, kind, outer, store.write.text)}
    replaced.update({k: Access(target, "read", outer, store.write.text) for k in acc_reads})
    out = [] if reloads else [_retarget(init, {init.target: Access(target, "write", at_init.intersect_domain(init.domain), store.write.text)})]
    out.append(_retarget(update, replaced))
    if not plain_store:  # C = g(acc, ...): the final step reads the element instead
        out.append(_retarget(store, {k: Access(target, "read", own, store.write.text) for k in store_acc}))
    return tuple(out)


def _strided(update: Statement, skip: list[int]) -> bool:
    """Whether a read of ``update`` walks memory with a stride along its innermost loop (ludcmp's
    ``A[k][j]`` over ``k``): the scalar form cannot vectorise or stream it, the forwarded one may be
    interchanged. A dot product of contiguous rows (the forward substitution's ``w -= A[i][j] * y[j]``)
    is already what the scalar form does best."""
    inner = update.depth - 1
    for k, a in enumerate(update.accesses):
        if k == update.target or k in skip:
            continue
        coeffs = access_coefficients(a.relation)
        if coeffs is None or stride_along(coeffs, inner) == "other":
            return True
    return False


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
