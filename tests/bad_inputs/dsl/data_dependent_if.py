# expect: SourceError: cannot depend on array values
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N):
        if A[i] > 0.0:
            B[i] = A[i]
