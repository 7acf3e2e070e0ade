"""Found by the differential fuzzer (tests/fuzz): Error: call to isl_set_from_union_set failed: union map needs to contain elements in exactly one space in /project/isl/isl_union_map.c:781

Root cause: the C mapper counted a kernel launch's host-loop iterations (tiny work runs serially) from
the prefix schedule's range as one isl set; under a sequence node it lies in several spaces. Fixed in
mapping/kernels.py (_work_per_launch: the largest box over the spaces).
"""

import polyfuse as pf

N, M, T, = pf.params('N M T')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f32[N + 3, N + 3], alpha: pf.f32):
    B0 = pf.empty((N + 3,), pf.f32)
    for t in range(T):
        for i in range(N + 3):
            B0[i] = A0[0, 0]

SIZES = {'N': 2, 'M': 2, 'T': 0}
SEED = 0


def test_fuzz_8cc55de2c4():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)
