# expect: SourceError: unsupported constant
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    B[0] = 'x'
