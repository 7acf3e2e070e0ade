# expect: SourceError: is not an integer constant
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(0, N, N):
        B[i] = A[i]
