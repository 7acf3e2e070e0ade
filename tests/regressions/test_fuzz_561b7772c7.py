"""Found by the differential fuzzer (tests/fuzz): Error: call to isl_union_access_info_compute_flow failed: affine expression involves some of the domain dimensions in /project/isl/isl_domain_factor_templ.c:26

Root cause: isl's dataflow analysis (compute_flow with must sources) fails internally on these
quasi-affine updates ("affine expression involves some of the domain dimensions", isl_domain_factor);
the raw isl.Error escaped pf.schedule. Dependence analysis now falls back to memory-based flow (every
earlier write of the element: a superset of the exact flow, so legality is preserved) with a
PolyfuseWarning (analysis/dependences.py: _last_writer).
"""

import polyfuse as pf

N, M, T, = pf.params('N M T')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f64[M + 3], I1: pf.i32[M + 3]):
    for t in range(T):
        for i in range(M):
            if i >= 1:
                A0[i + 1] *= pf.tanh(pf.min(abs(A0[M - 1 - i]), abs(A0[i + 2])))
            A0[t % 2] = abs((I1[i // 2] + A0[t % 2]))
        for j in range(N):
            for k in range(j + 1):
                A0[j % 3] += (pf.max(I1[t % 2], I1[k % 3]) / 2.0)
                A0[t % 2] *= pf.tanh(pf.sqrt(pf.abs(pf.sqrt(pf.abs(A0[t % 2]) + 1.0)) + 1.0))
        for l in range(1, M):
            for p in range(l + 1):
                A0[t % 2] += ((A0[0] - I1[M - 1 - p]) / 2.0)

SIZES = {'N': 4, 'M': 5, 'T': 1}
SEED = 2928


def test_fuzz_561b7772c7():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)
