"""The PolyBench/C 4.2.1-style kernel suite: 30 C SCoPs (``*.c`` here), Python-DSL twins of some of them
(:mod:`tests.kernels.dsl_kernels`) and independent numpy formulations (:mod:`tests.kernels.numpy_refs`).

:data:`KERNELS` describes each kernel: its file and function, small sizes for tests (the ``defines`` passed
to ``pf.from_c``), and :func:`inputs` makes random, well-conditioned data for it at those sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Kernel:
    """One kernel of the suite. ``sizes`` are the small test sizes (macro name -> value); ``steps`` names
    the time-step macro whose value the numpy formulation takes as ``steps.lower()`` (empty: none); ``assume``
    is the C condition on the sizes that the kernel needs to be valid (``pf.from_c(..., assume=...)``), for
    kernels that touch an element such as ``y[0]`` unconditionally, which no array of size 0 holds."""

    name: str
    category: str
    sizes: Mapping[str, int] = field(default_factory=dict)
    steps: str = ""
    assume: str | None = None

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.c"

    @property
    def function(self) -> str:
        return "kernel_" + self.name.replace("-", "_")

    @property
    def defines(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.sizes.items()}


def _k(name: str, category: str, steps: str = "", assume: str | None = None, **sizes: int) -> Kernel:
    return Kernel(name, category, MappingProxyType(sizes), steps, assume)


KERNELS: tuple[Kernel, ...] = (
    _k("correlation", "datamining", assume="m >= 1", M=7, N=9),
    _k("covariance", "datamining", M=7, N=9),
    _k("gemm", "blas", NI=6, NJ=7, NK=8),
    _k("gemver", "blas", N=8),
    _k("gesummv", "blas", N=8),
    _k("symm", "blas", M=6, N=7),
    _k("syr2k", "blas", M=6, N=7),
    _k("syrk", "blas", M=6, N=7),
    _k("trmm", "blas", M=6, N=7),
    _k("2mm", "kernels", NI=5, NJ=6, NK=7, NL=8),
    _k("3mm", "kernels", NI=5, NJ=6, NK=7, NL=8, NM=9),
    _k("atax", "kernels", M=7, N=8),
    _k("bicg", "kernels", M=7, N=8),
    _k("doitgen", "kernels", NQ=4, NR=5, NP=6),
    _k("mvt", "kernels", N=8),
    _k("cholesky", "solvers", N=8),
    _k("durbin", "solvers", assume="n >= 1", N=8),
    _k("gramschmidt", "solvers", M=9, N=6),
    _k("lu", "solvers", N=8),
    _k("ludcmp", "solvers", N=8),
    _k("trisolv", "solvers", N=8),
    _k("deriche", "medley", W=8, H=6),
    _k("floyd-warshall", "medley", N=8),
    _k("nussinov", "medley", N=9),
    _k("adi", "stencils", "TSTEPS", TSTEPS=3, N=8),
    _k("fdtd-2d", "stencils", "TMAX", "nx >= 1", TMAX=3, NX=6, NY=7),
    _k("heat-3d", "stencils", "TSTEPS", TSTEPS=2, N=6),
    _k("jacobi-1d", "stencils", "TSTEPS", TSTEPS=3, N=10),
    _k("jacobi-2d", "stencils", "TSTEPS", TSTEPS=3, N=8),
    _k("seidel-2d", "stencils", "TSTEPS", TSTEPS=3, N=8),
)
BY_NAME = {k.name: k for k in KERNELS}


def _diag_dominant(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, (n, n)) + n * np.eye(n)


def _spd(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.uniform(-1.0, 1.0, (n, n))
    return x @ x.T + n * np.eye(n)


def inputs(kernel: Kernel, seed: int = 0) -> dict[str, Any]:
    """Random arguments for ``kernel`` at its test sizes, by C name: arrays (float64 unless the kernel's
    DATA_TYPE says otherwise) and scalars. Outputs that the kernel overwrites are filled with noise too, so
    a missed write shows. Matrices are well conditioned where the algorithm divides by them."""
    rng = np.random.default_rng(seed)
    s = kernel.sizes

    def u(*shape: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, shape)

    name = kernel.name
    if name in ("correlation", "covariance"):
        out = {"float_n": float(s["N"]), "data": u(s["N"], s["M"]) * 10.0, "mean": u(s["M"])}
        if name == "correlation":
            out["data"][:, 0] = 3.0  # a constant column: stddev 0 takes the <= eps branch
            out.update(corr=u(s["M"], s["M"]), stddev=u(s["M"]))
        else:
            out["cov"] = u(s["M"], s["M"])
        return out
    if name == "gemm":
        return {"alpha": 1.5, "beta": 1.2, "C": u(s["NI"], s["NJ"]), "A": u(s["NI"], s["NK"]), "B": u(s["NK"], s["NJ"])}
    if name == "gemver":
        n = s["N"]
        return {"alpha": 1.5, "beta": 1.2, "A": u(n, n), **{v: u(n) for v in ("u1", "v1", "u2", "v2", "w", "x", "y", "z")}}
    if name == "gesummv":
        n = s["N"]
        return {"alpha": 1.5, "beta": 1.2, "A": u(n, n), "B": u(n, n), "tmp": u(n), "x": u(n), "y": u(n)}
    if name == "symm":
        return {"alpha": 1.5, "beta": 1.2, "C": u(s["M"], s["N"]), "A": u(s["M"], s["M"]), "B": u(s["M"], s["N"])}
    if name == "syr2k":
        return {"alpha": 1.5, "beta": 1.2, "C": u(s["N"], s["N"]), "A": u(s["N"], s["M"]), "B": u(s["N"], s["M"])}
    if name == "syrk":
        return {"alpha": 1.5, "beta": 1.2, "C": u(s["N"], s["N"]), "A": u(s["N"], s["M"])}
    if name == "trmm":
        return {"alpha": 1.5, "A": u(s["M"], s["M"]), "B": u(s["M"], s["N"])}
    if name == "2mm":
        return {"alpha": 1.5, "beta": 1.2, "tmp": u(s["NI"], s["NJ"]), "A": u(s["NI"], s["NK"]), "B": u(s["NK"], s["NJ"]),
                "C": u(s["NJ"], s["NL"]), "D": u(s["NI"], s["NL"])}
    if name == "3mm":
        return {"E": u(s["NI"], s["NJ"]), "A": u(s["NI"], s["NK"]), "B": u(s["NK"], s["NJ"]), "F": u(s["NJ"], s["NL"]),
                "C": u(s["NJ"], s["NM"]), "D": u(s["NM"], s["NL"]), "G": u(s["NI"], s["NL"])}
    if name == "atax":
        return {"A": u(s["M"], s["N"]), "x": u(s["N"]), "y": u(s["N"]), "tmp": u(s["M"])}
    if name == "bicg":
        return {"A": u(s["N"], s["M"]), "s": u(s["M"]), "q": u(s["N"]), "p": u(s["M"]), "r": u(s["N"])}
    if name == "doitgen":
        return {"A": u(s["NR"], s["NQ"], s["NP"]), "C4": u(s["NP"], s["NP"]), "sum": u(s["NP"])}
    if name == "mvt":
        n = s["N"]
        return {"x1": u(n), "x2": u(n), "y_1": u(n), "y_2": u(n), "A": u(n, n)}
    if name == "cholesky":
        return {"A": _spd(rng, s["N"])}
    if name == "durbin":
        n = s["N"]
        # autocorrelations of an AR(1) process, lightly perturbed: a positive definite Toeplitz matrix
        r = 0.5 ** np.arange(1, n + 1) * (1.0 + 0.1 * u(n))
        return {"r": r, "y": u(n)}
    if name == "gramschmidt":
        return {"A": u(s["M"], s["N"]) + np.eye(s["M"], s["N"]), "R": np.zeros((s["N"], s["N"])), "Q": u(s["M"], s["N"])}
    if name in ("lu", "ludcmp"):
        out = {"A": _diag_dominant(rng, s["N"])}
        if name == "ludcmp":
            out.update(b=u(s["N"]), x=u(s["N"]), y=u(s["N"]))
        return out
    if name == "trisolv":
        return {"L": _diag_dominant(rng, s["N"]), "x": u(s["N"]), "b": u(s["N"])}
    if name == "deriche":
        shape = (s["W"], s["H"])
        return {"alpha": np.float32(0.25), **{a: rng.uniform(0.0, 1.0, shape).astype(np.float32) for a in ("imgIn", "imgOut", "y1", "y2")}}
    if name == "floyd-warshall":
        n = s["N"]
        path = rng.integers(1, 20, (n, n)).astype(np.int32)
        np.fill_diagonal(path, 0)
        return {"path": path}
    if name == "nussinov":
        n = s["N"]
        return {"seq": rng.integers(0, 4, n).astype(np.int32), "table": np.zeros((n, n), np.int32)}
    if name == "adi":
        n = s["N"]
        return {"u": rng.uniform(0.0, 1.0, (n, n)), "v": u(n, n), "p": u(n, n), "q": u(n, n)}
    if name == "fdtd-2d":
        shape = (s["NX"], s["NY"])
        return {"ex": u(*shape), "ey": u(*shape), "hz": u(*shape), "_fict_": u(s["TMAX"])}
    if name == "heat-3d":
        n = s["N"]
        return {"A": u(n, n, n), "B": u(n, n, n)}
    if name == "jacobi-1d":
        return {"A": u(s["N"]), "B": u(s["N"])}
    if name == "jacobi-2d":
        return {"A": u(s["N"], s["N"]), "B": u(s["N"], s["N"])}
    if name == "seidel-2d":
        return {"A": u(s["N"], s["N"])}
    raise KeyError(name)


def tolerance(kernel: Kernel) -> dict[str, float]:
    """``np.testing.assert_allclose`` tolerances for comparing two formulations of ``kernel``."""
    if kernel.name == "deriche":  # single precision in C
        return {"rtol": 1e-4, "atol": 1e-4}
    if kernel.name in ("floyd-warshall", "nussinov"):
        return {"rtol": 0, "atol": 0}
    return {"rtol": 1e-9, "atol": 1e-9}
