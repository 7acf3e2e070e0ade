"""Independent numpy formulations of the PolyBench/C 4.2.1 kernels in ``tests/kernels/*.c``.

Each function takes the kernel's inputs by their C names (arrays as numpy arrays, which it does not modify,
scalars as numbers, and the time-step count where the kernel has one) and returns a dict of the arrays the
kernel writes, with their values after the kernel. Formulations are vectorised where the algorithm allows
(matrix products, library factorisations and solves, whole-array stencil sweeps) and plain float64 Python
loops where it is inherently sequential (Gauss-Seidel, dynamic programming, recursive filters along their
recursion axis). They are written from the mathematics, not transcribed from the C loops, so that the
reference interpreter is checked against a second opinion.
"""

from __future__ import annotations

import numpy as np

Arrays = dict[str, np.ndarray]


# ---------------------------------------------------------------------------------------------------
# datamining


def correlation(float_n: float, data: np.ndarray, **_: object) -> Arrays:
    mean = data.sum(axis=0) / float_n
    centred = data - mean
    stddev = np.sqrt((centred**2).sum(axis=0) / float_n)
    stddev = np.where(stddev <= 0.1, 1.0, stddev)
    reduced = centred / (np.sqrt(float_n) * stddev)
    corr = reduced.T @ reduced
    np.fill_diagonal(corr, 1.0)
    return {"data": reduced, "corr": corr, "mean": mean, "stddev": stddev}


def covariance(float_n: float, data: np.ndarray, **_: object) -> Arrays:
    mean = data.sum(axis=0) / float_n
    centred = data - mean
    return {"data": centred, "cov": centred.T @ centred / (float_n - 1.0), "mean": mean}


# ---------------------------------------------------------------------------------------------------
# linear algebra: BLAS-like


def gemm(alpha: float, beta: float, C: np.ndarray, A: np.ndarray, B: np.ndarray, **_: object) -> Arrays:
    return {"C": beta * C + alpha * (A @ B)}


def gemver(alpha: float, beta: float, A: np.ndarray, u1: np.ndarray, v1: np.ndarray, u2: np.ndarray,
           v2: np.ndarray, w: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray, **_: object) -> Arrays:
    A2 = A + np.outer(u1, v1) + np.outer(u2, v2)
    x2 = x + beta * (A2.T @ y) + z
    return {"A": A2, "x": x2, "w": w + alpha * (A2 @ x2)}


def gesummv(alpha: float, beta: float, A: np.ndarray, B: np.ndarray, x: np.ndarray, **_: object) -> Arrays:
    tmp = A @ x
    return {"tmp": tmp, "y": alpha * tmp + beta * (B @ x)}


def symm(alpha: float, beta: float, C: np.ndarray, A: np.ndarray, B: np.ndarray, **_: object) -> Arrays:
    """A is symmetric and only its lower triangle (with the diagonal) is read."""
    lower = np.tril(A)
    sym = lower + np.tril(A, -1).T
    return {"C": beta * C + alpha * (sym @ B)}


def syr2k(alpha: float, beta: float, C: np.ndarray, A: np.ndarray, B: np.ndarray, **_: object) -> Arrays:
    full = beta * C + alpha * (A @ B.T + B @ A.T)
    return {"C": np.where(np.tri(C.shape[0], dtype=bool), full, C)}


def syrk(alpha: float, beta: float, C: np.ndarray, A: np.ndarray, **_: object) -> Arrays:
    full = beta * C + alpha * (A @ A.T)
    return {"C": np.where(np.tri(C.shape[0], dtype=bool), full, C)}


def trmm(alpha: float, A: np.ndarray, B: np.ndarray, **_: object) -> Arrays:
    """B := alpha * U B with U = (unit lower triangle of A)^T."""
    unit_upper = np.tril(A, -1).T + np.eye(A.shape[0])
    return {"B": alpha * (unit_upper @ B)}


def mm2(alpha: float, beta: float, A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray, **_: object) -> Arrays:
    tmp = alpha * (A @ B)
    return {"tmp": tmp, "D": beta * D + tmp @ C}


def mm3(A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray, **_: object) -> Arrays:
    E = A @ B
    F = C @ D
    return {"E": E, "F": F, "G": E @ F}


def atax(A: np.ndarray, x: np.ndarray, **_: object) -> Arrays:
    tmp = A @ x
    return {"tmp": tmp, "y": A.T @ tmp}


def bicg(A: np.ndarray, p: np.ndarray, r: np.ndarray, **_: object) -> Arrays:
    return {"s": A.T @ r, "q": A @ p}


def doitgen(A: np.ndarray, C4: np.ndarray, **_: object) -> Arrays:
    out = np.einsum("rqs,sp->rqp", A, C4)
    return {"A": out, "sum": out[-1, -1].copy()}


def mvt(x1: np.ndarray, x2: np.ndarray, y_1: np.ndarray, y_2: np.ndarray, A: np.ndarray, **_: object) -> Arrays:
    return {"x1": x1 + A @ y_1, "x2": x2 + A.T @ y_2}


# ---------------------------------------------------------------------------------------------------
# linear algebra: solvers


def cholesky(A: np.ndarray, **_: object) -> Arrays:
    """The lower triangle becomes L (A = L L^T); the strict upper triangle is left as it was."""
    L = np.linalg.cholesky(A)
    return {"A": np.tril(L) + np.triu(A, 1)}


def _lu_in_place(A: np.ndarray) -> np.ndarray:
    """Right-looking Gaussian elimination without pivoting: unit-L strictly below the diagonal, U on and
    above it (the same factors as any other no-pivoting LU order)."""
    F = A.astype(np.float64).copy()
    n = F.shape[0]
    for k in range(n):
        F[k + 1:, k] /= F[k, k]
        F[k + 1:, k + 1:] -= np.outer(F[k + 1:, k], F[k, k + 1:])
    return F


def lu(A: np.ndarray, **_: object) -> Arrays:
    return {"A": _lu_in_place(A)}


def ludcmp(A: np.ndarray, b: np.ndarray, **_: object) -> Arrays:
    F = _lu_in_place(A)
    L = np.tril(F, -1) + np.eye(F.shape[0])
    U = np.triu(F)
    y = np.linalg.solve(L, b)
    return {"A": F, "y": y, "x": np.linalg.solve(U, y)}


def trisolv(L: np.ndarray, b: np.ndarray, **_: object) -> Arrays:
    return {"x": np.linalg.solve(np.tril(L), b)}


def durbin(r: np.ndarray, **_: object) -> Arrays:
    """The Yule-Walker system T y = -r, T the symmetric Toeplitz matrix with first column (1, r0, r1, ...),
    which the Levinson-Durbin recursion solves."""
    n = r.shape[0]
    col = np.concatenate(([1.0], r[: n - 1]))
    idx = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    return {"y": np.linalg.solve(col[idx], -r)}


def gramschmidt(A: np.ndarray, **_: object) -> Arrays:
    """A = Q R with Q's columns orthonormal and R upper triangular with a positive diagonal; the modified
    Gram-Schmidt loop leaves column j of A as R[j, j] * Q[:, j] and the strict lower triangle of R as it was."""
    Q, R = np.linalg.qr(A)
    signs = np.sign(np.diag(R))
    Q = Q * signs
    R = R * signs[:, None]
    return {"Q": Q, "R": R, "A": Q * np.diag(R)}


# ---------------------------------------------------------------------------------------------------
# medley


def deriche(alpha: float, imgIn: np.ndarray, **_: object) -> Arrays:
    """Deriche's recursive filter in float64: each pass is a second-order recursion along one axis,
    vectorised over the other."""
    alpha = float(alpha)
    img = imgIn.astype(np.float64)
    ea = np.exp(-alpha)
    k = (1.0 - ea) ** 2 / (1.0 + 2.0 * alpha * ea - np.exp(2.0 * alpha))
    a1, a2, a3, a4 = k, k * ea * (alpha - 1.0), k * ea * (alpha + 1.0), -k * np.exp(-2.0 * alpha)
    b1, b2 = 2.0 ** (-alpha), -np.exp(-2.0 * alpha)

    def causal(x: np.ndarray) -> np.ndarray:  # along axis 1
        y = np.zeros_like(x)
        for j in range(x.shape[1]):
            xm1 = x[:, j - 1] if j >= 1 else 0.0
            ym1 = y[:, j - 1] if j >= 1 else 0.0
            ym2 = y[:, j - 2] if j >= 2 else 0.0
            y[:, j] = a1 * x[:, j] + a2 * xm1 + b1 * ym1 + b2 * ym2
        return y

    def anticausal(x: np.ndarray) -> np.ndarray:  # along axis 1, from the end
        y = np.zeros_like(x)
        n = x.shape[1]
        for j in range(n - 1, -1, -1):
            xp1 = x[:, j + 1] if j + 1 < n else 0.0
            xp2 = x[:, j + 2] if j + 2 < n else 0.0
            yp1 = y[:, j + 1] if j + 1 < n else 0.0
            yp2 = y[:, j + 2] if j + 2 < n else 0.0
            y[:, j] = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
        return y

    horizontal = causal(img) + anticausal(img)
    y1 = causal(horizontal.T).T
    y2 = anticausal(horizontal.T).T
    return {"imgOut": y1 + y2, "y1": y1, "y2": y2}


def floyd_warshall(path: np.ndarray, **_: object) -> Arrays:
    dist = path.copy()
    for k in range(dist.shape[0]):
        dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
    return {"path": dist}


def nussinov(seq: np.ndarray, table: np.ndarray, **_: object) -> Arrays:
    """The Nussinov recurrence, filled by increasing interval length d = j - i (any order that fills the
    shorter intervals first gives the same table). ``table``'s initial values take part in every max."""
    t = table.astype(np.int64).copy()
    n = t.shape[0]
    s = seq.astype(np.int64)
    for d in range(1, n):
        for i in range(n - d):
            j = i + d
            pair = t[i + 1, j - 1] + (1 if s[i] + s[j] == 3 else 0) if d >= 2 else t[i + 1, j - 1]
            split = max((t[i, k] + t[k + 1, j] for k in range(i + 1, j)), default=None)
            best = max(t[i, j], t[i, j - 1], t[i + 1, j], pair)
            t[i, j] = best if split is None else max(best, split)
    return {"table": t.astype(table.dtype)}


# ---------------------------------------------------------------------------------------------------
# stencils


def adi(u: np.ndarray, v: np.ndarray, p: np.ndarray, q: np.ndarray, tsteps: int, **_: object) -> Arrays:
    """Peaceman-Rachford ADI: per step an implicit solve along columns (into v) then along rows (into u),
    each a Thomas-algorithm tridiagonal solve, vectorised over the independent lines."""
    u, v, p, q = (x.astype(np.float64).copy() for x in (u, v, p, q))
    n = u.shape[0]
    dx = dy = 1.0 / n
    dt = 1.0 / tsteps
    mul1 = 2.0 * dt / (dx * dx)
    mul2 = 1.0 * dt / (dy * dy)
    a, b = -mul1 / 2.0, 1.0 + mul1
    c = a
    d, e = -mul2 / 2.0, 1.0 + mul2
    f = d
    inner = slice(1, n - 1)
    for _t in range(tsteps):
        # columns: line i of v^T
        v[0, inner] = 1.0
        p[inner, 0] = 0.0
        q[inner, 0] = 1.0
        for j in range(1, n - 1):
            denom = a * p[inner, j - 1] + b
            p[inner, j] = -c / denom
            rhs = -d * u[j, 0:n - 2] + (1.0 + 2.0 * d) * u[j, 1:n - 1] - f * u[j, 2:n]
            q[inner, j] = (rhs - a * q[inner, j - 1]) / denom
        v[n - 1, inner] = 1.0
        for j in range(n - 2, 0, -1):
            v[j, inner] = p[inner, j] * v[j + 1, inner] + q[inner, j]
        # rows
        u[inner, 0] = 1.0
        p[inner, 0] = 0.0
        q[inner, 0] = 1.0
        for j in range(1, n - 1):
            denom = d * p[inner, j - 1] + e
            p[inner, j] = -f / denom
            rhs = -a * v[0:n - 2, j] + (1.0 + 2.0 * a) * v[1:n - 1, j] - c * v[2:n, j]
            q[inner, j] = (rhs - d * q[inner, j - 1]) / denom
        u[inner, n - 1] = 1.0
        for j in range(n - 2, 0, -1):
            u[inner, j] = p[inner, j] * u[inner, j + 1] + q[inner, j]
    return {"u": u, "v": v, "p": p, "q": q}


def fdtd_2d(ex: np.ndarray, ey: np.ndarray, hz: np.ndarray, _fict_: np.ndarray, tmax: int, **_: object) -> Arrays:
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    for t in range(tmax):
        ey[0, :] = _fict_[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return {"ex": ex, "ey": ey, "hz": hz}


def _heat_step(src: np.ndarray) -> np.ndarray:
    c = src[1:-1, 1:-1, 1:-1]
    lap = (src[2:, 1:-1, 1:-1] + src[:-2, 1:-1, 1:-1] + src[1:-1, 2:, 1:-1] + src[1:-1, :-2, 1:-1]
           + src[1:-1, 1:-1, 2:] + src[1:-1, 1:-1, :-2] - 6.0 * c)
    return c + 0.125 * lap


def heat_3d(A: np.ndarray, B: np.ndarray, tsteps: int, **_: object) -> Arrays:
    A, B = A.copy(), B.copy()
    for _t in range(tsteps):
        B[1:-1, 1:-1, 1:-1] = _heat_step(A)
        A[1:-1, 1:-1, 1:-1] = _heat_step(B)
    return {"A": A, "B": B}


def jacobi_1d(A: np.ndarray, B: np.ndarray, tsteps: int, **_: object) -> Arrays:
    A, B = A.copy(), B.copy()
    for _t in range(tsteps):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return {"A": A, "B": B}


def jacobi_2d(A: np.ndarray, B: np.ndarray, tsteps: int, **_: object) -> Arrays:
    A, B = A.copy(), B.copy()

    def step(x: np.ndarray) -> np.ndarray:
        return 0.2 * (x[1:-1, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:] + x[2:, 1:-1] + x[:-2, 1:-1])

    for _t in range(tsteps):
        B[1:-1, 1:-1] = step(A)
        A[1:-1, 1:-1] = step(B)
    return {"A": A, "B": B}


def seidel_2d(A: np.ndarray, tsteps: int, **_: object) -> Arrays:
    """Gauss-Seidel is inherently sequential: plain float64 loops, each point averaging its 3x3 window
    with the already-updated neighbours above and to the left."""
    A = A.astype(np.float64).copy()
    n = A.shape[0]
    for _t in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = A[i - 1:i + 2, j - 1:j + 2].sum() / 9.0
    return {"A": A}


REFS = {
    "correlation": correlation, "covariance": covariance, "gemm": gemm, "gemver": gemver, "gesummv": gesummv,
    "symm": symm, "syr2k": syr2k, "syrk": syrk, "trmm": trmm, "2mm": mm2, "3mm": mm3, "atax": atax,
    "bicg": bicg, "doitgen": doitgen, "mvt": mvt, "cholesky": cholesky, "durbin": durbin,
    "gramschmidt": gramschmidt, "lu": lu, "ludcmp": ludcmp, "trisolv": trisolv, "deriche": deriche,
    "floyd-warshall": floyd_warshall, "nussinov": nussinov, "adi": adi, "fdtd-2d": fdtd_2d,
    "heat-3d": heat_3d, "jacobi-1d": jacobi_1d, "jacobi-2d": jacobi_2d, "seidel-2d": seidel_2d,
}
"""Kernel name (as the C file is named) -> its numpy formulation."""
