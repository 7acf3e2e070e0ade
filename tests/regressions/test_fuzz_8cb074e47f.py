"""Found by the differential fuzzer (tests/fuzz): cuda: Not equal to tolerance rtol=1e-09, atol=6.05324e-08

Root cause: the CUDA launch extent of a mapped loop was (hi - lo) / s + 1 with lo the least value at
the current host iteration, but the kernel maps c = init + s * threadIdx and isl's AST init comes from
a hull over all host iterations: at j >= 1 only S1 runs, at thread value 1, while the loop starts at 0
(for S0 at j = 0), so one thread was launched and S1 never ran. lo is now the least value over every
host iteration (codegen/host_plan.py: mapped_ranges).
"""

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f64[2 * M + 3, M + 3]):
    for i in range(M):
        for j in range(i + 1):
            A0[M - 1 - j, j] -= A0[j + 2, i + 1]
            A0[i + 1, 1] += (0.25 * pf.tanh(A0[j // 2, j % 3]))
    for k in range(M):
        for l in range(N):
            for p in range(N):
                A0[M - 1 - k, M - 1 - k] += A0[k + 1, k % 3]
                A0[k // 2, k + 2] = pf.sqrt(pf.abs(A0[2 * k + 1, k // 2]) + 1.0)

SIZES = {'M': 2, 'N': 5}
SEED = 904


def test_fuzz_8cb074e47f():
    from tests.fuzz.harness import check_cuda_program

    check_cuda_program(fuzzed, SIZES, SEED)
