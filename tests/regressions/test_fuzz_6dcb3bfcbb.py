"""Found by the differential fuzzer (tests/fuzz): CodegenError: the C compiler failed (/usr/bin/cc -O3 -march=native -fopenmp -shared -fPIC -std=c99 -fno-math-errno -fno-trapping-math):

Root cause: not in polyfuse but in the fuzz harness. It compiles all variants of a program as one C unit
and merged their preludes line by line; once the C backend printed multi-line math helpers
(codegen/c_math.py), lines such as `{` were shared between helpers and dropped, tearing a later helper
apart (a compile error). The harness now merges whole prelude items (tests/fuzz/harness.py: _prelude_items).
"""

import polyfuse as pf

N, M, T, = pf.params('N M T')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f64[N + 3, 2 * N + 3], A1: pf.f64[N + 3, M + 3, M + 3], A2: pf.f64[N + 3, M + 3], A3: pf.f64[N + 3], I4: pf.i32[N + 3], alpha: pf.f64):
    for t in range(T):
        for i in range(N):
            for j in range(1, M):
                A0[i + 1, 2 * i + 1] = pf.exp(pf.tanh(I4[i + 2]))
        for k in range(1, M):
            A0[t % 2, t % 2] *= pf.tanh(abs(pf.exp(pf.tanh(alpha))))

SIZES = {'N': 5, 'M': 2, 'T': 3}
SEED = 15639


def test_fuzz_6dcb3bfcbb():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)
