# expect: SourceError: plain annotated names
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N] = None):
    B[0] = A[0]
