"""Point-loop interchange for the C target: the innermost loop of a tile is the one that walks memory.

isl's scheduler orders a band's members by its own criteria, so gemm's tiles come out ``i, j, k`` with the
reduction ``k`` innermost: ``B[k, j]`` is walked with stride ``N`` and ``C[i, j]`` is invariant, so the
compiler cannot vectorise the loop. Inside a tile of a *permutable* band any order of the point loops is
legal (every dependence distance is non-negative in every member), so :func:`stride_one_innermost` moves
the member along which the most accesses to arguments are contiguous to the innermost position (``i, k,
j`` for gemm: ``C`` and ``B`` contiguous, ``A`` invariant). Strided accesses and writes invariant along a
member (a reduction into it) count against it; temporaries, mostly contracted to registers, do not count. The tree is re-checked for legality by ``pf.schedule`` like every other.
"""

from __future__ import annotations

import islpy as isl

from polyfuse.ir.program import Program


def stride_one_innermost(prog: Program, point: isl.ScheduleNode) -> isl.ScheduleNode:
    """``point`` (a permutable band) with the best member for contiguous access moved innermost; the
    node unchanged when the innermost member is already the best (ties keep isl's order)."""
    n = point.band_n_member()
    if n < 2 or not point.band_get_permutable():
        return point
    mupa = point.band_get_partial_schedule()
    scores = [_score(prog, mupa.get_union_pw_aff(k)) for k in range(n)]
    best = max(range(n), key=lambda k: (scores[k], k))  # ties: the innermost
    if best == n - 1 or scores[best] <= scores[n - 1]:
        return point
    order = [k for k in range(n) if k != best] + [best]
    coincident = [point.band_member_get_coincident(k) for k in order]
    members = isl.UnionPwAffList.alloc(isl.DEFAULT_CONTEXT, n)
    for k in order:
        members = members.add(mupa.get_union_pw_aff(k))
    reordered = isl.MultiUnionPwAff.from_union_pw_aff_list(mupa.get_space(), members)
    node = point.delete().insert_partial_schedule(reordered)
    node = node.band_set_permutable(1)
    for k, c in enumerate(coincident):
        node = node.band_member_set_coincident(k, c)
    return node


def _score(prog: Program, member: isl.UnionPwAff) -> int:
    """Accesses to arguments contiguous along ``member``, minus strided ones and writes invariant along it
    (a reduction innermost does not vectorise); temporaries do not count."""
    score = 0
    pieces: list[isl.PwAff] = []
    member.foreach_pw_aff(pieces.append)
    for pa in pieces:
        stmt = prog.statement(pa.get_domain_space().get_tuple_name(isl.dim_type.set))
        it = _iterator(pa)
        if it is None:
            continue
        for acc in stmt.accesses:
            if prog.arrays[acc.array].role == "temp":
                continue  # usually contracted to registers later (softmax's row max): no memory walked
            kind = _along(acc.relation, it)
            if kind == "contiguous":
                score += 1
            elif kind != "invariant" or acc.kind != "read":
                score -= 1
    return score


def _iterator(pa: isl.PwAff) -> int | None:
    """The statement iterator a member follows (coefficient +-1 on exactly one, in every piece)."""
    found: set[int] = set()
    for _, aff in pa.get_pieces():
        hits = [i for i in range(aff.dim(isl.dim_type.in_)) if aff.get_coefficient_val(isl.dim_type.in_, i).to_python() != 0]
        if len(hits) != 1 or abs(aff.get_coefficient_val(isl.dim_type.in_, hits[0]).to_python()) != 1:
            return None
        found.add(hits[0])
    return found.pop() if len(found) == 1 else None


def _along(relation: isl.Map, it: int) -> str:
    """How an access moves when iterator ``it`` steps: "invariant", "contiguous" (only the last
    subscript, by +-1) or "strided" (anything else, quasi-affine subscripts included)."""
    try:
        pma = isl.PwMultiAff.from_map(relation)
    except isl.Error:
        return "strided"
    n_out = relation.dim(isl.dim_type.out)
    if n_out == 0:
        return "invariant"
    coeffs = []
    for d in range(n_out):
        values = set()
        for _, aff in pma.get_pw_aff(d).get_pieces():
            if aff.dim(isl.dim_type.div):
                return "strided"
            values.add(aff.get_coefficient_val(isl.dim_type.in_, it).to_python())
        if len(values) != 1:
            return "strided"
        coeffs.append(values.pop())
    if all(c == 0 for c in coeffs):
        return "invariant"
    if all(c == 0 for c in coeffs[:-1]) and abs(coeffs[-1]) == 1:
        return "contiguous"
    return "strided"
