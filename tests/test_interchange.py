"""C target: inside a tile of a permutable band, the loop along which the most accesses are contiguous runs
innermost (so the compiler vectorises it); the result is legal and computes what the reference does."""

from __future__ import annotations

import islpy as isl
import numpy as np

import polyfuse as pf
from examples import kernels as K
from polyfuse.schedule.tiling.interchange import _along


def _innermost_coefficients(sched: pf.Schedule, stmt: str) -> list[int]:
    """Coefficients of ``stmt``'s iterators in the innermost schedule dimension that is a loop (trailing
    constant dimensions order the statements of a sequence)."""
    umap = sched.tree.get_map()
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    (m,) = [m for m in maps if m.get_tuple_name(isl.dim_type.in_) == stmt]
    pma = isl.PwMultiAff.from_map(m)
    for d in reversed(range(m.dim(isl.dim_type.out))):
        (_, aff), *_ = pma.get_pw_aff(d).get_pieces()
        coeffs = [int(aff.get_coefficient_val(isl.dim_type.in_, i).to_python()) for i in range(m.dim(isl.dim_type.in_))]
        if any(coeffs):
            return coeffs
    return []


def test_gemm_tiles_run_j_innermost():
    # explicit tile sizes: no register micro-tile (``test_microtile.py``), so the interchange pass decides
    sched = pf.schedule(K.gemm, target="c", params={"N": 256, "M": 256, "K": 256}, tile=(32, 32, 32))
    assert sched.kernels[0].tile_sizes  # tiled
    # S1: C[i, j] += alpha * A[i, k] * B[k, j]: j innermost (C and B contiguous), not the reduction k
    assert _innermost_coefficients(sched, "S1") == [0, 1, 0]


def test_access_classification():
    along_j = {acc.array: _along(acc.relation, 1) for acc in K.gemm.statement("S1").accesses}
    assert along_j == {"C": "contiguous", "A": "invariant", "B": "contiguous"}
    along_k = {acc.array: _along(acc.relation, 2) for acc in K.gemm.statement("S1").accesses}
    assert along_k == {"C": "invariant", "A": "contiguous", "B": "strided"}


def test_interchanged_gemm_matches_reference():
    sizes = {"N": 37, "M": 45, "K": 29}
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (37, 29)).astype(np.float32)
    b = rng.uniform(-1, 1, (29, 45)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (37, 45)).astype(np.float32)
    got, want = c0.copy(), c0.copy()
    pf.compile(K.gemm, target="c", params=sizes, tile=(8, 16, 4))(A=a, B=b, C=got, alpha=1.5, beta=0.5)
    pf.reference(K.gemm)(A=a, B=b, C=want, alpha=1.5, beta=0.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
