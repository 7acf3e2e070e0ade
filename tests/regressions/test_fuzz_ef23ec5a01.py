"""Found by the differential fuzzer (tests/fuzz) once its CUDA slice ran in the simulator: fusion=smart,
sizes M=2, N=6, T=2, seed 2771. The kernel's thread mapping disagreed with the one the barrier placement
(``schedule/movement/barriers.py``) assumed, in three ways, all fixed in ``codegen/cuda.py``:

* a statement whose thread-mapped member isl printed no loop for (its value fixed by the host loops) ran
  on thread 0, where the barrier placement had it on the thread of that value: now guarded
  ``threadIdx.x == value - origin``;
* kernels with shared buffers counted each mapped loop from its own start, so one value could fall to
  different threads in the copy and the compute: every mapped loop now counts from the axis's origin
  (for thread axes of such kernels, ``min(lo, 0)``, since copy lanes start at 0);
* a strided mapped loop counted from the origin in steps of its stride never reached values of the other
  residue: it now maps one value per thread and tests the stride.
"""

import polyfuse as pf

N, M, T, = pf.params('N M T')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f64[2 * M + 3, N + 3], A1: pf.f64[N + 3, M + 3]):
    for t in range(T):
        for i in range(N):
            for j in range(M):
                A1[i + 2, i % 3] = (pf.exp(pf.tanh(A1[i + 2, j + 1])) * A1[i + 1, j])
                A1[i // 2, j + 1] *= pf.tanh(A0[j + 1, N - 1 - i])

SIZES = {'M': 2, 'N': 6, 'T': 2}
SEED = 2771


def test_fuzz_ef23ec5a01():
    from tests.fuzz.harness import check_cuda_program

    check_cuda_program(fuzzed, SIZES, SEED)
