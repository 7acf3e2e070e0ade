# expect: SourceError: needs an annotation
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A, B: pf.f32[N]):
    B[0] = A[0]
