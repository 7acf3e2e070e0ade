"""Found by the differential fuzzer (tests/fuzz): cuda: Not equal to tolerance rtol=0.0002, atol=0.0002

Root cause: the CUDA printer kept every 0-d temporary whose statements lie in one kernel in a register
(``cuda._register_scalars``), but under fusion='max' this kernel (S0, S1, S2) runs inside a host loop with
S2 one iteration behind S0 and S1, so ``acc0`` flowed from one launch to the next and the register did not
survive the launch. A scalar whose flow crosses launches (unequal host prefix) now gets a global buffer.
"""

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f32[N + 3, M + 3], alpha: pf.f32):
    for i in range(1, N):
        acc0 = 0.0
        for j in range(1, M):
            acc0 += ((A0[1, i % 3] / 2.0) - abs(alpha))
        A0[i % 3, i % 3] = (alpha + acc0)
    for k in range(M):
        A0[k % 3, k + 1] -= pf.min(pf.min(alpha, 2.0), (A0[k % 3, k + 1] - A0[k % 3, k + 2]))

SIZES = {'N': 2, 'M': 2}
SEED = 60


def test_fuzz_dcba9cae23():
    from tests.fuzz.harness import check_cuda_program

    check_cuda_program(fuzzed, SIZES, SEED)
