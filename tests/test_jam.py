"""Independent recurrences run in step (``schedule/tiling/jam.py``, ``codegen/c_jam.py``): a parallel point loop
around a loop that carries a dependence is unrolled by four and jammed into it, each copy with its own
carried scalars. Checked against the reference interpreter at sizes that leave every remainder (1, 7, 37,
129 rows), against gcc on PolyBench's adi, and for the loops it must leave alone."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np
import pytest

import examples.kernels as K
import polyfuse as pf
from polyfuse.schedule.tiling.jam import JAM
from tests.c_oracle import GccKernel, assert_same
from tests.kernels import BY_NAME, inputs

R, C = pf.params("R C")
JAMMED = "in step: independent recurrences (jam)"


@pf.program
def row_filter(x: pf.f32[R, C], y: pf.f32[R, C], a: pf.f32, b1: pf.f32, b2: pf.f32):
    """A second-order recursive filter along each row (deriche's causal pass): two carried scalars."""
    for i in range(R):
        ym1 = 0.0
        ym2 = 0.0
        for j in range(C):
            y[i, j] = a * x[i, j] + b1 * ym1 + b2 * ym2
            ym2 = ym1
            ym1 = y[i, j]


@pf.program(assume="C >= 1")
def row_sweep(u: pf.f64[R, C], p: pf.f64[R, C], q: pf.f64[R, C]):
    """adi's forward sweep: each row's coefficients depend on the previous column's, through a division."""
    for i in range(R):
        p[i, 0] = 0.0
        q[i, 0] = u[i, 0]
        for j in range(1, C):
            p[i, j] = -0.25 / (0.5 * p[i, j - 1] + 1.5)
            q[i, j] = (u[i, j] - 0.5 * q[i, j - 1]) / (0.5 * p[i, j - 1] + 1.5)


def _run(prog: pf.Program, arrays: dict[str, np.ndarray], scalars: dict[str, float], **options):
    exe = pf.compile(prog, target="c", **options)
    got = {n: v.copy() for n, v in arrays.items()}
    exe(**got, **scalars)
    want = {n: v.copy() for n, v in arrays.items()}
    pf.reference(prog)(**want, **scalars)
    return exe, got, want


# rows: 1 (no loop), 7 (one group of four, three left), 37 and 129 (one left); enough columns that
# the kernel runs in parallel (a launch of fewer than 4096 instances runs untiled on one thread)
SHAPES = [(1, 5001), (7, 1001), (37, 150), (129, 45)]


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_a_row_filter_runs_four_rows_in_step_and_matches_the_reference(rows, cols):
    rng = np.random.default_rng(rows)
    arrays = {"x": rng.standard_normal((rows, cols)).astype(np.float32), "y": np.zeros((rows, cols), np.float32)}
    exe, got, want = _run(row_filter, arrays, {"a": 0.5, "b1": 0.75, "b2": -0.125})
    code = exe.code.text
    if rows >= JAM:  # (a single row: isl prints no row loop, nothing to jam)
        assert JAMMED in code
        assert all(f"ym1_j{u}" in code for u in range(1, JAM))  # each copy carries its own scalars
    np.testing.assert_array_equal(got["y"], want["y"])  # same operations in the same order per element


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_a_division_sweep_runs_four_rows_in_step_and_matches_the_reference(rows, cols):
    rng = np.random.default_rng(rows)
    arrays = {"u": rng.standard_normal((rows, cols)), "p": np.zeros((rows, cols)), "q": np.zeros((rows, cols))}
    exe, got, want = _run(row_sweep, arrays, {})
    assert (JAMMED in exe.code.text) == (rows >= JAM)
    for name in ("p", "q"):
        np.testing.assert_array_equal(got[name], want[name])


def test_a_reduction_is_no_recurrence_to_jam():
    """A sum carries its accumulator from one iteration to the next too, but the printer vectorises it
    (``omp simd reduction``): it is not jammed, with or without reassociation, and the exact mode still
    sums in source order."""
    for reassociate in (True, False):
        code = pf.codegen(pf.schedule(K.row_sum, target="c", reassociate=reassociate)).text
        assert JAMMED not in code
        assert ("#pragma omp simd reduction(+:acc)" in code) == reassociate


@pytest.mark.parametrize("n", [130, 203])
def test_adi_sweeps_are_jammed_and_match_gcc(n):
    kernel = dataclasses.replace(BY_NAME["adi"], sizes=MappingProxyType({"N": n, "TSTEPS": 2}))
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
    exe = pf.compile(prog, target="c", params={p: kernel.sizes[p.upper()] for p in prog.params})
    assert exe.code.text.count(JAMMED) >= 2  # the forward sweeps along rows and columns
    args = inputs(kernel)
    want = GccKernel(kernel.path, kernel.function, kernel.defines)(**args, tsteps=2, n=n)
    got = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    exe(**{k: got[k] for k in prog.arguments}, tsteps=2, n=n)
    names = [k for k in want if k in prog.arguments and isinstance(want[k], np.ndarray)]
    assert_same({k: got[k] for k in names}, {k: want[k] for k in names}, f"adi N={n}", rtol=1e-9, atol=1e-9)


def test_a_loop_the_compiler_vectorises_is_not_jammed():
    """lu's row update is flagged sequential only for the pivot division run once before it: jamming would
    break up a loop gcc vectorises (measured 1.8x slower at LARGE)."""
    kernel = BY_NAME["lu"]
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
    assert JAMMED not in pf.codegen(pf.schedule(prog, target="c", params={"n": 400})).text
