"""Data races in generated CUDA, checked on the CPU (``tests/cuda_races.py``): every global access of the
barrier-free kernels is recorded per launch, and an element that one thread writes and another reads or
writes is a race, whatever order the emulation runs the threads in.

The bug this guards against: a thread-mapped loop nested in a sequential loop of the kernel started at a
bound that moved with that loop (nussinov's ``c3 = max(1, 32*c2 - c0 + 1) + threadIdx.x`` inside the k-tile
loop ``c2``), so one ``table[i][j]`` was updated by thread t in one tile and by another thread in the next,
with no barrier between; serial emulation hid it because the updates are ``max``. The printer now maps
such a loop from the axis's fixed origin (``codegen/cuda.py``)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.polybench import SIZES as PB_SIZES
from tests.cuda_races import build_race_checker, races
from tests.kernels import BY_NAME, inputs

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")

FIXED = re.compile(r"^(\s*)const long long (c\d+) = (?:.*? \+ )?\(long long\) (threadIdx\.[xyz]);  /\* one element, one thread: .*\*/\n"
                   r"\s*if \(\2 >= (.*?) && \((.*)\)\) \{$", re.M)


def _program(name: str) -> pf.Program:
    k = BY_NAME[name]
    return pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)


def _sizes(prog: pf.Program, n: int) -> dict[str, int]:
    return {p: 3 if p.upper() in ("TSTEPS", "TMAX") else n for p in prog.params}


def _arguments(name: str, prog: pf.Program, sizes: dict[str, int]) -> dict:
    kernel = dataclasses.replace(BY_NAME[name], sizes=MappingProxyType({p.upper(): v for p, v in sizes.items()}))
    return {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in inputs(kernel).items() if k in prog.arguments}


def _check(dll, tag: str, name: str, prog: pf.Program, code, sizes: dict[str, int]) -> tuple[int, str]:
    got = _arguments(name, prog, sizes)
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in got.items()}
    count, report = races(dll, tag, code, got, sizes)
    if count == 0:
        pf.reference(prog)(**want, **sizes)
        for k, v in want.items():  # (``got`` also holds the temporaries ``races`` allocated)
            if isinstance(v, np.ndarray):
                np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=f"{name} {k}")
    return count, report


def test_every_polybench_kernel_is_race_free_in_bounds_and_matches_the_reference(tmp_path: Path) -> None:
    """The 30 PolyBench-style kernels, specialised at 37 (doitgen 17) and generic (symbolic sizes) run there."""
    runs, variants = [], []
    for name in PB_SIZES:
        prog = _program(name)
        sizes = _sizes(prog, 17 if name == "doitgen" else 37)  # (doitgen's 4-deep nest: 37^4 checked accesses x 8)
        for kind, params in (("n37", sizes), ("sym", None)):
            code = pf.codegen(pf.schedule(prog, target="cuda", params=params))
            tag = f"pb_{name.replace('-', '_')}_{kind}"
            variants.append((tag, code))
            runs.append((tag, name, prog, code, sizes))
    dll = build_race_checker(variants, tmp_path)
    found = {tag: _check(dll, tag, name, prog, code, sizes) for tag, name, prog, code, sizes in runs}
    assert all(count == 0 for count, _ in found.values()), {t: r for t, (c, r) in found.items() if c}


@pytest.mark.parametrize("n", [37, 129])
def test_nussinov_maps_its_rows_from_a_fixed_origin_and_the_old_mapping_races(n: int, tmp_path: Path) -> None:
    prog = _program("nussinov")
    sizes = _sizes(prog, n)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes))
    assert FIXED.search(code.text), code.text  # the k-tile loop moves the row loop's start: fixed origin
    # the mapping printed before: the thread's row counted from the loop's own (moving) start
    old = dataclasses.replace(code, text=FIXED.sub(r"\1const long long \2 = \4 + (long long) \3;\n\1if (\5) {", code.text))
    assert not FIXED.search(old.text)
    dll = build_race_checker([("fixed", code), ("old", old)], tmp_path)
    assert _check(dll, "fixed", "nussinov", prog, code, sizes) == (0, "")
    count, report = races(dll, "old", old, _arguments("nussinov", prog, sizes), sizes)
    assert count > 0 and "of table[" in report, report


def test_a_write_conflict_between_blocks_is_caught(tmp_path: Path) -> None:
    """Every thread of every block writing one element (the index made constant by hand): the check
    names the kernel, the array, the element and the two threads."""
    g = pf.Graph("ew")
    x = g.input("x", (300,), pf.f32)
    prog = g.build(y=pf.ops.exp(x))
    code = pf.codegen(pf.schedule(prog, target="cuda", params={}))
    target = re.search(r"\by\[([^\]]+)\] = ", code.text)
    assert target is not None, code.text
    broken = dataclasses.replace(code, text=code.text.replace(target.group(0), "y[7] = "))
    dll = build_race_checker([("broken", broken)], tmp_path)
    values = {"x": np.linspace(0, 1, 300, dtype=np.float32), "y": np.zeros(300, np.float32)}
    count, report = races(dll, "broken", broken, values, {})
    assert count > 0, broken.text
    assert re.search(r"write of y\[7\] by thread \d+, touched by thread \d+ in the same launch", report), report


def test_an_out_of_bounds_index_is_caught(tmp_path: Path) -> None:
    g = pf.Graph("ew")
    x = g.input("x", (300,), pf.f32)
    prog = g.build(y=pf.ops.exp(x))
    code = pf.codegen(pf.schedule(prog, target="cuda", params={}))
    target = re.search(r"\by\[([^\]]+)\] = ", code.text)
    broken = dataclasses.replace(code, text=code.text.replace(target.group(0), f"y[({target.group(1)}) + 1] = "))
    dll = build_race_checker([("broken", broken)], tmp_path)
    values = {"x": np.linspace(0, 1, 300, dtype=np.float32), "y": np.zeros(301, np.float32)[:300]}
    count, report = races(dll, "broken", broken, values, {})
    assert count == 1 and re.search(r"out-of-bounds access to y\[300\] \(300 elements\) by thread 299", report), report
