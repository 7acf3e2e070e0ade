# expect: SourceError: cannot assign to the whole array `B`
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    B = A
