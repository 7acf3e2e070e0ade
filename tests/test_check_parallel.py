"""``check_parallel``: two instances that run in the same iteration of the outer loops but on different
threads must not depend on each other (anti and output dependences on a privatised array count only on
the same copy). The answer must be exactly that of the relation it is defined by, whichever way it is
computed (the images in the ``[outer, copy, thread]`` space, or the pairs of instances)."""

from __future__ import annotations

import itertools

import islpy as isl
import pytest

import polyfuse as pf
from polyfuse.analysis.legality import check_parallel
from polyfuse.schedule.deps import dependences_of

H, W = pf.params("H W")


@pf.program
def rowscan(A: pf.f32[H, W]):
    for i in range(H):
        for j in range(1, W):
            A[i, j] = A[i, j - 1] + A[i, j]


@pf.program
def through_temp(A: pf.f32[H, W], B: pf.f32[H, W], t: pf.f32[W]):
    for i in range(H):
        for j in range(W):
            t[j] = A[i, j] * 2.0
        for j in range(W):
            B[i, j] = t[j] + 1.0


@pf.program
def shifted(A: pf.f32[H, W], B: pf.f32[H, W]):
    for i in range(H):
        for j in range(W):
            B[i, j] = A[i, j] * 2.0
    for i in range(1, H):
        for j in range(W):
            A[i, j] = B[i - 1, j] + 1.0


def _maps(prog: pf.Program, body: str) -> isl.UnionMap:
    """``{ S[..] -> [...] }`` for every statement, ``body`` written in the statement's iterator names."""
    pieces = []
    for s in prog.statements:
        its = ", ".join(s.iterators)
        pieces.append(f"{s.name}[{its}] -> [{body.format(**{f'i{k}': n for k, n in enumerate(s.iterators)})}]")
    return isl.UnionMap("[H, W] -> { " + "; ".join(pieces) + " }")


def _exact(prog: pf.Program, outer: isl.UnionMap, thread: isl.UnionMap, privatized=None) -> bool:
    """Whether some dependence pair runs in one outer iteration on two threads: the definition, pair by pair."""
    domain = prog.domains
    same_outer = outer.apply_range(outer.reverse())
    same_thread = thread.apply_range(thread.reverse())
    for dep in dependences_of(prog):
        rel = isl.UnionMap.from_map(dep.relation).intersect_params(prog.context)
        rel = rel.intersect_domain(domain).intersect_range(domain).intersect(same_outer)
        copies = (privatized or {}).get(dep.array)
        if copies is not None and dep.kind != "flow":
            rel = rel.intersect(copies.apply_range(copies.reverse()))
        if not rel.subtract(same_thread).is_empty():
            return True
    return False


def _races(prog, outer, thread, privatized=None) -> bool:
    try:
        check_parallel(prog, prog.domains, outer, thread, privatized)
    except pf.IllegalTransformError as e:
        assert "different threads" in str(e)
        return True
    return False


def test_a_loop_that_carries_the_scan_races_and_the_other_does_not():
    none = _maps(rowscan, "")
    assert _races(rowscan, none, _maps(rowscan, "{i1}"))
    assert _races(rowscan, none, _maps(rowscan, "floor({i1}/32)"))  # tiles: the pairs across a tile edge
    assert not _races(rowscan, none, _maps(rowscan, "{i0}"))
    assert not _races(rowscan, _maps(rowscan, "{i1}"), _maps(rowscan, "{i0}"))
    # both coordinates of a two-dimensional thread id: j differs across the pair
    assert _races(rowscan, none, _maps(rowscan, "{i0}, {i1}"))


def test_a_privatised_temporary_races_only_when_shared():
    """t is rewritten for every i: distinct i on distinct threads race on it, unless each thread has its
    own copy; the flow from t[j] to its reader stays within one i, so it never races."""
    none = _maps(through_temp, "")
    by_row = _maps(through_temp, "{i0}")
    assert _races(through_temp, none, by_row)
    assert not _races(through_temp, none, by_row, {"t": by_row})
    # a copy per row but threads over j: the write of t[j] and its read run on the same j, so no race
    assert not _races(through_temp, none, _maps(through_temp, "{i1}"), {"t": by_row})


@pytest.mark.parametrize("prog", [rowscan, through_temp, shifted], ids=lambda p: p.name)
def test_the_answer_is_the_definition_s_for_every_choice_of_loops(prog):
    choices = ["", "{i0}", "{i1}", "floor({i0}/4)", "floor({i1}/8)", "{i0}, {i1}", "{i0} + {i1}"]
    for outer, thread in itertools.product(choices[:4], choices):
        o, t = _maps(prog, outer), _maps(prog, thread)
        privatized = {"t": _maps(prog, "{i0}")} if prog is through_temp else None
        assert _races(prog, o, t, privatized) == _exact(prog, o, t, privatized), (outer, thread)
