"""Found by the differential fuzzer (tests/fuzz): Error: call to isl_schedule_constraints_compute_schedule
failed: unable to carry dependences (pf.schedule raised a raw isl.Error under every isl policy).

Root cause: the scheduler handed isl the program's context (N >= 2) along with a quasi-affine anti
dependence (S0[i] -> S0[i'] with i' - i = 1 mod 3, from the `% 3` subscripts); with the context isl's
scheduler cannot carry it, without it isl schedules i -> [i]. Fixed in schedule/fusion/scheduler.py: isl_tree
retries without the context (the dependences already hold its constraints), and any remaining scheduler
failure falls back to a lesser policy (smart/max -> min -> source order) with a PolyfuseWarning and a note
instead of leaking isl.Error. Shrunk by hand from the fuzzer's example to the one statement that matters.
"""

import polyfuse as pf

N, M, = pf.params('N M')


@pf.program(assume="N >= 2 and M >= 2")
def fuzzed(A0: pf.f32[N + 3, M + 3], A2: pf.f32[N + 3, N + 3]):
    for i in range(N):
        A2[N - 1 - i, i % 3] = A2[i % 3, i + 1]
        A0[i, 0] = A2[i, 1]

SIZES = {'N': 6, 'M': 5}
SEED = 171


def test_fuzz_28d7dc259a():
    from tests.fuzz.harness import check_program

    check_program(fuzzed, SIZES, SEED)
