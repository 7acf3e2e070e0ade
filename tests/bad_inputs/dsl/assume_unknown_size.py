# expect: SourceError: unknown size `Q`
import polyfuse as pf

N, M = pf.params("N M")


@pf.program(assume="Q >= 2")
def bad(A: pf.f32[N], B: pf.f32[N]):
    B[0] = A[0]
