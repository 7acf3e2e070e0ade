"""Point-loop interchange for the C target: the innermost loop of a tile is the one that walks memory.

isl's scheduler orders a band's members by its own criteria, so gemm's tiles come out ``i, j, k`` with the
reduction ``k`` innermost: ``B[k, j]`` is walked with stride ``N`` and ``C[i, j]`` is invariant, so the
compiler cannot vectorise the loop. Inside a tile of a *permutable* band any order of the point loops is
legal (every dependence distance is non-negative in every member), so :func:`stride_one_innermost` moves
innermost a member along which every write of the band is contiguous, the one with the most contiguous
reads (``i, k, j`` for gemm: ``C`` and ``B`` contiguous, ``A`` invariant). Where no member makes every
write contiguous (a row reduction next to an elementwise write, fused attention) isl's order stays: a
conservative rule, since a wrong guess costs more than it gains (measured: layernorm 8x slower). The tree is re-checked for legality by ``pf.schedule`` like every other.
"""

from __future__ import annotations

import islpy as isl

from polyfuse.ir.program import Program


def stride_one_innermost(prog: Program, point: isl.ScheduleNode) -> isl.ScheduleNode:
    """``point`` (a permutable band) with a better member for contiguous access moved innermost; the node
    unchanged unless some member makes every write of the band contiguous and the innermost does not, or
    both do and it makes more reads contiguous (ties keep isl's order)."""
    n = point.band_n_member()
    if n < 2 or not point.band_get_permutable():
        return point
    mupa = point.band_get_partial_schedule()
    scores = [_score(prog, mupa.get_union_pw_aff(k)) for k in range(n)]
    best = max(range(n), key=lambda k: (scores[k], k))  # ties: the innermost
    if best == n - 1 or scores[best] <= scores[n - 1] or not scores[best][0]:
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


def _score(prog: Program, member: isl.UnionPwAff) -> tuple[bool, int]:
    """(every write contiguous along ``member``, reads contiguous minus reads strided along it). A member
    that leaves some write strided or invariant (a reduction) is never moved innermost: such kernels (row
    reductions, fused attention) keep isl's order."""
    writes_ok, reads = True, 0
    pieces: list[isl.PwAff] = []
    member.foreach_pw_aff(pieces.append)
    for pa in pieces:
        stmt = prog.statement(pa.get_domain_space().get_tuple_name(isl.dim_type.set))
        it = _iterator(pa)
        if it is None:
            return (False, 0)
        for acc in stmt.accesses:
            kind = _along(acc.relation, it)
            if acc.kind != "read":
                writes_ok = writes_ok and kind == "contiguous"
            elif kind == "contiguous":
                reads += 1
            elif kind == "strided":
                reads -= 1
    return (writes_ok, reads)


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
