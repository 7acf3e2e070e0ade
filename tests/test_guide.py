"""The user guide's examples run (issue 13): every ```python block of docs/guide.md in order, in one
namespace, with a ```text block after "prints" compared with what the block before it printed; every
```sh block in bash with ``polyfuse`` meaning this checkout's ``python -m polyfuse``."""

import contextlib
import io
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n(?:\nprints\n\n```text\n(.*?)^```\n)?", re.S | re.M)


def blocks(kind):
    return [(m.group(2), m.group(3)) for m in BLOCK.finditer(GUIDE.read_text()) if m.group(1) == kind]


def test_the_guide_has_examples():
    assert len(blocks("python")) >= 8 and len(blocks("sh")) >= 1


def test_python_examples(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    namespace = {"__name__": "guide"}
    for k, (code, expected) in enumerate(blocks("python")):
        path = tmp_path / f"guide_block_{k + 1}.py"  # @pf.program reads its function's source from a file
        path.write_text(code)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, str(path), "exec"), namespace)  # noqa: S102 - the guide's own examples
        if expected is not None:
            assert out.getvalue() == expected, f"python block {k + 1} printed:\n{out.getvalue()}"


@pytest.mark.parametrize("k", range(len(blocks("sh"))))
def test_shell_examples(k, tmp_path):
    script, _ = blocks("sh")[k]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "polyfuse").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m polyfuse "$@"\n')
    (bin_dir / "polyfuse").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT),
               POLYFUSE_CACHE_DIR=os.environ.get("POLYFUSE_CACHE_DIR", str(tmp_path / "cache")))
    for line in script.strip().splitlines():
        line = re.sub(r"-o (\S+)", lambda m: f"-o {tmp_path}/{m.group(1)}", line.replace("s.txt", str(tmp_path / "s.txt")))
        done = subprocess.run(["bash", "-c", f"cd '{ROOT}' && {line}"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{line}\n{done.stderr}"
