# expect: SourceError: a nested function is not allowed
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    def g():
        pass
    B[0] = A[0]
