# expect: SourceError: chained assignment
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N):
        A[i] = B[i] = 0.0
