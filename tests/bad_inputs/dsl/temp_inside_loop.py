# expect: SourceError: must be at the top level
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N):
        T = pf.empty((N,), pf.f32)
        T[i] = A[i]
        B[i] = T[i]
