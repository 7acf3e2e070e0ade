"""The bad-input corpus (``tests/bad_inputs/``): every case fails with its specific error class and message,
or, where an input is accepted on purpose, gives the right result.

* ``dsl/*.py`` and ``c/*.c``: one program per file; the first line says ``# expect: Class: fragment`` (C:
  ``// expect: ...`` and ``// function: NAME``). Each is loaded the way the CLI loads ``FILE::NAME``, and
  ``polyfuse show FILE::NAME`` must exit with status 1 and print exactly one line, with no traceback.
* ``calls.py``: call-time arguments (missing, wrong shapes, dtypes, strides, aliasing, violated assume=)
  and ops-graph constructions, with the accepted cases checked against numpy.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import polyfuse as pf
from polyfuse.cli.loading import load_program
from polyfuse.cli.main import main as cli_main

HERE = Path(__file__).resolve().parent / "bad_inputs"
FILES = sorted((HERE / "dsl").glob("*.py")) + sorted((HERE / "c").glob("*.c"))
sys.path.insert(0, str(HERE))
import calls  # noqa: E402

INTERNALS = ("Traceback", "polyfuse/frontend", "polyfuse/analysis", "polyfuse/ir", "islpy", "isl_", 'File "')


def expectation(path: Path) -> tuple[type, str, str]:
    """(error class, message fragment, program name) from a corpus file's header."""
    lines = path.read_text().splitlines()
    m = re.match(r"^(?:#|//) expect: (\w+): (.+)$", lines[0])
    assert m, f"{path.name}: first line must be an expect: header"
    name = "bad"
    if len(lines) > 1 and (f := re.match(r"^// function: (\w+)$", lines[1])):
        name = f.group(1)
    return getattr(pf, m.group(1)), m.group(2), name


def test_corpus_size():
    assert len(FILES) + len(calls.CASES) >= 60


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_file_case_raises_its_error(path: Path):
    cls, fragment, name = expectation(path)
    with pytest.raises(pf.PolyfuseError) as info:
        load_program(f"{path}::{name}")
    err = info.value
    assert type(err) is cls, f"{path.name}: expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert fragment in str(err), f"{path.name}: {fragment!r} not in:\n{err}"
    first = str(err).splitlines()[0]
    assert path.name in first, f"the message does not point at the user's file: {first}"
    for bad in INTERNALS:
        assert bad not in str(err), f"{bad!r} leaks into:\n{err}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cli_answers_with_one_line(path: Path, capsys):
    _, fragment, name = expectation(path)
    status = cli_main(["show", f"{path}::{name}"])
    out = capsys.readouterr()
    assert status == 1, out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith("polyfuse: error: ") and "Traceback" not in out.err


def test_cli_entry_point_has_no_traceback():
    """The real entry point, in a fresh process, for one DSL and one C case."""
    for path in (HERE / "dsl" / "while_loop.py", HERE / "c" / "while_loop.c"):
        name = expectation(path)[2]
        proc = subprocess.run([sys.executable, "-m", "polyfuse", "show", f"{path}::{name}"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
        assert proc.returncode == 1, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("build", [c[1] for c in calls.CASES], ids=[c[0] for c in calls.CASES])
def test_call_time_case(build):
    what, expected = build()
    if expected[0] == "ok":
        what()
        expected[1]()
        return
    _, cls, fragment = expected
    with pytest.raises(cls) as info:
        what()
    assert fragment in str(info.value), f"{fragment!r} not in: {info.value}"
    assert "\n" not in str(info.value).strip(), "call-time errors are one line"
