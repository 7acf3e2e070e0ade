"""Found by the differential fuzzer (tests/fuzz): IllegalTransformError: illegal schedule for fuzzed: anti dependence on array 'A0' from S1 ('A0[0, j - 1] = A0[j % 3, j - 1]', line 12) to S2 ('A0[t % 2, j % 3] = A0[0, 1]', line 15) is violated: the schedule does not run the source before the sink; witness S1[t=0, j=1] -> S2[t=0, j=1, k=0] with N=2,

Root cause: isl's schedule constraints changed the dependence maps they were given. ``isl_tree`` handed
``set_validity`` the union of S1 -> S2's flow, anti and output dependences, whose maps were the very
objects ``dependences_of`` keeps; afterwards the anti dependence above had lost its ``mod 3``
constraints and held ``S1[t, 1] -> S2[t, 1, k]``, which touch different elements (A0[1, 0] read, A0[0, 1]
written). isl's scheduler itself saw the exact constraints, so its tree ran S2[t, 1, k] first, and the
legality check, reading the damaged map, rejected every ``fusion='min'`` tree. ``scheduler.detached``
now gives isl copies of the maps with integer divisions (the fallback of ``_best`` to the source order
stays as a guard).
"""

import polyfuse as pf

N, M, T, = pf.params('N M T')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f32[N + 3, M + 3], alpha: pf.f32):
    for t in range(T):
        for i in range(N):
            A0[0, 0] = A0[0, 0]
        for j in range(1, M):
            A0[0, j - 1] = A0[j % 3, j - 1]
            for k in range(N):
                if j >= 1:
                    A0[t % 2, j % 3] = A0[0, 1]

SIZES = {'N': 2, 'M': 2, 'T': 0}
SEED = 0


def test_fuzz_dcf393d737():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)


def test_min_fusion_schedules_it_and_the_dependences_keep_their_meaning():
    import warnings

    import islpy as isl

    from polyfuse.schedule.deps import dependences_of

    (anti,) = [d for d in dependences_of(fuzzed) if (d.kind, d.source, d.sink) == ("anti", "S1", "S2")]
    different_elements = isl.Map("[N, M, T] -> { S1[t, j] -> S2[t2, j2, k] : t = t2 = 0 and j = j2 = 1 and k = 0 "
                                 "and N = 2 and M = 2 and T = 1 }")
    assert anti.relation.intersect(different_elements).is_empty()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pf.PolyfuseWarning)  # (no fallback to the source order)
        for params in (SIZES, None):
            sched = pf.schedule(fuzzed, target="c", fusion="min", params=params)
            assert sched.fusion == "min"
    assert anti.relation.intersect(different_elements).is_empty()
