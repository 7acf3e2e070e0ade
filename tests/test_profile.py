"""``exe.profile(...)`` and ``polyfuse run --profile`` (issue 13): time per kernel and per launch next to
the modelled bytes; the instrumented C computes the same results."""

from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from examples.kernels import add_exp, jacobi_2d
from polyfuse.cli.main import main
from polyfuse.errors import CodegenError
from polyfuse.runtime.profile import LAUNCHES, SECONDS, instrument_c

KERNELS = Path(__file__).resolve().parent.parent / "examples" / "kernels.py"

SAMPLE = """void f(void)
{
    for (int t = 0; t < 3; t += 1) {
        /* kernel kernel0: S0 */
        {
            for (int i = 0; i < 4; i += 1) {
                x[i] = 0;
            }
        }
        /* kernel kernel1: S1, S2 */
        {
            y = 1;
        }
    }
}"""


def test_instrumented_c_times_each_kernel_block():
    text = instrument_c(SAMPLE, ["kernel0", "kernel1"])
    assert f"double {SECONDS}[2];" in text and f"int64_t {LAUNCHES}[2];" in text
    body = text.split("void f(void)")[1].splitlines()
    first = body.index("        /* kernel kernel0: S0 */")
    assert body[first + 2].strip() == "const double polyfuse_t0 = omp_get_wtime();"
    assert body[first + 3].strip().startswith("for (int i = 0;")  # the kernel's own code follows, unchanged
    assert sum(f"{SECONDS}[0] +=" in line for line in body) == 1 and sum(f"{LAUNCHES}[1] += 1;" in line for line in body) == 1
    with pytest.raises(CodegenError, match="no block found for kernel\\(s\\) kernel2"):
        instrument_c(SAMPLE, ["kernel0", "kernel1", "kernel2"])


def test_profile_of_a_stencil_counts_launches_and_keeps_results():
    exe = pf.compile(jacobi_2d, target="c", params={"N": 64, "T": 3})
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.5, (64, 64)).astype(np.float32), np.zeros((64, 64), np.float32)
    want_a, want_b = a.copy(), b.copy()
    pf.reference(jacobi_2d)(want_a, want_b, T=3)
    profile = exe.profile(a, b, T=3)
    np.testing.assert_allclose(a, want_a, rtol=1e-5)
    sched = exe.specialise({"N": 64, "T": 3}).schedule
    assert [k.name for k in profile.kernels] == [k.name for k in sched.kernels]
    # two kernels under the time loop run once per step; one (time-tiled) kernel runs once
    assert [k.launches for k in profile.kernels] == ([3] * len(sched.kernels) if len(sched.kernels) > 1 else [1])
    report = sched.traffic()
    assert [k.modelled_bytes for k in profile.kernels] == [report.per_kernel[k.name].total_bytes for k in sched.kernels]
    assert all(k.seconds >= 0 for k in profile.kernels) and profile.seconds > 0
    table = str(profile)
    assert table.startswith("profile of jacobi_2d at N=64, T=3 (target c):") and "per launch" in table


def test_run_profile_prints_the_table(capsys):
    assert main(["run", f"{KERNELS}::add_exp", "--target", "c", "--size", "N=32,M=32", "--repeat", "1", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "profile of add_exp at N=32, M=32 (target c)" in out and "kernel0" in out


def test_profile_accepts_what_a_call_accepts():
    exe = pf.compile(add_exp, target="c")
    with pytest.raises(pf.ShapeError, match="missing argument 'A'"):
        exe.profile()
    assert len(exe.profile(np.ones((4, 4), np.float32)).kernels) == len(exe.schedule.kernels)
