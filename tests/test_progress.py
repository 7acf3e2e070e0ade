"""Progress lines on stderr (issue 13): silent for short work, one line per step after the threshold,
off with POLYFUSE_PROGRESS=0 or the CLI's --quiet."""

from pathlib import Path

import pytest

import polyfuse as pf
from examples.kernels import add_exp, gemm
from polyfuse import progress
from polyfuse.cli.main import main

KERNELS = Path(__file__).resolve().parent.parent / "examples" / "kernels.py"


@pytest.fixture
def always(monkeypatch):
    monkeypatch.setenv(progress.ENV, "1")
    monkeypatch.setattr(progress, "THRESHOLD_S", 0.0)


def test_steps_of_a_schedule(always, capsys):
    pf.schedule(gemm, target="c", params={"N": 32, "K": 32, "M": 32})
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("polyfuse: scheduling gemm [") and "dependence analysis (isl budget: " in lines[0]
    assert any("scheduling under fusion='smart'" in line for line in lines)
    assert lines[-1].startswith("polyfuse: scheduling gemm: done in ")


def test_compile_reports_its_stages_under_one_task(always, capsys):
    pf.compile(add_exp, target="c", params={"N": 8, "M": 8})
    err = capsys.readouterr().err
    assert "polyfuse: compiling add_exp [" in err and "the C compiler" in err
    assert "scheduling add_exp" not in err  # the nested schedule reports under the compile
    assert err.count(": done in ") == 1


def test_quiet_by_default_for_short_work_and_when_off(monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV, "1")
    pf.schedule(add_exp, target="c")  # well under the threshold
    monkeypatch.setattr(progress, "THRESHOLD_S", 0.0)
    monkeypatch.setenv(progress.ENV, "0")
    pf.schedule(add_exp, target="c")
    assert capsys.readouterr().err == ""


def test_cli_run_progress_and_quiet(always, capsys):
    argv = ["run", f"{KERNELS}::add_exp", "--target", "c", "--size", "N=16,M=16", "--check", "--repeat", "2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "polyfuse: run add_exp [" in err and "--check: pf.reference" in err and "timed run 2 of 2" in err
    assert main(["-q", *argv]) == 0
    assert capsys.readouterr().err == ""
