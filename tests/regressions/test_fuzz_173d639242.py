"""Found by the differential fuzzer (tests/fuzz): AssertionError: AssertionError

Root cause: (to be filled in when fixed).
"""

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.i32[N + 3], A1: pf.i32[N + 3], A2: pf.i32[N + 3, M + 3, N + 3]):
    for i in range(N):
        if i % 2 == 0:
            A0[i] = (1) % 1009
    for j in range(M):
        A2[j % 3, j, j % 3] = (1) % 1009

SIZES = {'N': 2, 'M': 2}
SEED = 0


def test_fuzz_173d639242():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)
