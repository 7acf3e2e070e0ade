"""Index-set splitting around a pivot (``schedule/pivots.py``): floyd-warshall's row and column ``k`` apart.

Split at ``i`` against ``k`` and ``j`` against ``k``, the pieces of ``path[i][j] = min(path[i][j],
path[i][k] + path[k][j])`` other than the pivot's own row and column carry no dependence inside ``k``:
their rows run in parallel and each row is a vector loop. The split keeps every dependence of the source,
so the results equal gcc's build of it bit for bit, also where negative cycles make row ``k`` change
during iteration ``k`` (the case a split that assumed ``path[k][k] >= 0`` would get wrong).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from tests.c_oracle import check_against_gcc
from tests.kernels import BY_NAME

pivots = importlib.import_module("polyfuse.schedule.pivots")


def _program(name: str) -> pf.Program:
    k = BY_NAME[name]
    return pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)


def test_floyd_warshall_is_split_into_nine_pieces_and_its_rows_run_in_parallel() -> None:
    prog = _program("floyd-warshall")
    split, notes = pivots.split_pivots(prog)
    assert [s.name for s in split.statements] == [f"S0_{n}" for n in range(9)]
    assert notes and "j against k, i against k" in notes[0]
    union = split.statements[0].domain.to_str()
    assert "S0_0" in union
    sched = pf.schedule(prog, target="c", params={"n": 500})
    assert any(n.startswith("S0: split at") for n in sched.notes)
    parallel = [k for k in sched.kernels if not k.without_parallel_loop]
    assert len(parallel) >= 4  # the four quadrants around the pivot (and its row and column)
    text = pf.codegen(sched).text
    assert text.count("#pragma omp simd\n") >= 4 and "omp for" in text


def test_statements_without_a_pivot_are_left_alone() -> None:
    for name in ("lu", "cholesky", "seidel-2d", "nussinov", "gemm"):
        prog = _program(name)
        assert pivots.split_pivots(prog) == (prog, ())


@pytest.mark.parametrize("n, seed, cycles", [(1, 0, True), (2, 1, True), (7, 2, True), (37, 3, True), (130, 4, False),
                                            (131, 5, False)])
def test_split_floyd_warshall_equals_gccs_build(n: int, seed: int, cycles: bool) -> None:
    """With negative cycles (negative diagonal entries: row ``k`` changes in step ``k``) at sizes where the
    sums stay in range, and with negative edges but no negative cycle at larger sizes (there, negative
    cycles overflow ``int``, which C leaves undefined)."""
    k = dataclasses.replace(BY_NAME["floyd-warshall"], sizes=MappingProxyType({"N": n}))
    rng = np.random.default_rng(seed)
    if cycles:
        path = rng.integers(-5, 20, (n, n)).astype(np.int32)
    else:  # up the rows at most -5 an edge, back down at least 1000: every cycle is positive
        path = np.where(np.triu(np.ones((n, n), bool)), rng.integers(-5, 6, (n, n)), rng.integers(1000, 1100, (n, n)))
        np.fill_diagonal(path, 0)
        path = path.astype(np.int32)
    check_against_gcc(k.path, k.function, {"path": path, "n": n}, defines=k.defines, assume=k.assume, threads=2)


def test_split_floyd_warshall_on_the_cuda_simulator() -> None:
    prog = _program("floyd-warshall")
    rng = np.random.default_rng(9)
    path = rng.integers(-3, 20, (37, 37)).astype(np.int32)
    want = path.copy()
    pf.reference(prog)(path=want, n=37)
    got = path.copy()
    exe = pf.compile(prog, target="cuda-sim", params={"n": 37})
    assert any(n.startswith("S0: split at") for n in exe.schedule.notes)
    exe(path=got, n=37)
    np.testing.assert_array_equal(got, want)
