# expect: SourceError: a with block is not allowed
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    with open('x') as f:
        B[0] = 1.0
