"""The PolyBench-style kernels' CUDA in the simulator (:mod:`polyfuse.runtime.cuda_sim`): no race, no
out-of-bounds index, no misplaced barrier, and the reference's results, specialised and generic.

The bug this guards against: a thread-mapped loop nested in a sequential loop of the kernel started at a
bound that moved with that loop (nussinov's ``c3 = max(1, 32*c2 - c0 + 1) + threadIdx.x`` inside the k-tile
loop ``c2``), so one ``table[i][j]`` was updated by thread t in one tile and by another thread in the next,
with no barrier between; serial emulation hid it because the updates are ``max``. The printer now maps
such a loop from the axis's fixed origin (``codegen/cuda.py``)."""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.polybench import SIZES as PB_SIZES
from polyfuse.runtime import cuda_sim
from tests.kernels import BY_NAME, inputs
from tests.test_codegen_cuda import build_emulator, emulate

pytestmark = pytest.mark.skipif(not cuda_sim.available(), reason="g++ is not on PATH")

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


def _check(sims, tag: str, name: str, prog: pf.Program, code, sizes: dict[str, int]) -> str:
    """"" when the simulation is clean and equals the reference, else the simulator's report."""
    got = _arguments(name, prog, sizes)
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in got.items()}
    try:
        emulate(sims, tag, code, got, sizes)
    except pf.SimulationError as e:
        return str(e)
    pf.reference(prog)(**want, **sizes)
    for k, v in want.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=f"{name} {k}")
    return ""


def test_every_polybench_kernel_is_race_free_in_bounds_and_matches_the_reference() -> None:
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
    sims = build_emulator(variants)
    found = {tag: _check(sims, tag, name, prog, code, sizes) for tag, name, prog, code, sizes in runs}
    assert not any(found.values()), {t: r for t, r in found.items() if r}


@pytest.mark.parametrize("n", [37, 129])
def test_nussinov_maps_its_rows_from_a_fixed_origin_and_the_old_mapping_races(n: int) -> None:
    prog = _program("nussinov")
    sizes = _sizes(prog, n)
    code = pf.codegen(pf.schedule(prog, target="cuda", params=sizes))
    assert FIXED.search(code.text), code.text  # the k-tile loop moves the row loop's start: fixed origin
    # the mapping printed before: the thread's row counted from the loop's own (moving) start
    old = dataclasses.replace(code, text=FIXED.sub(r"\1const long long \2 = \4 + (long long) \3;\n\1if (\5) {", code.text))
    assert not FIXED.search(old.text)
    sims = build_emulator([("fixed", code), ("old", old)])
    assert _check(sims, "fixed", "nussinov", prog, code, sizes) == ""
    report = _check(sims, "old", "nussinov", prog, old, sizes)
    assert re.search(r"nussinov_k\d+: block \(\d+,0,0\) thread \(\d+,0,0\) (reads|writes) table\[\d+\]\[\d+\], which block "
                     r"\(\d+,0,0\) thread \(\d+,0,0\) (reads|writes) in (another block of the same launch|the same barrier interval)", report), report
