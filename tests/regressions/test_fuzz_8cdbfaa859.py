"""Found by the differential fuzzer (tests/fuzz): cuda: Not equal to tolerance rtol=1e-09, atol=1.7e-08

Root cause: ``A0[0, 0] = I1[i % 3]`` runs for one value of the thread-mapped ``i`` only, so isl printed
no loop for it and the printer pinned it to the thread of that value (``(N - 1) % 256``); the load of
``I1``'s register, a copy statement, had no member value and was pinned to thread 0, whose register
the statement did not read. Register copies now get their thread members' values from their own
coordinates (``codegen/cuda_mapping.register_copy_values``).
"""

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f64[N + 3, N + 3], I1: pf.i32[M + 3], alpha: pf.f64):
    for i in range(1, N):
        for j in range(1, N):
            if i <= N - 2:
                A0[i - 1, i % 3] = A0[1, 1]
            else:
                A0[0, 0] = I1[i % 3]

SIZES = {'N': 2, 'M': 2}
SEED = 2


def test_fuzz_8cdbfaa859():
    from tests.fuzz.harness import check_cuda_program

    check_cuda_program(fuzzed, SIZES, SEED)
