"""Errors a new user meets (issue 13): each is a polyfuse error raised at construction, naming the
construct and the user's line, with a traceback that ends in the user's code; warnings point there too."""

import os
import subprocess
import sys
import textwrap
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from examples.kernels import add_exp, gemm
from polyfuse.errors import PACKAGE_DIR, user_stacklevel, warn

HERE = os.path.abspath(__file__)
N, M = pf.params("N M")


def frames_of(error: BaseException) -> list[str]:
    return [f.filename for f in traceback.extract_tb(error.__traceback__)]


def assert_at_this_line(err: pf.SourceError, snippet: str) -> None:
    """``err`` is located at the line of this file that holds ``snippet``, with the line's text."""
    assert err.filename is not None and os.path.samefile(err.filename, HERE)
    lines = Path(HERE).read_text().splitlines()
    assert snippet in lines[err.line - 1], (err.line, str(err))
    assert snippet in str(err)


def test_params_with_a_bad_name():
    with pytest.raises(pf.SourceError, match=r"'1N' is not a valid size name") as info:
        pf.params("1N")
    assert_at_this_line(info.value, 'pf.params("1N")')
    with pytest.raises(pf.SourceError, match=r"'N' is named twice"):
        pf.params("N M N")
    with pytest.raises(pf.SourceError, match="at least one name"):
        pf.params(" ")


def test_product_of_sizes_in_a_shape():
    with pytest.raises(pf.SourceError, match=r"N \* M: sizes may only be multiplied by integer constants") as info:
        pf.f32[N * M]
    assert_at_this_line(info.value, "pf.f32[N * M]")
    assert "pf.params('NM')" in str(info.value)
    assert not any(f.startswith(PACKAGE_DIR) for f in frames_of(info.value))


def test_negative_and_float_extents():
    with pytest.raises(pf.SourceError, match=r"pf.f32\[-3\]: the extent -3 is negative") as info:
        pf.f32[-3]
    assert_at_this_line(info.value, "pf.f32[-3]")
    with pytest.raises(pf.SourceError, match=r"pf.f64\[N, 2.5\]: an extent must be an int"):
        pf.f64[N, 2.5]
    assert pf.f32[2 * N + 1, 0].shape[1] == 0  # affine extents and empty axes stay allowed


def test_reference_of_a_plain_function():
    def plain(A):
        return A

    with pytest.raises(pf.PolyfuseError, match=r"pf.reference expects a pf.Program, got function plain \(decorate the function with @pf.program\)") as info:
        pf.reference(plain)
    assert frames_of(info.value) == [HERE]


def test_schedule_and_compile_reject_bad_params():
    with pytest.raises(pf.ShapeError, match=r"params: size N=-1 is negative"):
        pf.schedule(add_exp, params={"N": -1, "M": 4})
    with pytest.raises(pf.ShapeError, match=r"params: size M must be an integer, got 2.5"):
        pf.compile(add_exp, target="c", params={"N": 4, "M": 2.5})
    with pytest.raises(pf.ShapeError, match=r"params names 'K', which is not a size of add_exp"):
        pf.compile(add_exp, target="c", params={"K": 4})
    with pytest.raises(pf.PolyfuseError, match=r"pf.schedule expects a pf.Program"):
        pf.schedule(lambda: None)


def test_tile_with_more_sizes_than_loops():
    with pytest.raises(pf.PolyfuseError, match=r"tile=\(4, 4, 4, 4, 4\) gives 5 sizes, but the deepest loop nest of gemm \(S\d\) has 3 loop"):
        pf.schedule(gemm, tile=(4, 4, 4, 4, 4))
    with pytest.raises(pf.PolyfuseError, match=r"tile=\(4, 4, 4\) gives 3 sizes, but the deepest loop nest of add_exp \(S0\) has 2 loop"):
        pf.schedule(add_exp, tile={"S0": (4, 4, 4)})
    pf.schedule(gemm, tile=(8, 8, 8))  # as many as the deepest nest: fine (shallower bands take a prefix)


USER_MODULE = """\
import polyfuse as pf

N = pf.params("N")


def make():
    @pf.program
    def bad(A: pf.f32[N]):
        for i in range(N):
            A[i * i] = 0.0
    return bad
"""


def test_dsl_error_traceback_ends_in_the_users_module(tmp_path, monkeypatch):
    (tmp_path / "user_prog.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import user_prog  # noqa: PLC0415 - the module is written by this test

    with pytest.raises(pf.SourceError) as info:
        user_prog.make()
    frames = frames_of(info.value)
    assert frames[-1] == str(tmp_path / "user_prog.py")
    assert not [f for f in frames if f.startswith(PACKAGE_DIR)], frames
    assert info.value.__suppress_context__ or info.value.__context__ is None


def test_full_tracebacks_on_request(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(USER_MODULE + "\nmake()\n")
    env = {**os.environ, "POLYFUSE_TRACEBACK": "full"}
    full = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    env.pop("POLYFUSE_TRACEBACK")
    short = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert "polyfuse.errors.SourceError" in full.stderr and "polyfuse.errors.SourceError" in short.stderr
    assert os.path.join("polyfuse", "frontend") in full.stderr
    assert os.path.join("polyfuse", "") not in short.stderr.split("polyfuse.errors.SourceError")[0]
    assert 'main.py", line 13, in <module>' in short.stderr


def test_call_errors_end_at_the_call():
    exe = pf.compile(add_exp, target="c", tile=None)
    with pytest.raises(pf.ShapeError) as info:
        exe(np.zeros((3, 3), np.float64))
    assert frames_of(info.value) == [HERE]


def test_warnings_point_at_the_users_line():
    def internal_warning():
        # Stands in for polyfuse code: user_stacklevel() skips frames whose file is inside polyfuse/,
        # and this file is not, so from here the warning lands on this function's caller line.
        warnings.warn("x", pf.PolyfuseWarning, stacklevel=user_stacklevel())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        internal_warning()
        warn("from polyfuse's helper")
    assert [os.path.samefile(w.filename, HERE) for w in caught] == [True, True]


def test_budget_warning_is_attributed_to_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pf.schedule(gemm, isl_budget=1, params={"N": 16, "K": 16, "M": 16})  # <- budget call
    budget = [w for w in caught if issubclass(w.category, pf.PolyfuseWarning)]
    assert budget, "a budget of one operation should run out"
    for w in budget:
        assert os.path.samefile(w.filename, HERE)
        assert "<- budget call" in Path(HERE).read_text().splitlines()[w.lineno - 1]


def test_cli_script_errors_stay_one_line(tmp_path):
    (tmp_path / "p.py").write_text(textwrap.dedent(USER_MODULE) + "\nprog = make()\n")
    out = subprocess.run([sys.executable, "-m", "polyfuse", "show", str(tmp_path / "p.py")], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_graph_errors_end_at_the_users_line():
    R, D = pf.params("R D")
    g = pf.Graph("bad")
    x, w = g.input("x", (R, D)), g.input("w", (R, R))
    with pytest.raises(pf.PolyfuseError, match="matmul: inner dimensions do not match") as info:
        x @ w
    assert frames_of(info.value) == [HERE]
    with pytest.raises(pf.PolyfuseError, match="softmax: axis 5 is out of range") as info:
        pf.ops.softmax(x, axis=5)
    assert frames_of(info.value) == [HERE]
