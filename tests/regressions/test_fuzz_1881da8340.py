"""Found by the differential fuzzer (tests/fuzz) once its CUDA slice ran in the simulator: fusion=smart,
sizes M=2, N=6, seed 37939. Two faults, both fixed:

* a race: a thread-mapped loop whose start was a conditional printed ``c2 = cond ? 0 : lo + threadIdx.x``
  (the ``+`` went into the branch), so every thread took ``c2 = 0`` and wrote ``A3[0][0]``; the printer
  now parenthesises the start (``codegen/ast.py`` ``as_operand``);
* a wrong result: isl's AST generation dropped instances of the copy-out of ``A3``'s shared buffer (a
  degenerate lane ``o0 + 128*(o0 mod 2)`` over a domain with ``(i0 - o0) mod 3 = 0``; a minimal case is in
  ``tests/test_cuda_sim.py``). ``build_ast`` now checks that the AST runs every instance
  (``AstCoverageError``), and the CUDA back end then generates the kernels without promotion, with a
  warning.
"""

import pytest

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f64[M + 3, M + 3], A1: pf.f64[N + 3, N + 3, 2 * N + 3], A2: pf.f64[M + 3, N + 3, M + 3], A3: pf.f64[2 * M + 3, N + 3], alpha: pf.f64):
    for i in range(1, N):
        A1[1, i, i + 2] += pf.tanh(pf.min(A1[i, i - 1, i], A3[1, i % 3]))
    for j in range(1, N):
        A1[j + 1, j + 1, 2 * j + 1] = A3[j % 3, j // 2]
        A3[j % 3, j % 3] -= A0[j % 3, j % 3]
    for k in range(1, M):
        if k >= 1:
            A1[2, 2, k % 3] *= pf.tanh(pf.tanh((A0[k + 1, k - 1] * alpha)))
        else:
            A2[M - 1 - k, k % 3, k // 2] -= 0.25

SIZES = {'M': 2, 'N': 6}
SEED = 37939


@pytest.mark.filterwarnings("ignore::polyfuse.PolyfuseWarning")
def test_fuzz_1881da8340():
    from tests.fuzz.harness import check_cuda_program

    check_cuda_program(fuzzed, SIZES, SEED)
