# expect: BoundsError: outside array 'B'
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    B[N] = A[0]
