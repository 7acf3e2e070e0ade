# expect: SourceError: is assigned as a value
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N):
        B[i] = A[i] > 0.0
