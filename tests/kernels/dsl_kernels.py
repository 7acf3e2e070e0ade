"""Python-DSL twins of some of the C kernels in this folder.

Each program has the statements of its C file in the same order (so they get the same names ``S0``,
``S1``, ...), the same array names, and the C frontend's size convention: the sizes are the C function's
``int`` parameters (``_PB_N`` is ``n``), so here they are ``pf.params`` of the same lower-case names. Their
dependences must therefore equal the C kernels' exactly (``tests/test_kernels.py`` checks it).

C's ``x /= y`` is written ``x = x / y`` here (the DSL has no ``/=``); both are a read and a write of ``x``.
"""

import polyfuse as pf

n, m, ni, nj, nk, nl, nq, nr, np_, tsteps = pf.params("n m ni nj nk nl nq nr np tsteps")


@pf.program
def gemm(alpha: pf.f64, beta: pf.f64, C: pf.f64[ni, nj], A: pf.f64[ni, nk], B: pf.f64[nk, nj]):
    for i in range(ni):
        for j in range(nj):
            C[i, j] *= beta
        for k in range(nk):
            for j in range(nj):
                C[i, j] += alpha * A[i, k] * B[k, j]


@pf.program
def mm2(alpha: pf.f64, beta: pf.f64, tmp: pf.f64[ni, nj], A: pf.f64[ni, nk], B: pf.f64[nk, nj],
        C: pf.f64[nj, nl], D: pf.f64[ni, nl]):
    for i in range(ni):
        for j in range(nj):
            tmp[i, j] = 0.0
            for k in range(nk):
                tmp[i, j] += alpha * A[i, k] * B[k, j]
    for i in range(ni):
        for j in range(nl):
            D[i, j] *= beta
            for k in range(nj):
                D[i, j] += tmp[i, k] * C[k, j]


@pf.program
def atax(A: pf.f64[m, n], x: pf.f64[n], y: pf.f64[n], tmp: pf.f64[m]):
    for i in range(n):
        y[i] = 0.0
    for i in range(m):
        tmp[i] = 0.0
        for j in range(n):
            tmp[i] = tmp[i] + A[i, j] * x[j]
        for j in range(n):
            y[j] = y[j] + A[i, j] * tmp[i]


@pf.program
def bicg(A: pf.f64[n, m], s: pf.f64[m], q: pf.f64[n], p: pf.f64[m], r: pf.f64[n]):
    for i in range(m):
        s[i] = 0.0
    for i in range(n):
        q[i] = 0.0
        for j in range(m):
            s[j] = s[j] + r[i] * A[i, j]
            q[i] = q[i] + A[i, j] * p[j]


@pf.program
def mvt(x1: pf.f64[n], x2: pf.f64[n], y_1: pf.f64[n], y_2: pf.f64[n], A: pf.f64[n, n]):
    for i in range(n):
        for j in range(n):
            x1[i] = x1[i] + A[i, j] * y_1[j]
    for i in range(n):
        for j in range(n):
            x2[i] = x2[i] + A[j, i] * y_2[j]


@pf.program
def gesummv(alpha: pf.f64, beta: pf.f64, A: pf.f64[n, n], B: pf.f64[n, n], tmp: pf.f64[n], x: pf.f64[n], y: pf.f64[n]):
    for i in range(n):
        tmp[i] = 0.0
        y[i] = 0.0
        for j in range(n):
            tmp[i] = A[i, j] * x[j] + tmp[i]
            y[i] = B[i, j] * x[j] + y[i]
        y[i] = alpha * tmp[i] + beta * y[i]


@pf.program
def syrk(alpha: pf.f64, beta: pf.f64, C: pf.f64[n, n], A: pf.f64[n, m]):
    for i in range(n):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(m):
            for j in range(i + 1):
                C[i, j] += alpha * A[i, k] * A[j, k]


@pf.program
def doitgen(A: pf.f64[nr, nq, np_], C4: pf.f64[np_, np_], sum: pf.f64[np_]):  # noqa: A002 - the C name
    for r in range(nr):
        for q in range(nq):
            for p in range(np_):
                sum[p] = 0.0
                for s in range(np_):
                    sum[p] += A[r, q, s] * C4[s, p]
            for p in range(np_):
                A[r, q, p] = sum[p]


@pf.program
def cholesky(A: pf.f64[n, n]):
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] = A[i, j] / A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = pf.sqrt(A[i, i])


@pf.program
def lu(A: pf.f64[n, n]):
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] = A[i, j] / A[j, j]
        for j in range(i, n):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]


@pf.program
def trisolv(L: pf.f64[n, n], x: pf.f64[n], b: pf.f64[n]):
    for i in range(n):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]


@pf.program
def floyd_warshall(path: pf.i32[n, n]):
    for k in range(n):
        for i in range(n):
            for j in range(n):
                path[i, j] = pf.where(path[i, j] < path[i, k] + path[k, j], path[i, j], path[i, k] + path[k, j])


@pf.program
def jacobi_1d(A: pf.f64[n], B: pf.f64[n]):
    for t in range(tsteps):
        for i in range(1, n - 1):
            B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
        for i in range(1, n - 1):
            A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])


@pf.program
def jacobi_2d(A: pf.f64[n, n], B: pf.f64[n, n]):
    for t in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, 1 + j] + A[1 + i, j] + A[i - 1, j])
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, 1 + j] + B[1 + i, j] + B[i - 1, j])


@pf.program
def seidel_2d(A: pf.f64[n, n]):
    for t in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0


DSL = {
    "gemm": gemm, "2mm": mm2, "atax": atax, "bicg": bicg, "mvt": mvt, "gesummv": gesummv, "syrk": syrk,
    "doitgen": doitgen, "cholesky": cholesky, "lu": lu, "trisolv": trisolv, "floyd-warshall": floyd_warshall,
    "jacobi-1d": jacobi_1d, "jacobi-2d": jacobi_2d, "seidel-2d": seidel_2d,
}
"""Kernel name (as the C file is named) -> its DSL program."""
