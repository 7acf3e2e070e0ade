# expect: SourceError: scalar arguments are read-only
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], alpha: pf.f32):
    alpha = 2.0
