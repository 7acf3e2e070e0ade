"""The benchmark workloads (``benchmarks/workloads.py``: fused elementwise chains, softmax, layernorm,
matmul + bias + relu, the MLP, attention, 2mm/3mm, stencils) as CUDA in the simulator, at their small test
sizes, scheduled at those sizes and with symbolic sizes: race-free, in bounds and equal to numpy."""

from __future__ import annotations

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.workloads import WORKLOADS
from polyfuse.runtime import cuda_sim

pytestmark = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")


@pytest.mark.parametrize("sized", [True, False], ids=["sized", "symbolic"])
@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_workload_in_the_cuda_simulator_matches_numpy(w, sized: bool) -> None:
    prog = w.program()
    sizes = dict(w.test)
    values = w.inputs(prog, sizes)
    expected = w.expected(prog, values, sizes)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes if sized or not prog.params else None))
    args = {**sizes, **values}
    cuda_sim.load(code)(*(args[a.name] for a in code.signature))
    for name, e in expected.items():
        np.testing.assert_allclose(values[name], e, rtol=w.rtol, atol=1e-4, err_msg=f"{w.name}: {name}")


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_row_workloads_with_cooperative_rows_match_numpy(name: str) -> None:
    """Rows long enough (70 >= ``rows.MIN_ROW``) for a block per row, with block reductions."""
    w = next(w for w in WORKLOADS if w.name == name)
    prog = w.program()
    sizes = {"R": 5, "D": 70}
    values = w.inputs(prog, sizes)
    expected = w.expected(prog, values, sizes)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes))
    assert "pf_block_" in code.text
    args = {**sizes, **values}
    cuda_sim.load(code)(*(args[a.name] for a in code.signature))
    for out, e in expected.items():
        np.testing.assert_allclose(values[out], e, rtol=w.rtol, atol=1e-4, err_msg=f"{name}: {out}")
