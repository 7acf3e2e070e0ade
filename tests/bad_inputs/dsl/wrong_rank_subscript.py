# expect: SourceError: has 2 dimensions but `A[i]` gives 1 subscript
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N, N], B: pf.f32[N]):
    for i in range(N):
        B[i] = A[i]
