# expect: SourceError: indirect access
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.i32[N], B: pf.f32[N]):
    for i in range(N):
        B[A[i]] = 1.0
