"""The PolyBench comparison (``benchmarks/polybench.py``, ``python -m benchmarks polybench``) on one tiny
kernel: gcc -O3 on the original source and polyfuse always; Polly (clang-16) and Pluto (polycc) only where
they are installed, each in a test of its own that skips cleanly elsewhere. No timing is asserted."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from benchmarks import polybench

TINY = {"gemm": {"NI": 7, "NJ": 9, "NK": 11}}
FAST = polybench.Settings(idle_s=0.001, sample_s=0.001, max_inner=3, rounds=2)


def _run(tmp_path: Path, impls: tuple[str, ...]) -> dict:
    return polybench.run(sizes=("MINI",), threads=(1, 2), out=tmp_path, only=["gemm"], impls=impls, settings=FAST,
                         explicit_sizes=TINY)


def test_sizes_table_covers_every_kernel_at_every_dataset() -> None:
    from tests.kernels import KERNELS

    assert set(polybench.SIZES) == {k.name for k in KERNELS}
    for name, by_size in polybench.SIZES.items():
        assert list(by_size) == ["MINI", "SMALL", "MEDIUM", "LARGE"]
        assert all(set(d) == set(by_size["MINI"]) for d in by_size.values()), name
    assert polybench.SIZES["gemm"]["MEDIUM"] == {"NI": 200, "NJ": 220, "NK": 240}
    assert polybench.SIZES["gemm"]["LARGE"] == {"NI": 1000, "NJ": 1100, "NK": 1200}


def test_gcc_and_polyfuse_on_a_tiny_gemm(tmp_path: Path) -> None:
    results = _run(tmp_path, ("gcc", "polyfuse"))
    (row,) = results["rows"]
    assert row["skipped"] == {}  # polyfuse's result equals gcc's
    assert [t["threads"] for t in row["timings"]] == [1, 2]
    for t in row["timings"]:
        assert t["rounds"] == 2
        for mode in ("warm", "cold"):
            assert set(t[mode]["ms"]) == {"gcc", "polyfuse"}
            assert all(len(v) == 2 for v in t[mode]["raw_ms"].values())
            assert t[mode]["speedup"]["gcc"]["median"] == 1.0
    configs = results["summary"]["configs"]
    assert [(c["threads"], c["mode"]) for c in configs] == [(1, "warm"), (1, "cold"), (2, "warm"), (2, "cold")]
    assert all(c["geomean"]["polyfuse"] > 0 and c["ran"]["polyfuse"] == 1 for c in configs)
    saved = json.loads((tmp_path / "polybench.json").read_text())
    assert saved["rows"][0]["kernel"] == "gemm"
    table = (tmp_path / "polybench.md").read_text()
    assert "## Geomean speedup over gcc -O3" in table and "| gemm | 2 | 2 |" in table
    assert (tmp_path / "polybench.png").exists() == results["plot"]


def test_a_missing_peer_is_skipped_and_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(polybench, "CLANG", "no-such-clang")
    monkeypatch.setattr(polybench, "polycc", lambda: None)
    results = _run(tmp_path, ("gcc", "polly", "pluto", "polyfuse"))
    skipped = results["rows"][0]["skipped"]
    assert set(skipped) == {"polly", "pluto"} and "not installed" in skipped["polly"] and "not found" in skipped["pluto"]
    assert "Not installed, skipped: Polly, Pluto." in (tmp_path / "polybench.md").read_text()


def test_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.__main__ import main

    monkeypatch.setattr(polybench, "SIZES", {**polybench.SIZES, "gemm": {**polybench.SIZES["gemm"], "MINI": TINY["gemm"]}})
    argv = ["polybench", "--keep-env", "--sizes", "mini", "--threads", "2", "--only", "gemm", "--impls", "polyfuse",
            "--rounds", "1", "--idle-ms", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    saved = json.loads((tmp_path / "polybench.json").read_text())
    assert saved["impls"] == ["gcc", "polyfuse"] and saved["rows"][0]["timings"][0]["rounds"] == 1


@pytest.mark.skipif(shutil.which(polybench.CLANG) is None, reason="clang-16 (Polly) not installed")
def test_polly_on_a_tiny_gemm(tmp_path: Path) -> None:
    row = _run(tmp_path, ("gcc", "polly", "polly-par"))["rows"][0]
    assert row["skipped"] == {}
    assert set(row["timings"][0]["warm"]["speedup"]) == {"gcc", "polly", "polly-par"}


@pytest.mark.skipif(polybench.polycc() is None, reason="Pluto's polycc not installed")
def test_pluto_on_a_tiny_gemm(tmp_path: Path) -> None:
    row = _run(tmp_path, ("gcc", "pluto"))["rows"][0]
    assert row["skipped"] == {}
    assert "pluto" in row["timings"][0]["warm"]["speedup"]


def test_a_call_over_the_cap_is_made_once(tmp_path: Path) -> None:
    settings = dataclasses.replace(FAST, cap_s=0.0)  # every checked call is "too slow": none is called again
    results = polybench.run(sizes=("MINI",), threads=(1,), out=tmp_path, only=["gemm"], impls=("gcc", "polyfuse"),
                            settings=settings, explicit_sizes=TINY)
    (t,) = results["rows"][0]["timings"]
    assert set(t["capped_s"]) == {"gcc", "polyfuse"}
    assert t["warm"]["raw_ms"]["gcc"] == t["cold"]["raw_ms"]["gcc"] == [round(t["capped_s"]["gcc"] * 1e3, 5)] * 2


def test_a_close_call_gets_more_rounds(tmp_path: Path) -> None:
    """Where polyfuse's speedup over gcc is close to 1, rounds are added up to ``close_rounds``; where it is
    not (a margin of 1 makes nothing close), the planned rounds stand."""
    planned = dataclasses.replace(FAST, rounds=None, min_rounds={"MINI": 2}, budget_s={"MINI": 0.0}, max_rounds=2)
    for margin, want in ((1e9, 4), (1.0, 2)):
        settings = dataclasses.replace(planned, close_margin=margin, close_rounds=4, close_budget_s=1e9)
        results = polybench.run(sizes=("MINI",), threads=(1,), out=tmp_path / str(want), only=["gemm"],
                                impls=("gcc", "polyfuse"), settings=settings, explicit_sizes=TINY)
        (t,) = results["rows"][0]["timings"]
        assert (t["rounds"], t["added_rounds"]) == (want, want - 2)
        assert all(len(v) == want for mode in ("warm", "cold") for v in t[mode]["raw_ms"].values())
