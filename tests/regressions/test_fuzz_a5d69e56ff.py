"""Found by the differential fuzzer (tests/fuzz): Error: call to isl_set_from_union_set failed: union map needs to contain elements in exactly one space in /project/isl/isl_union_map.c:781

Root cause: the C mapper counted a kernel launch's host-loop iterations (tiny work runs serially) from
the prefix schedule's range as one isl set; under a sequence node it lies in several spaces. Fixed in
mapping/kernels.py (_work_per_launch: the largest box over the spaces).
"""

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f32[M + 3, N + 3], A1: pf.f32[N + 3], A2: pf.f32[N + 3], A3: pf.f32[N + 3], I4: pf.i32[N + 3], alpha: pf.f32):
    for i in range(N):
        acc0 = 0.0
        for j in range(M):
            acc0 += alpha
        A0[i % 3, 0] = pf.tanh(A0[i % 3, 0])
    for k in range(N):
        for l in range(1, N):
            A0[0, 0] = ((alpha + A0[0, 0]) + A0[0, 0])
            for p in range(M):
                if l % 2 == 0:
                    A0[p, 0] = A1[0]

SIZES = {'N': 2, 'M': 2}
SEED = 0


def test_fuzz_a5d69e56ff():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)
