"""A corpus of affine programs in the polyfuse DSL: linear algebra, stencils, and the shapes of loop nest
that stress a polyhedral compiler (triangular bounds, guards, min/max bounds, modulo subscripts).

Every test suite draws its programs from here, and the CLI can show any of them:
``polyfuse deps examples/kernels.py::jacobi_2d``.
"""

import polyfuse as pf

N, M, K, T = pf.params("N M K T")


@pf.program
def add_exp(A: pf.f32[N, M], C: pf.f32[N, M]):
    """The producer/consumer pair: B = A + 1; C = exp(B)."""
    B = pf.empty((N, M), pf.f32)
    for i in range(N):
        for j in range(M):
            B[i, j] = A[i, j] + 1.0
    for i in range(N):
        for j in range(M):
            C[i, j] = pf.exp(B[i, j])


@pf.program
def gemm(A: pf.f32[N, K], B: pf.f32[K, M], C: pf.f32[N, M], alpha: pf.f32, beta: pf.f32):
    """C = alpha * A @ B + beta * C, accumulated in place."""
    for i in range(N):
        for j in range(M):
            C[i, j] *= beta
            for k in range(K):
                C[i, j] += alpha * A[i, k] * B[k, j]


@pf.program
def gemm_acc(A: pf.f32[N, K], B: pf.f32[K, M], C: pf.f32[N, M]):
    """C = A @ B with a local scalar accumulator (a reduction into a 0-d temporary)."""
    for i in range(N):
        for j in range(M):
            acc = 0.0
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc


@pf.program
def two_mm(A: pf.f64[N, K], B: pf.f64[K, M], C: pf.f64[M, N], D: pf.f64[N, N], alpha: pf.f64, beta: pf.f64):
    """D = alpha * A @ B @ C + beta * D, through a temporary."""
    tmp = pf.empty((N, M), pf.f64)
    for i in range(N):
        for j in range(M):
            tmp[i, j] = 0.0
            for k in range(K):
                tmp[i, j] += alpha * A[i, k] * B[k, j]
    for i in range(N):
        for j in range(N):
            D[i, j] *= beta
            for k in range(M):
                D[i, j] += tmp[i, k] * C[k, j]


@pf.program
def atax(A: pf.f64[M, N], x: pf.f64[N], y: pf.f64[N]):
    """y = A^T (A x)."""
    tmp = pf.empty((M,), pf.f64)
    for i in range(N):
        y[i] = 0.0
    for i in range(M):
        tmp[i] = 0.0
        for j in range(N):
            tmp[i] += A[i, j] * x[j]
        for j in range(N):
            y[j] += A[i, j] * tmp[i]


@pf.program
def bicg(A: pf.f64[N, M], s: pf.f64[M], q: pf.f64[N], p: pf.f64[M], r: pf.f64[N]):
    """s = A^T r and q = A p in one sweep over A."""
    for i in range(M):
        s[i] = 0.0
    for i in range(N):
        q[i] = 0.0
        for j in range(M):
            s[j] += r[i] * A[i, j]
            q[i] += A[i, j] * p[j]


@pf.program(assume="N >= 3")
def jacobi_1d(A: pf.f64[N], B: pf.f64[N]):
    """T sweeps of a 3-point average, ping-ponging between A and B."""
    for t in range(T):
        for i in range(1, N - 1):
            B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
        for i in range(1, N - 1):
            A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])


@pf.program(assume="N >= 3")
def jacobi_2d(A: pf.f32[N, N], B: pf.f32[N, N]):
    """T sweeps of a 5-point average, ping-ponging between A and B."""
    for t in range(T):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])


@pf.program(assume="N >= 3")
def seidel_2d(A: pf.f64[N, N]):
    """T in-place Gauss-Seidel sweeps of a 9-point average."""
    for t in range(T):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1] + A[i, j - 1] + A[i, j]
                           + A[i, j + 1] + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0


@pf.program
def lu(A: pf.f64[N, N]):
    """In-place LU decomposition without pivoting (Doolittle, PolyBench's loop order)."""
    for i in range(N):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] = A[i, j] / A[j, j]
        for j in range(i, N):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]


@pf.program
def cholesky(A: pf.f64[N, N]):
    """In-place Cholesky factorisation of the lower triangle."""
    for i in range(N):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] = A[i, j] / A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = pf.sqrt(A[i, i])


@pf.program
def floyd_warshall(path: pf.f64[N, N]):
    """All-pairs shortest paths, in place."""
    for k in range(N):
        for i in range(N):
            for j in range(N):
                path[i, j] = pf.min(path[i, j], path[i, k] + path[k, j])


@pf.program
def triangular(L: pf.f64[N, N], x: pf.f64[N], y: pf.f64[N]):
    """y = L x for the lower triangle of L: a triangular loop nest."""
    for i in range(N):
        y[i] = 0.0
        for j in range(i + 1):
            y[i] += L[i, j] * x[j]


@pf.program(assume="N >= 1")
def stencil_if(A: pf.f32[N], B: pf.f32[N]):
    """A 3-point stencil whose boundary points are copied, selected by an affine if."""
    for i in range(N):
        if i == 0 or i == N - 1:
            B[i] = A[i]
        else:
            B[i] = 0.25 * A[i - 1] + 0.5 * A[i] + 0.25 * A[i + 1]


@pf.program
def row_sum(A: pf.f32[N, M], s: pf.f32[N]):
    """Row sums through a local scalar accumulator."""
    for i in range(N):
        acc = 0.0
        for j in range(M):
            acc += A[i, j]
        s[i] = acc


@pf.program(assume="N >= 3")
def modulo(A: pf.f32[N], B: pf.f32[N], C: pf.f32[2 * N]):
    """Subscripts with % and // by constants: a circular shift and a gather of halves."""
    for i in range(N):
        B[i] = A[i - i % 2] + A[4 * (i // 4)] + A[(i + 2) % 3]
    for i in range(2 * N):
        C[i] = A[i // 2]


@pf.program(assume="N >= 4")
def minmax(A: pf.f64[N], B: pf.f64[N]):
    """Bounds with min and max: a banded window and a clipped prefix."""
    for i in range(N):
        B[i] = 0.0
        for j in range(max(0, i - 2), min(N, i + 3)):
            B[i] += A[j]
    for i in range(min(N, 3), max(N - 1, 3)):
        B[i] *= 2.0


@pf.program
def time_axpy(x: pf.f64[N], y: pf.f64[N], a: pf.f64):
    """T repetitions of y += a * x: a time loop with no cross-iteration flow other than y."""
    for t in range(T):
        for i in range(N):
            y[i] += a * x[i]


ALL = [add_exp, gemm, gemm_acc, two_mm, atax, bicg, jacobi_1d, jacobi_2d, seidel_2d, lu, cholesky,
       floyd_warshall, triangular, stencil_if, row_sum, modulo, minmax, time_axpy]
