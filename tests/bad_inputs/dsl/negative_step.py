# expect: SourceError: is not positive
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N, 0, -1):
        B[i - 1] = A[i - 1]
