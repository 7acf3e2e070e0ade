"""Found by the differential fuzzer (tests/fuzz): IllegalTransformError: illegal schedule for fuzzed: anti dependence on array 'A0' from S1 ('A0[0, j - 1] = A0[j % 3, j - 1]', line 12) to S2 ('A0[t % 2, j % 3] = A0[0, 1]', line 15) is violated: the schedule does not run the source before the sink; witness S1[t=0, j=1] -> S2[t=0, j=1, k=0] with N=2,

Root cause: not found. Under fusion='min' every tree isl gave (with and without the temporaries'
relaxations) broke the anti dependence above once finished, and ``pf.schedule`` raised instead of giving a
schedule (the legality check caught it: never a wrong result). ``_best`` now falls back to the source order
(fusion='none') with a warning when a policy yields no legal schedule; the bug in the min-fusion tree
itself is still open (present since session 7 at least).
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
