# expect: SourceError: unsupported annotation `list`
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: list, B: pf.f32[N]):
    B[0] = 1.0
