"""The benchmark harness (``benchmarks/``): interleaved rounds with a rotating order, paired ratios, the C
peer's signature binding, and ``python -m benchmarks run --quick`` on a few rows (every implementation
checked against the float64 reference before it is timed; JSON, markdown and plot written under ``--out``,
nothing in the source tree). Needs neither torch nor a quiet machine: no timing is asserted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks import harness, peers, versus
from benchmarks.suite import BY_NAME, CASES

ROOT = Path(__file__).resolve().parent.parent


def test_rounds_interleave_in_a_rotating_order() -> None:
    calls: list[str] = []
    impls = [harness.Impl(n, lambda n=n: calls.append(n)) for n in ("a", "b", "c")]
    timing = harness.interleaved(impls, rounds=4, inner={"a": 1, "b": 2, "c": 1})
    assert calls == ["a", "b", "b", "c", "b", "b", "c", "a", "c", "a", "b", "b", "a", "b", "b", "c"]
    assert timing.rounds == 4 and all(len(ts) == 4 for ts in timing.times.values())


def test_settle_and_reset_come_before_each_timed_sample() -> None:
    events: list[str] = []
    impl = harness.Impl("x", lambda: events.append("call"), reset=lambda: events.append("reset"))
    harness.interleaved([impl], rounds=2, inner={"x": 3}, settle_s=1e-4)
    assert events == ["reset", "call", "reset", "call", "call", "call"] * 2


def test_paired_ratios_are_formed_within_rounds() -> None:
    # the peer's times drift by 10x across rounds; the paired ratio does not
    timing = harness.Timing(order=["polyfuse", "peer"], times={"polyfuse": [1.0, 10.0, 2.0, 20.0], "peer": [2.0, 20.0, 4.0, 40.0]})
    q = harness.paired_ratios(timing)["peer"]
    assert q["median"] == q["min"] == q["max"] == 0.5 and q["n"] == 4
    q = harness.quantiles([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (q["median"], q["q1"], q["q3"], q["min"], q["max"]) == (3.0, 2.0, 4.0, 1.0, 100.0)


def test_rounds_fit_the_budget_within_bounds() -> None:
    once, inner = {"a": 0.01, "b": 0.03}, {"a": 1, "b": 1}
    assert harness.choose_rounds(inner, once, budget_s=1.0, min_rounds=3, max_rounds=100) == 25
    assert harness.choose_rounds(inner, once, budget_s=0.01, min_rounds=3, max_rounds=100) == 3
    assert harness.choose_rounds(inner, once, budget_s=100.0, min_rounds=3, max_rounds=7) == 7


def test_benchmark_environment_drops_the_openblas_overrides() -> None:
    env = harness.prepare_environment(2, {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def test_acceptance_criteria_are_judged_per_row() -> None:
    rows = [{"workload": "matmul_1024", "ratios": {"numpy": {"median": 1.2}}},
            {"workload": "matmul_2048", "ratios": {"numpy": {"median": 1.3}}},
            {"workload": "add_exp", "ratios": {"torch.compile": {"median": 0.4}}, "pct_of_copy_bw": {"polyfuse": 75.0}},
            {"workload": "bias_gelu_residual", "ratios": {"torch.compile": {"median": 1.0}}}]
    verdicts = {a["criterion"].split(":")[0]: a for a in versus.acceptance({"rows": rows})}
    gemm = verdicts["gemm f32 1024³ and 2048³"]
    assert gemm["ok"] == {"matmul_1024": True, "matmul_2048": False} and gemm["holds"] is False
    chains = verdicts["fused elementwise chains keep their lead over torch.compile"]
    assert chains["ok"] == {"add_exp": True, "bias_gelu_residual": False} and chains["holds"] is False  # a tie is no lead
    memory = verdicts["memory-bound rows"]
    assert memory["ok"]["add_exp"] is True and memory["holds"] is None  # the other rows were not measured
    assert verdicts["MLP, attention and conv2d 3×3 + relu"]["holds"] is None


def test_polybench_c_signature_and_call(tmp_path: Path) -> None:
    source = (ROOT / "tests" / "kernels" / "gemm.c").read_text()
    assert peers.c_signature(source, "kernel_gemm") == [
        ("int", "ni"), ("int", "nj"), ("int", "nk"), ("scalar", "alpha"), ("scalar", "beta"),
        ("array", "C"), ("array", "A"), ("array", "B")]
    rng = np.random.default_rng(1)
    args = {"alpha": 1.5, "beta": 1.2, "C": rng.random((3, 4)), "A": rng.random((3, 5)), "B": rng.random((5, 4))}
    want = 1.2 * args["C"] + 1.5 * args["A"] @ args["B"]
    call = peers.c_function(ROOT / "tests" / "kernels" / "gemm.c", "kernel_gemm", {}, args, {"ni": 3, "nj": 4, "nk": 5}, tmp_path)
    call()
    np.testing.assert_allclose(args["C"], want, rtol=1e-12)


def test_quick_run_checks_times_and_writes_outside_the_tree(tmp_path: Path) -> None:
    only = ["matmul_1024", "softmax_4096x1024", "gemm"]
    results = versus.run(quick=True, out=tmp_path, only=only, peer_names=("numpy", "gcc"))
    rows = {r["workload"]: r for r in results["rows"]}
    assert list(rows) == only
    for name, r in rows.items():
        assert r["skipped"] == {}, (name, r["skipped"])  # polyfuse and every peer agree with the reference
        assert r["rounds"] >= 3 and all(len(v) == r["rounds"] for v in r["raw_ms"].values())
        assert set(r["ratios"]) == ({"numpy", "gcc"} if BY_NAME[name].kernel else {"numpy"})
        assert all(q["min"] <= q["q1"] <= q["median"] <= q["q3"] <= q["max"] for q in r["ratios"].values())
    assert "pct_of_copy_bw" in rows["softmax_4096x1024"] and "GFLOPs" in rows["matmul_1024"]
    assert results["copy"]["GBps"]["median"] > 0
    saved = json.loads((tmp_path / "bench_quick.json").read_text())
    assert [r["workload"] for r in saved["rows"]] == only
    table = (tmp_path / "bench_quick.md").read_text()
    assert table.startswith("# polyfuse against numpy") and all(f"| {n} |" in table for n in only)
    assert (tmp_path / "bench_quick.png").exists() == results["plot"]
    tracked = subprocess.run(["git", "status", "--porcelain", "--", "benchmarks"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "bench_quick" not in tracked


def test_command_line_runs_the_quick_suite(tmp_path: Path) -> None:
    from benchmarks.__main__ import main

    argv = ["run", "--quick", "--keep-env", "--only", "rmsnorm", "--peers", "numpy", "--rounds", "4", "--out", str(tmp_path)]
    assert main(argv) == 0
    row = json.loads((tmp_path / "bench_quick.json").read_text())["rows"][0]
    assert row["workload"] == "rmsnorm" and row["rounds"] == 4 and set(row["ratios"]) == {"numpy"}
    with pytest.raises(SystemExit):
        main(["run", "--quick", "--keep-env", "--only", "no_such_row", "--out", str(tmp_path)])


def test_a_missing_peer_is_skipped_and_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "available", lambda peer: peer not in ("torch", "torch.compile"))
    results = versus.run(quick=True, out=tmp_path, only=["add_exp"], peer_names=("numpy", "torch", "torch.compile"))
    row = results["rows"][0]
    assert row["skipped"] == {"torch": "not installed", "torch.compile": "not installed"} and set(row["ratios"]) == {"numpy"}
    table = (tmp_path / "bench_quick.md").read_text()
    assert "| n/i | n/i |" in table and "Not installed, skipped: torch, torch.compile" in table


@pytest.mark.slow
def test_whole_quick_suite() -> None:
    """Every row at quick sizes with every installed peer (make bench-quick, as a test)."""
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        results = versus.run(quick=True, out=out)
    assert [r["workload"] for r in results["rows"]] == [c.name for c in CASES]
    failed = {r["workload"]: r["skipped"] for r in results["rows"] if any(v != "not installed" for v in r["skipped"].values())}
    assert not failed
