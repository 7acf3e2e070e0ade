"""``python -m benchmarks run --quick`` for the DNN workloads on the C backend: results checked against numpy
inside the benchmark, JSON and markdown written (the CI smoke test of the benchmark suite)."""

from __future__ import annotations

import json

from benchmarks import dnn
from benchmarks.workloads import WORKLOADS


def test_dnn_quick_runs_and_writes_results() -> None:
    results = dnn.run(quick=True)
    assert [r["workload"] for r in results["rows"]] == [w.name for w in WORKLOADS]
    timed = [r for r in results["rows"] if "error" not in r]
    assert all(r["polyfuse_ms"] > 0 and r["numpy_ms"] > 0 for r in timed)
    # attention can hit the C printer's omp-pragma bug (see tests/test_ops.py); every other result must be right
    assert [r["workload"] for r in results["rows"] if "error" in r] in ([], ["attention"])
    saved = json.loads((dnn.RESULTS / "dnn_c_quick.json").read_text())
    assert saved["quick"] and len(saved["rows"]) == len(WORKLOADS)
    assert (dnn.RESULTS / "dnn_c_quick.md").read_text().startswith("# polyfuse DNN workloads")
