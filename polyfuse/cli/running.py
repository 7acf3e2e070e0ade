"""Commands that execute: ``run`` (compile, check against the reference, time) and ``bench``.

``run`` fills every array argument with random values of its dtype (floats uniform in [0.5, 1.5), so
divisions, square roots and logarithms stay finite; signed integers in [-7, -1] or [1, 7], negative values
included so that C's truncating ``/`` and ``%`` are exercised, never 0 so that no division traps;
unsigned ones in [1, 7]), and the scalar arguments likewise,
from ``--seed``. ``--check`` runs the compiled program and ``pf.reference`` on copies of the same inputs
and compares every output and inout array; each timed run starts from a fresh copy of the inputs too.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from polyfuse import progress
from polyfuse.cli.commands import add_target_argument, command
from polyfuse.cli.loading import load
from polyfuse.cli.options import add_schedule_options, all_sizes, compile_options, positive
from polyfuse.compile import compile as compile_program
from polyfuse.errors import PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.runtime.reference import reference
from polyfuse.types import DType

RUN_TARGETS = ("c", "cuda", "cuda-sim", "auto")
BENCH_TARGETS = ("c", "cuda", "all")
# |compiled - reference| <= atol + rtol * |reference|, per dtype (C compilers may contract a*b+c to an FMA).
TOLERANCE = {"f32": (1e-4, 1e-5), "f64": (1e-9, 1e-12), "i32": (0.0, 0.0)}
REPO_ROOT = Path(__file__).resolve().parents[2]


class CheckFailed(PolyfuseError):
    """``run --check``: the compiled program's outputs differ from the reference interpreter's."""


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_argument(parser)
    add_schedule_options(parser, RUN_TARGETS, default_target="auto")
    parser.add_argument("--check", action="store_true", help="compare every output with pf.reference")
    parser.add_argument("--repeat", type=positive, default=3, metavar="K", help="timed runs (default: 3); the median is printed")
    parser.add_argument("--profile", action="store_true", help="then one more run timing each kernel, next to its modelled bytes")
    parser.add_argument("--tune", type=positive, metavar="K", help="autotune: build and time the traffic model's K best tile choices")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")


@command("run", "compile and run a program on random inputs: --check against pf.reference, median time", configure=_run_arguments)
def run(args: argparse.Namespace) -> int:
    program = load(args)
    with progress.task(f"run {program.name}"):
        return _run(args, program)


def _run(args: argparse.Namespace, program: Program) -> int:
    sizes = all_sizes(args, program)
    inputs = random_arguments(program, sizes, np.random.default_rng(args.seed))
    started = time.perf_counter()
    exe = compile_program(program, args.backend, **compile_options(args, sizes))
    compiled = exe.specialise(sizes)
    at = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "no sizes"
    print(
        f"{program.name} at {at}: target {exe.target}, {len(compiled.schedule.kernels)} kernel(s), "
        f"fusion={args.fusion}, compiled in {time.perf_counter() - started:.2f} s"
    )
    if args.check:
        _check(program, exe, inputs)
    times = []
    for k in range(args.repeat):
        progress.step(f"timed run {k + 1} of {args.repeat}")
        values = _copy(inputs)
        started = time.perf_counter()
        exe(**values)
        times.append(time.perf_counter() - started)
    copies = {"cuda": " (with host-device copies)", "cuda-sim": " (simulated on the CPU: not a GPU's time)"}.get(exe.target, "")
    print(f"time: median {_ms(statistics.median(times))} over {args.repeat} run(s), min {_ms(min(times))}{copies}")
    if args.profile:
        progress.step("--profile: an instrumented run")
        print(exe.profile(**_copy(inputs)))
    return 0


def random_arguments(program: Program, sizes: Mapping[str, int], rng: np.random.Generator) -> dict[str, Any]:
    """Every argument of ``program`` at ``sizes`` (arrays and scalars, random), plus the sizes by name."""
    values: dict[str, Any] = dict(sizes)
    for name in program.arguments:
        if name in program.scalars:
            values[name] = _random(program.scalars[name], (), rng)[()]  # a numpy scalar of the dtype
        else:
            array = program.arrays[name]
            values[name] = _random(array.dtype, array.concrete_shape(sizes), rng)
    return values


def _random(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype.is_float:
        return np.asarray(rng.uniform(0.5, 1.5, shape)).astype(dtype.numpy)
    magnitude = rng.integers(1, 8, shape)
    if np.issubdtype(np.dtype(dtype.numpy), np.unsignedinteger):
        return np.asarray(magnitude).astype(dtype.numpy)
    return np.asarray(magnitude * rng.choice(np.array([-1, 1]), shape)).astype(dtype.numpy)


def _copy(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}


def _check(program: Program, exe, inputs: Mapping[str, Any]) -> None:
    got, want = _copy(inputs), _copy(inputs)
    progress.step("--check: the compiled program")
    exe(**got)
    progress.step("--check: pf.reference (the sequential interpreter; slow at large sizes)")
    reference(program)(**want)
    failed = []
    for name in program.arguments:
        array = program.arrays.get(name)
        if array is None or array.role not in ("output", "inout"):
            continue
        rtol, atol = TOLERANCE.get(array.dtype.name, (1e-9, 1e-12))
        a, b = np.asarray(got[name]), np.asarray(want[name])
        with np.errstate(all="ignore"):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            diff[np.isnan(a) & np.isnan(b)] = 0.0
            rel = diff / np.maximum(np.abs(b.astype(np.float64)), np.finfo(np.float64).tiny)
            ok = bool(np.all(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)))
        abs_err = float(np.max(diff, initial=0.0))
        rel_err = float(np.max(np.where(diff == 0, 0.0, rel), initial=0.0))
        print(f"check {name}: max abs error {abs_err:.3g}, max rel error {rel_err:.3g}: {'PASS' if ok else 'FAIL'}")
        if not ok:
            failed.append(name)
    if failed:
        raise CheckFailed(f"{program.name}: {', '.join(failed)} differ(s) from pf.reference")
    print("check: PASS")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", dest="backend", choices=BENCH_TARGETS, default="c", help="which back end's benchmarks (default: c)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")


@command("bench", "run the benchmarks of a source checkout (python -m benchmarks run)", configure=_bench_arguments)
def bench(args: argparse.Namespace) -> int:
    runner = _benchmarks()
    return int(runner.main(["run", "--target", args.backend, *(["--quick"] if args.quick else [])]) or 0)


def _benchmarks():
    """``benchmarks/__main__.py`` of the checkout polyfuse runs from; an error where there is none."""
    folder = REPO_ROOT / "benchmarks"
    if not (folder / "__main__.py").is_file():
        raise PolyfuseError(f"polyfuse bench needs the benchmarks/ folder of a source checkout; there is none at {folder}")
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    spec = importlib.util.find_spec("benchmarks")
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if origin is None or origin.parent != folder:
        raise PolyfuseError(f"cannot import the benchmarks of {REPO_ROOT}: another 'benchmarks' module is on the path ({origin})")
    return importlib.import_module("benchmarks.__main__")
