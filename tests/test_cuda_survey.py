"""A survey of the CUDA that the 30 PolyBench-style kernels get (at 200 per size, 3 time steps): every
kernel launched on one thread is justified, no kernel loads a register it overwrites at once, and the
kernels that still keep an accumulator in global memory are listed, so that a change adding one fails
here and one removing one updates the list.

A one-thread kernel is justified when it runs one statement instance per launch (no loop inside the
kernel: a scalar statement, or one instance per iteration of the host loops around it), which
``explain()`` says, or when ``explain()`` names the dependence its loop carries. Reductions into one element outside host loops
no longer run on one thread (``block_reductions.py``); those inside host loops (durbin's and
gramschmidt's inner products) do, and ``explain()`` names their dependence.

At the LARGE sizes, every kernel launching fewer blocks than an H100's 132 multiprocessors is justified the
same way: ``explain()`` names the dependence that kept a loop off the threads, or says that a launch has
fewer parallel instances than a warp per multiprocessor.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest

import polyfuse as pf
from benchmarks.polybench import SIZES as PB_SIZES
from polyfuse.schedule.movement.kernel_tree import kernel_marks
from tests.kernels import BY_NAME

GLOBAL_ACCUMULATORS = {
    ("correlation", "kernel_correlation_k7", "S13", "corr"),  # S14 writes corr[j][i] in the kernel: no register
    ("doitgen", "kernel_doitgen_k0", "S1", "sum"),
    ("durbin", "kernel_durbin_k4", "S5", "sum"),  # an inner product inside the host loop k: one thread
    ("gramschmidt", "kernel_gramschmidt_k2", "S1", "nrm"),  # likewise
    ("nussinov", "kernel_nussinov_k0", "S0", "table"),  # max updates of table[i][j] over k, tiled
    ("nussinov", "kernel_nussinov_k0", "S1", "table"),
    ("nussinov", "kernel_nussinov_k0", "S2", "table"),
    ("nussinov", "kernel_nussinov_k0", "S3", "table"),
    ("nussinov", "kernel_nussinov_k0", "S4", "table"),
    ("trmm", "kernel_trmm_k0", "S0", "B"),
    ("trmm", "kernel_trmm_k0", "S1", "B"),
}
"""(kernel, CUDA function, statement, array) updating one global element across a sequential loop."""


def _scheduled(sizes) -> dict[str, tuple[pf.Program, pf.Schedule]]:
    """Each of the 30 kernels and its CUDA schedule at ``sizes(name, prog)``."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pf.PolyfuseWarning)
        for name in PB_SIZES:
            k = BY_NAME[name]
            prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
            out[name] = (prog, pf.schedule(prog, target="cuda", params=sizes(name, prog)))
    return out


@pytest.fixture(scope="module")
def surveyed() -> dict[str, tuple[pf.Program, object, pf.Code]]:
    at_200 = _scheduled(lambda name, prog: {p: 3 if p.upper() in ("TSTEPS", "TMAX") else 200 for p in prog.params})
    return {name: (prog, sched, pf.codegen(sched)) for name, (prog, sched) in at_200.items()}


def test_every_one_thread_kernel_is_justified(surveyed) -> None:
    unjustified = []
    for name, (prog, sched, _) in surveyed.items():
        host = {m.mark_get_id().user.name: m.get_schedule_depth() for m in kernel_marks(sched.tree)}
        explained = sched.explain()
        for k in sched.kernels:
            if math.prod(k.grid) * math.prod(k.block) != 1:
                continue
            loop_free = all(sched.program.statement(s).depth <= host[k.name] for s in k.statements) or (
                sched._loop_free(k))  # (the host loops fix the instance: floyd-warshall's pivot)
            said = re.search(rf"{k.name}: sequential: (one statement instance per launch|the (flow|anti|output) dependence on "
                             rf"'\w+' from S\d+ to S\d+ is carried)", explained)
            if not said or (said.group(1).startswith("one") != loop_free):
                unjustified.append(f"{name} {k.name} {k.statements}")
    assert not unjustified, unjustified


def _global_accumulators(text: str) -> set[tuple[str, str, str]]:
    """(function, statement, array) of updates ``X[idx] op= ...`` (or ``X[idx] = f(X[idx], ...)``) of a
    global array inside a ``for`` loop whose iterator ``idx`` does not use: the element is re-read and
    re-written in global memory every iteration."""
    out, loops, function = set(), [], ""
    for line in text.splitlines():
        m = re.match(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(', line)
        if m:
            function, loops = m.group(1), []
            continue
        indent = len(line) - len(line.lstrip())
        while loops and loops[-1][0] >= indent:
            loops.pop()
        loop = re.match(r"\s*for \(long long (\w+) = ", line)
        if loop:
            loops.append((indent, loop.group(1)))
            continue
        st = re.match(r"\s*(?:if \(.*?\) )?(\w+)\[([^=]*?)\] (\+=|-=|\*=|=) (.*);  /\* (S\d+) \*/", line)
        if st and not re.search(r"_(reg|acc|shared)", st.group(1)):
            array, index, op, value, stmt = st.groups()
            if op == "=" and f"{array}[{index}]" not in value:
                continue
            if any(not re.search(rf"\b{it}\b", index) for _, it in loops):
                out.add((function, stmt, array))
    return out


def test_the_global_accumulators_left_are_the_known_ones(surveyed) -> None:
    found = {(name, *acc) for name, (_, _, code) in surveyed.items() for acc in _global_accumulators(code.text)}
    assert found == GLOBAL_ACCUMULATORS, (sorted(found - GLOBAL_ACCUMULATORS), sorted(GLOBAL_ACCUMULATORS - found))


def _dead_loads(text: str) -> list[str]:
    """Loads into a register that the next line overwrites with a constant before any use
    (``C_reg = C[..]; C_reg = 0``): a global read for nothing."""
    lines = text.splitlines()
    out = []
    for a, b in zip(lines, lines[1:]):
        load = re.match(r"\s*(?:if \(.*\) )?(\w+_(?:reg|w\d+)_k\d+) = [^;]*;  /\* (?:load|wload)_", a)
        if load and re.match(rf"\s*(?:if \(.*\) )?{load.group(1)} = [-0-9.efINFTY()]+;", b.split("/*")[0]):
            out.append(a.strip())
    return out


def test_no_kernel_loads_a_register_it_overwrites_at_once(surveyed) -> None:
    dead = {name: _dead_loads(code.text) for name, (_, _, code) in surveyed.items()}
    assert not any(dead.values()), {k: v for k, v in dead.items() if v}
    assert _dead_loads("  C_reg_k0 = C[i];  /* load_C_reg_k0 */\n  C_reg_k0 = 0.0f;  /* S0 */\n")


def test_the_detector_sees_an_accumulator_in_global_memory() -> None:
    text = ('extern "C" __global__ void k(float* y)\n{\n  for (long long c0 = 0; c0 <= 9; c0 += 1) {\n'
            "    y[c1] += x[c0];  /* S1 */\n  }\n  y_acc += x[c1];  /* S2 */\n}\n")
    assert _global_accumulators(text) == {("k", "S1", "y")}


@pytest.fixture(scope="module")
def large() -> dict[str, pf.Schedule]:
    """The 30 kernels scheduled for CUDA at PolyBench's LARGE sizes."""
    large = _scheduled(lambda name, prog: {p: PB_SIZES[name]["LARGE"][p.upper()] for p in prog.params})
    return {name: sched for name, (_, sched) in large.items()}


def test_every_kernel_launching_fewer_blocks_than_sms_is_justified(large) -> None:
    """At LARGE sizes, a kernel that launches fewer blocks than an H100's 132 multiprocessors either runs on
    one thread (justified above: ``sequential: ...``), or ``explain()`` names the dependence that one of
    its statements' loops carries (what kept that loop off the threads), or says that all of a launch's
    instances are parallel and fewer than a warp per multiprocessor."""
    unjustified, reasons = [], {}
    for name, sched in large.items():
        lines = sched.explain().splitlines()
        for k in sched.kernels:
            mine = [line for line in lines if line.startswith(f"  {k.name}: ")]
            few = [line for line in mine if "multiprocessors" in line]
            if math.prod(k.grid) >= 132:
                assert not few, few
                continue
            if k.parallel_depth == 0:
                ok = any(": sequential: " in line for line in mine)
            else:
                work = re.search(r"(\d+) statement instances per launch(;|, all of them parallel)", few[0]) if len(few) == 1 else None
                ok = work is not None and (work.group(2) == ";" and "dependence on '" in few[0] or int(work.group(1)) < 132 * 32)
                reasons[(name, k.name)] = few[0] if few else ""
            if not ok:
                unjustified.append(f"{name} {k.name} {k.statements}: {mine}")
    assert not unjustified, unjustified
    # floyd-warshall, split around its pivot (schedule/pivots.py): the quadrants launch blocks enough, the
    # pivot's row and column are small launches of parallel instances (it was one anti-diagonal per launch)
    fw = {key[1]: why for key, why in reasons.items() if key[0] == "floyd-warshall"}
    assert fw and all("all of them parallel" in why for why in fw.values() if why), fw
    assert "1900 statement instances per launch, all of them parallel" in reasons[("atax", "kernel0")]  # tmp[i] = 0
