"""The C/OpenMP back end against numpy on memory-bound elementwise programs.

numpy evaluates an expression one operation at a time, each a full pass over memory with a temporary array;
polyfuse fuses the statements into one loop nest and contracts the temporaries to scalars, so the data
crosses memory once. Both sides run on the same float32 arrays; each time is the median of ``REPEATS`` runs
after a warm-up. The polyfuse time is that of the fastest fusion policy (each policy's time is recorded).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import examples.kernels as corpus
import polyfuse as pf

TARGET = "c"
RESULTS = Path(__file__).resolve().parent / "results"
FUSION_POLICIES = ("none", "max", "smart")
N, M = pf.params("N M")


@pf.program
def chain4(A: pf.f32[N, M], B: pf.f32[N, M], C: pf.f32[N, M], D: pf.f32[N, M]):
    """D = tanh((A * B + C) * 0.5), written as four statements through three temporaries."""
    T1 = pf.empty((N, M), pf.f32)
    T2 = pf.empty((N, M), pf.f32)
    T3 = pf.empty((N, M), pf.f32)
    for i in range(N):
        for j in range(M):
            T1[i, j] = A[i, j] * B[i, j]
    for i in range(N):
        for j in range(M):
            T2[i, j] = T1[i, j] + C[i, j]
    for i in range(N):
        for j in range(M):
            T3[i, j] = T2[i, j] * 0.5
    for i in range(N):
        for j in range(M):
            D[i, j] = pf.tanh(T3[i, j])


def numpy_add_exp(A: np.ndarray, C: np.ndarray) -> None:
    np.exp(A + np.float32(1.0), out=C)


def numpy_chain4(A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray) -> None:
    np.tanh((A * B + C) * np.float32(0.5), out=D)


CASES: tuple[tuple[pf.Program, Callable[..., None], tuple[str, ...]], ...] = (
    (corpus.add_exp, numpy_add_exp, ("C",)),
    (chain4, numpy_chain4, ("D",)),
)


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after ``warmup`` unmeasured runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_case(prog: pf.Program, reference: Callable[..., None], outputs: tuple[str, ...], n: int, repeats: int) -> dict:
    """numpy and every fusion policy of polyfuse on one program at ``n x n``; outputs are cross-checked."""
    rng = np.random.default_rng(0)
    inputs = {a: rng.uniform(-1, 1, (n, n)).astype(np.float32) for a in prog.arguments if a not in outputs}
    expected = {o: np.empty((n, n), np.float32) for o in outputs}
    numpy_s = median_seconds(lambda: reference(**inputs, **expected), repeats)
    per_policy: dict[str, dict] = {}
    for fusion in FUSION_POLICIES:
        got = {o: np.empty((n, n), np.float32) for o in outputs}
        exe = pf.compile(prog, target="c", fusion=fusion, params={"N": n, "M": n})
        seconds = median_seconds(lambda: exe(**inputs, **got), repeats)
        for o in outputs:
            np.testing.assert_allclose(got[o], expected[o], rtol=1e-4, atol=1e-5)
        per_policy[fusion] = {"ms": seconds * 1e3, "kernels": len(exe.schedule.kernels),
                              "contracted": sorted(exe.schedule.contracted)}
    best = min(per_policy, key=lambda f: per_policy[f]["ms"])
    return {
        "program": prog.name, "size": [n, n], "dtype": "f32",
        "numpy_ms": numpy_s * 1e3, "polyfuse_ms": per_policy[best]["ms"], "best_policy": best,
        "speedup_vs_numpy": numpy_s * 1e3 / per_policy[best]["ms"], "policies": per_policy,
    }


def machine() -> dict:
    """What the numbers were measured on."""
    return {
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
    }


def to_markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# polyfuse C/OpenMP backend vs numpy",
        "",
        f"Machine: {m['platform']}, {m['processor']}, {m['cpu_count']} CPUs (os.cpu_count), numpy {m['numpy']}. "
        f"Median of {results['repeats']} runs after warm-up; all numbers from one run of `python -m benchmarks run"
        f"{' --quick' if results['quick'] else ''}`.",
        "",
        "| program | size | numpy (ms) | polyfuse C (ms) | best fusion | kernels | speedup vs numpy |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for r in results["cases"]:
        best = r["policies"][r["best_policy"]]
        lines.append(
            f"| {r['program']} | {r['size'][0]}x{r['size'][1]} {r['dtype']} | {r['numpy_ms']:.2f} | {r['polyfuse_ms']:.2f} "
            f"| {r['best_policy']} | {best['kernels']} | {r['speedup_vs_numpy']:.2f}x |"
        )
    lines += ["", "Per fusion policy (ms): " + "; ".join(
        f"{r['program']}: " + ", ".join(f"{f} {p['ms']:.2f}" for f, p in r["policies"].items()) for r in results["cases"]), ""]
    return "\n".join(lines)


def run(quick: bool = False) -> dict:
    """Measure every case, write ``results/c_vs_numpy[_quick].{json,md}``, print the table, return the results."""
    n, repeats = (512, 5) if quick else (4096, 7)
    results = {"benchmark": "c_vs_numpy", "quick": quick, "repeats": repeats, "machine": machine(),
               "cases": [bench_case(p, ref, outs, n, repeats) for p, ref, outs in CASES]}
    stem = "c_vs_numpy_quick" if quick else "c_vs_numpy"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    table = to_markdown(results)
    (RESULTS / f"{stem}.md").write_text(table)
    print(table)
    return results
