"""Regression: the C printer put ``#pragma omp parallel for`` on a sequential loop.

When the marked parallel loop has a single iteration at the given sizes (here the row loop of a 1-row
prefix-sum, tiled by 32), isl elides it, and the first ``for`` below the ``parallel`` mark is the
sequential inner loop. The pragma must then be omitted, not moved onto that loop (a data race that gave
wrong results for attention at 2 heads).
"""

import numpy as np

import polyfuse as pf

R, C = pf.params("R C")


@pf.program(assume="C >= 2")
def row_prefix(A: pf.f64[R, C]):
    for i in range(R):
        for j in range(1, C):
            A[i, j] += A[i, j - 1]


def test_no_pragma_on_a_sequential_loop_when_the_parallel_loop_is_elided():
    exe = pf.compile(row_prefix, target="c", params={"R": 1, "C": 4000})
    # The only parallel loop (i) has one iteration at R=1, so isl elides it: no loop may carry the pragma.
    assert "#pragma omp parallel for" not in exe.code.text, exe.code.text
    a = np.random.default_rng(0).random((1, 4000))
    want = a.copy()
    pf.reference(row_prefix)(A=want)
    exe(A=a)
    np.testing.assert_allclose(a, want, rtol=1e-12)
