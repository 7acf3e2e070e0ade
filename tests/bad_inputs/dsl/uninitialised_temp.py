# expect: SourceError: temporary 'T' is read by S0 before any statement writes it
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    T = pf.empty((N,), pf.f32)
    for i in range(N):
        B[i] = T[i]
