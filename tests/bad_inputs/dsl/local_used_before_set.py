# expect: SourceError: before it is assigned
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N):
        acc += A[i]
        B[i] = acc
