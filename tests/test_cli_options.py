"""The command line's parity with the Python API (issue 13): ``--isl-budget``, ``--tune``, ``--threads``,
``--reassociate``, per-statement ``--tile S0:32,32``, ``--version`` and ``--quiet``."""

import argparse
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyfuse as pf
from polyfuse.cli.main import main, version
from polyfuse.cli.options import add_schedule_options, compile_options, schedule_options, tile, tile_option
from polyfuse.errors import PolyfuseError

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "examples" / "kernels.py"
PB = ROOT / "tests" / "kernels"


def run_cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_schedule_options(parser, ("c", "cuda"), default_target="c")
    parser.add_argument("--tune", type=int)
    return parser.parse_args(list(argv))


SCHEDULE_TAKES = set(inspect.signature(pf.schedule).parameters)
needs_reassociate = pytest.mark.skipif("reassociate" not in SCHEDULE_TAKES, reason="pf.schedule has no reassociate= yet")


@needs_reassociate
def test_option_values_become_keyword_arguments():
    args = parse("--tile", "S0:32,32", "--tile", "S1:64", "--isl-budget", "none", "--no-reassociate", "--threads", "2")
    expected = {"fusion": "smart", "tile": {"S0": (32, 32), "S1": (64,)}, "params": {"N": 8},
                "isl_budget": None, "reassociate": False}
    assert schedule_options(args, {"N": 8}) == expected
    assert compile_options(args, {"N": 8}) == {**expected, "threads": 2}  # threads: a pf.compile option


def test_plain_option_values():
    assert schedule_options(parse(), {}) == {"fusion": "smart", "tile": "auto", "params": None}
    assert schedule_options(parse("--tile", "8,8", "--isl-budget", "1_000"), {})["isl_budget"] == 1000
    assert compile_options(parse("--tune", "3"), {})["tune"] == 3
    with pytest.raises(PolyfuseError, match="either one setting for every kernel"):
        tile_option([(32, 32), ("S0", (8,))])


@pytest.mark.parametrize("bad", ["S0:", "0,4", "S 0:4", ":4", "x"])
def test_malformed_tiles_are_usage_errors(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        tile(bad)


@pytest.mark.parametrize("argv", [("--isl-budget", "0"), ("--isl-budget", "lots"), ("--threads", "0")])
def test_malformed_options_exit_2(capsys, argv):
    assert run_cli(capsys, "schedule", f"{KERNELS}::gemm", *argv)[0] == 2


def test_per_statement_tiles_reach_the_schedule(capsys):
    status, out, _ = run_cli(capsys, "schedule", f"{KERNELS}::add_exp", "--fusion", "none", "--tile", "S0:4,8", "--tile", "S1:2,16",
                             "--size", "N=64,M=128")
    assert status == 0
    assert "kernel0: S0  (parallel depth 1; tiles 4x8" in out and "kernel1: S1  (parallel depth 1; tiles 2x16" in out, out


def test_isl_budget_falls_back_with_a_warning_naming_the_option(capsys):
    status, out, err = run_cli(capsys, "schedule", f"{KERNELS}::gemm", "--isl-budget", "1", "--size", "N=16,K=16,M=16")
    assert status == 0
    assert err.startswith("polyfuse: warning: ") and "--isl-budget" in err
    quiet = run_cli(capsys, "-q", "schedule", f"{KERNELS}::gemm", "--isl-budget", "1", "--size", "N=16,K=16,M=16")
    assert quiet[0] == 0 and quiet[2] == ""


@needs_reassociate
def test_reassociate_reaches_the_code(capsys):
    sizes = ("--size", "N=64,K=64,M=64")
    kept = run_cli(capsys, "codegen", f"{KERNELS}::gemm", "--target", "c", "--no-reassociate", *sizes)
    free = run_cli(capsys, "codegen", f"{KERNELS}::gemm", "--target", "c", *sizes)
    assert kept[0] == free[0] == 0
    assert kept[1] != free[1]


def test_run_with_tune_and_check(capsys):
    status, out, err = run_cli(capsys, "run", f"{KERNELS}::add_exp", "--target", "c", "--tune", "2", "--size", "N=64,M=64", "--check", "--repeat", "1")
    assert status == 0, err
    assert "check: PASS" in out


def test_version():
    out = subprocess.run([sys.executable, "-m", "polyfuse", "--version"], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0 and out.stdout.strip() == f"polyfuse {version()}" and version() != "unknown"


def test_threads_reaches_the_c_scheduler_and_is_refused_for_cuda(capsys):
    """``--threads 1`` lets the C scheduler fuse a stencil's time step row by row (``fusion/steps.py``):
    ``codegen`` and ``schedule`` print what ``run --threads 1`` runs."""
    sizes = ("--size", "tsteps=3,n=200")
    status, out, _ = run_cli(capsys, "schedule", f"{PB}/jacobi-2d.c", "--target", "c", *sizes, "--threads", "1")
    assert status == 0 and "fused row by row for one thread" in out
    status, out, _ = run_cli(capsys, "schedule", f"{PB}/jacobi-2d.c", "--target", "c", *sizes, "--threads", "2")
    assert status == 0 and "fused row by row" not in out
    status, _, err = run_cli(capsys, "codegen", f"{KERNELS}::add_exp", "--target", "cuda", "--threads", "2")
    assert status == 1 and "--threads applies to the C target" in err


def test_parallel_override_chooses_the_openmp_loop_and_refuses_a_carried_one(capsys):
    status, out, err = run_cli(capsys, "codegen", f"{KERNELS}::gemm_acc", "--target", "c", "--size", "N=64,M=96,K=32",
                               "--parallel", "S1:j")
    assert status == 0, err
    assert "#pragma omp parallel for" in out
    pragma = out.index("#pragma omp parallel for")
    assert "c0 <= 11;" in out[pragma:pragma + 200]  # the parallel loop runs over j's tiles: 96 / 8
    status, out, err = run_cli(capsys, "schedule", f"{KERNELS}::jacobi_2d", "--target", "c", "--size", "N=64,T=4",
                               "--map", "S0:t")
    assert status != 0 and "loop 't' is not a loop of its kernel's band" in err
    assert parse("--parallel", "S1:i,j").parallel == [("S1", ("i", "j"))]
    with pytest.raises(SystemExit):
        parse("--parallel", "S1")
