# expect: BoundsError: writes `B[i]` outside array 'B'
import polyfuse as pf

N, M = pf.params("N M")


@pf.program
def bad(A: pf.f32[N], B: pf.f32[N]):
    for i in range(N + 1):
        B[i] = 0.0
