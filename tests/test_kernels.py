"""The PolyBench/C 4.2.1-style kernel suite, end to end.

For each of the 30 kernels in ``tests/kernels/*.c``, at small sizes:

* the C SCoP frontend parses it (``pf.from_c`` with the sizes as ``defines``);
* where a Python-DSL twin exists, both have exactly the same dependences (flow, anti, output: isl
  ``is_equal`` on the union maps; same statement names, array names and size params);
* the reference interpreter agrees with an independent numpy formulation (``tests/kernels/numpy_refs.py``);
* the compiled C code agrees with the reference interpreter under every fusion policy;
* a schedule without any parallel loop explains itself by naming a dependence.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.frontend.scop_c import from_c
from tests.kernels import BY_NAME, KERNELS, Kernel, inputs, tolerance
from tests.kernels.dsl_kernels import DSL
from tests.kernels.numpy_refs import REFS

NAMES = [k.name for k in KERNELS]
POLICIES = ("none", "min", "max", "smart")
DEP_KINDS = ("flow", "anti", "output")
# The compiled code may reassociate nothing, but C compilers may contract a*b+c into an FMA.
COMPILE_TOL = {"rtol": 1e-10, "atol": 1e-10}
# Kernels whose run is known to be wrong, and why (each is a bug outside this suite, reported to its owner).
KNOWN_WRONG: dict[str, str] = {}


def expect_known_bug(request: pytest.FixtureRequest, name: str) -> None:
    if name in KNOWN_WRONG:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_WRONG[name], strict=False))


def test_suite_is_complete():
    assert len(KERNELS) == 30 and len(set(NAMES)) == 30
    assert set(REFS) == set(NAMES)
    assert set(DSL) <= set(NAMES) and len(DSL) >= 8
    for k in KERNELS:
        assert k.path.is_file(), k.path
        text = k.path.read_text()
        assert "#pragma scop" in text and "#pragma endscop" in text
        assert f"void {k.function}(" in text


@functools.cache
def parsed(name: str) -> pf.Program:
    k = BY_NAME[name]
    return from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)


def call_args(prog: pf.Program, kernel: Kernel, seed: int = 0) -> dict:
    """Fresh arguments for one run of ``prog``: the kernel's random inputs (copied), and the sizes no
    array shape determines (time-step counts) by keyword."""
    data = inputs(kernel, seed)
    args = {name: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for name, v in data.items() if name in prog.arguments}
    missing = [a for a in prog.arguments if a not in args]
    assert not missing, f"{kernel.name}: no test input for {missing}"
    for p in prog.params:
        if p.upper() in kernel.sizes:
            args[p] = kernel.sizes[p.upper()]
    return args


def numpy_expected(kernel: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    kw = dict(inputs(kernel, seed))
    if kernel.steps:
        kw[kernel.steps.lower()] = kernel.sizes[kernel.steps]
    return REFS[kernel.name](**kw)


@functools.cache
def reference_run(name: str) -> dict[str, np.ndarray]:
    prog = parsed(name)
    args = call_args(prog, BY_NAME[name])
    pf.reference(prog)(**args)
    return {n: v for n, v in args.items() if isinstance(v, np.ndarray)}


# ----- parse -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_parse(name):
    prog = parsed(name)
    kernel = BY_NAME[name]
    assert prog.statements, name
    assert [s.name for s in prog.statements] == [f"S{i}" for i in range(len(prog.statements))]
    # every array the numpy formulation produces is one the kernel writes
    written = {a.array for s in prog.statements for a in s.accesses if a.kind in ("write", "update")}
    assert set(numpy_expected(kernel)) <= written
    # sizes are the C function's int parameters (or fixed by the defines)
    for p in prog.params:
        assert re.fullmatch(r"[a-z_0-9]+", p), p


# ----- dependences: C == DSL -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(DSL))
def test_dependences_match_dsl(name):
    c_prog, dsl_prog = parsed(name), DSL[name]
    assert [s.name for s in c_prog.statements] == [s.name for s in dsl_prog.statements]
    assert set(c_prog.arrays) == set(dsl_prog.arrays)
    assert set(c_prog.params) == set(dsl_prog.params)
    for s_c, s_d in zip(c_prog.statements, dsl_prog.statements):
        assert s_c.domain.is_equal(s_d.domain), (s_c.name, s_c.domain, s_d.domain)
    c_deps, d_deps = c_prog.dependences(), dsl_prog.dependences()
    for kind in DEP_KINDS:
        a, b = getattr(c_deps, kind), getattr(d_deps, kind)
        assert a.is_equal(b), f"{name} {kind} dependences differ:\nC:   {a}\nDSL: {b}"


# ----- reference interpreter vs numpy ----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_numpy(name, request):
    expect_known_bug(request, name)
    kernel = BY_NAME[name]
    got = reference_run(name)
    for array, want in numpy_expected(kernel).items():
        np.testing.assert_allclose(got[array], want, err_msg=f"{name}: {array}", **tolerance(kernel))


@pytest.mark.parametrize("name", sorted(DSL))
def test_dsl_reference_matches_numpy(name):
    kernel, prog = BY_NAME[name], DSL[name]
    args = call_args(prog, kernel)
    pf.reference(prog)(**args)
    for array, want in numpy_expected(kernel).items():
        np.testing.assert_allclose(args[array], want, err_msg=f"{name}: {array}", **tolerance(kernel))


# ----- compiled C vs reference ---------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", NAMES)
def test_compile_c_matches_reference(name, policy, request):
    expect_known_bug(request, name)
    if not hasattr(pf, "compile"):
        pytest.skip("polyfuse.compile does not exist yet")
    kernel, prog = BY_NAME[name], parsed(name)
    want = reference_run(name)
    args = call_args(prog, kernel)
    exe = pf.compile(prog, target="c", fusion=policy)
    exe(**args)
    tol = tolerance(kernel) if kernel.name in ("deriche", "floyd-warshall", "nussinov") else COMPILE_TOL
    for array, value in want.items():
        np.testing.assert_allclose(args[array], value, err_msg=f"{name} fusion={policy}: {array}", **tol)


# ----- schedules without parallelism say why ----------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_sequential_schedule_names_a_dependence(name):
    sched = pf.schedule(parsed(name), target="c", fusion="smart")
    if any(k.parallel_depth > 0 for k in sched.kernels):
        return
    text = sched.explain().lower()
    assert "depend" in text or re.search(r"\b(flow|anti|output)\b", text), f"{name}: no parallel loop and explain() names no dependence:\n{sched.explain()}"


def test_cuda_code_of_every_kernel_compiles_with_nvcc(tmp_path) -> None:
    """The CUDA code of all 30 kernels (default fusion) compiles with nvcc for sm_90, in one batch."""
    import shutil
    import subprocess

    from polyfuse.codegen.cuda import generate_cuda
    from tests.test_codegen_cuda import _unit

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    variants = []
    for name in NAMES:
        prog = parsed(name)
        tag = "pb_" + re.sub(r"[^A-Za-z0-9]", "_", name)
        variants.append((tag, generate_cuda(pf.schedule(prog, target="cuda")).text))
    src = tmp_path / "polybench.cu"
    src.write_text(_unit(variants))
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "polybench.ptx"), str(src)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    ptx = (tmp_path / "polybench.ptx").read_text()
    for tag, _ in variants:
        assert f".entry {tag}_" in ptx, f"no kernel of {tag} in the PTX"
