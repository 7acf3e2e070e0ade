# expect: SourceError: `i * j` is not affine
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N, N], B: pf.f32[N]):
    for i in range(N):
        for j in range(N):
            B[i * j] = A[i, j]
