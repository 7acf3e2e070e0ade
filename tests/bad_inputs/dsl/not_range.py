# expect: SourceError: unsupported loop
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in [0, 1]:
        B[i] = A[i]
