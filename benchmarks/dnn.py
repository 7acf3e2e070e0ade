"""DNN and stencil workloads (``benchmarks/workloads.py``): polyfuse against numpy (C) and against PyTorch
eager, ``torch.compile`` and CuPy (CUDA).

C (``python -m benchmarks run``): each workload is compiled at its sizes (``fusion="smart"``), its result
checked against numpy, then numpy (float32, one operation at a time) and polyfuse are timed: median of
``REPEATS`` runs after warm-up (fewer at full size for the slow ones; the count is recorded per row).
CUDA (``--target cuda``, needs a GPU, torch and pycuda): CUDA-event timings of polyfuse on torch tensors
(``__cuda_array_interface__``) and of each baseline, effective GB/s (compulsory bytes) or GFLOP/s, the ratio
to each baseline, the device name, and the % of a device-to-device copy's bandwidth measured in the same run.

Writes ``results/dnn_<target>[_quick].{json,md}`` and a bar chart ``.png`` when matplotlib is installed.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import polyfuse as pf
from benchmarks.c_vs_numpy import machine
from benchmarks.workloads import GELU_C, WORKLOADS, Workload, np_heat_3d, np_jacobi_2d

TARGET = "c"
RESULTS = Path(__file__).resolve().parent / "results"


# ----- baselines, generic over numpy / cupy (float32 throughout) ------------------------------------------
def _gelu(xp, x):
    return 0.5 * x * (1.0 + xp.tanh(np.float32(GELU_C) * (x + np.float32(0.044715) * x * x * x)))


def _softmax(xp, x):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(xp, x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    c = x - mu
    return c / xp.sqrt((c * c).mean(axis=-1, keepdims=True) + np.float32(1e-5)) * g + b


XP_BASELINES: dict[str, Callable[..., dict]] = {
    "add_exp": lambda xp, a: {"y": xp.exp(a + np.float32(1))},
    "chain4": lambda xp, a, b, c: {"y": xp.tanh((a * b + c) * np.float32(0.5))},
    "bias_gelu_residual": lambda xp, x, b, r: {"y": _gelu(xp, x + b) + r},
    "softmax": lambda xp, x: {"y": _softmax(xp, x)},
    "layernorm": lambda xp, x, gamma, beta: {"y": _layernorm(xp, x, gamma, beta)},
    "matmul_bias_relu": lambda xp, x, w, b: {"y": xp.maximum(x @ w + b, np.float32(0))},
    "mlp": lambda xp, x, w1, b1, w2, b2: {"y": _gelu(xp, x @ w1 + b1) @ w2 + b2 + x},
    "attention": lambda xp, q, k: {"p": _softmax(xp, (q @ k.transpose(0, 2, 1)) * np.float32(0.125))},
    "two_mm": lambda xp, A, B, C, D0: {"D": ((A @ B) * np.float32(1.5)) @ C + D0 * np.float32(1.2)},
    "three_mm": lambda xp, A, B, C, D: {"G": (A @ B) @ (C @ D)},
}


def numpy_baseline(w: Workload, values: dict, sizes: dict) -> Callable[[], Any]:
    ins = {k: v for k, v in values.items() if k in w_inputs(w, values)}
    if w.name == "jacobi_2d":
        return lambda: np_jacobi_2d(ins["A"], ins["B"], sizes["T"])
    if w.name == "heat_3d":
        return lambda: np_heat_3d(ins["A"], ins["B"], sizes["T"])
    fn = XP_BASELINES[w.name]
    return lambda: fn(np, **ins)


def w_inputs(w: Workload, values: dict) -> set[str]:
    prog = w.program()
    return {n for n in values if prog.arrays[n].role in ("input", "inout")}


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _repeats(seconds_once: float, quick: bool) -> int:
    if quick:
        return 5
    return 20 if seconds_once < 0.5 else max(5, int(10 / seconds_once))


def assert_close(got: np.ndarray, expected: np.ndarray, w: Workload, name: str) -> None:
    """Equal up to float32 rounding. The absolute tolerance scales with the largest expected magnitude: a
    float32 sum of many terms (3mm's 512-long dot products of dot products) is off by a few ulp of its
    largest partial sums, so an element that cancels to near zero cannot be held to ``rtol`` of itself."""
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=max(w.rtol, 1e-3), atol=1e-3 * max(1.0, scale), err_msg=f"{w.name}: {name}")


def bench_c(w: Workload, quick: bool) -> dict:
    prog = w.program()
    sizes = dict(w.quick if quick else w.full)
    extra = {"T": sizes["T"]} if "T" in sizes else {}
    values = w.inputs(prog, sizes)
    expected = w.expected(prog, values, sizes)
    t0 = time.perf_counter()
    exe = pf.compile(prog, target="c", params=sizes)
    compile_s = time.perf_counter() - t0
    got = {k: v.copy() for k, v in values.items()}
    exe(**got, **extra)
    try:
        for name, e in expected.items():
            assert_close(got[name], e, w, name)
    except AssertionError as err:  # a wrong result is reported, never timed
        return {"workload": w.name, "description": w.description, "sizes": sizes, "kernels": len(exe.schedule.kernels),
                "error": "result differs from numpy: " + " ".join(str(err).split())[:300]}
    base = numpy_baseline(w, values, sizes)
    t0 = time.perf_counter()
    base()
    reps = _repeats(time.perf_counter() - t0, quick)
    numpy_s = median_seconds(base, reps)
    ours_s = median_seconds(lambda: exe(**got, **extra), reps)
    row = {
        "workload": w.name, "description": w.description, "sizes": sizes, "repeats": reps,
        "numpy_ms": numpy_s * 1e3, "polyfuse_ms": ours_s * 1e3, "speedup_vs_numpy": numpy_s / ours_s,
        "kernels": len(exe.schedule.kernels), "contracted": sorted(exe.schedule.contracted),
        "compile_s": compile_s, "compulsory_bytes": w.compulsory_bytes(prog, sizes),
    }
    row["polyfuse_GBps"] = row["compulsory_bytes"] / ours_s / 1e9
    if w.flops is not None:
        row["polyfuse_GFLOPs"] = w.flops(sizes) / ours_s / 1e9
        row["numpy_GFLOPs"] = w.flops(sizes) / numpy_s / 1e9
    return row


def to_markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        f"# polyfuse DNN workloads, C/OpenMP backend vs numpy{' (quick)' if results['quick'] else ''}", "",
        f"Machine: {m['platform']}, {m['processor']}, {m['cpu_count']} CPUs, numpy {m['numpy']}. float32. Median of "
        "the given number of runs after 2 warm-up runs; all rows from one run of `python -m benchmarks run"
        f"{' --quick' if results['quick'] else ''}`. Results checked against numpy before timing.", "",
        "| workload | sizes | runs | numpy (ms) | polyfuse C (ms) | speedup | kernels | polyfuse GB/s | GFLOP/s (polyfuse / numpy) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results["rows"]:
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        if "error" in r:
            lines.append(f"| {r['workload']} | {sizes} | | | **wrong result, not timed** | | {r['kernels']} | | |")
            continue
        fl = f"{r['polyfuse_GFLOPs']:.1f} / {r['numpy_GFLOPs']:.1f}" if "polyfuse_GFLOPs" in r else ""
        lines.append(f"| {r['workload']} | {sizes} | {r['repeats']} | {r['numpy_ms']:.2f} | {r['polyfuse_ms']:.2f} | "
                     f"{r['speedup_vs_numpy']:.2f}x | {r['kernels']} | {r['polyfuse_GBps']:.1f} | {fl} |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path, key: str = "speedup_vs_numpy", label: str = "speedup vs numpy") -> bool:
    """A bar chart of ``key`` per workload; False (and no file) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in results["rows"] if key in r]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar([r["workload"] for r in rows], [r[key] for r in rows])
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_ylabel(label)
    ax.set_yscale("log")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _write(results: dict, stem: str, table: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(table)
    results["plot"] = plot(results, RESULTS / f"{stem}.png")
    print(table)


def run(quick: bool = False) -> dict:
    """C backend vs numpy on every workload; writes ``results/dnn_c[_quick].{json,md,png}``."""
    results = {"benchmark": "dnn_c", "quick": quick, "machine": machine(), "rows": [bench_c(w, quick) for w in WORKLOADS]}
    table = to_markdown(results)
    errors = [f"- {r['workload']}: {r['error']}" for r in results["rows"] if "error" in r]
    if errors:
        table += "\nWrong results (not timed):\n" + "\n".join(errors) + "\n"
    _write(results, "dnn_c_quick" if quick else "dnn_c", table)
    return results


# ----- CUDA ---------------------------------------------------------------------------------------------
def _torch_baselines(torch) -> dict[str, Callable[..., dict]]:
    F = torch.nn.functional
    return {
        "add_exp": lambda a: {"y": torch.exp(a + 1)},
        "chain4": lambda a, b, c: {"y": torch.tanh((a * b + c) * 0.5)},
        "bias_gelu_residual": lambda x, b, r: {"y": F.gelu(x + b, approximate="tanh") + r},
        "softmax": lambda x: {"y": torch.softmax(x, dim=-1)},
        "layernorm": lambda x, gamma, beta: {"y": F.layer_norm(x, x.shape[-1:], gamma, beta, 1e-5)},
        "matmul_bias_relu": lambda x, w, b: {"y": torch.relu(x @ w + b)},
        "mlp": lambda x, w1, b1, w2, b2: {"y": F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2 + x},
        "attention": lambda q, k: {"p": torch.softmax((q @ k.transpose(1, 2)) * 0.125, dim=-1)},
        "two_mm": lambda A, B, C, D0: {"D": ((A @ B) * 1.5) @ C + D0 * 1.2},
        "three_mm": lambda A, B, C, D: {"G": (A @ B) @ (C @ D)},
    }


def _cuda_ms(torch, fn: Callable[[], Any], repeats: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_cuda(quick: bool = False) -> dict:
    """polyfuse CUDA vs PyTorch eager, torch.compile and CuPy; writes ``results/dnn_cuda[_quick].*``."""
    import torch  # noqa: PLC0415 (optional dependency of the CUDA benchmark only)

    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        cupy = None
    repeats = 10 if quick else 50
    dev = torch.device("cuda")
    n = (64 if quick else 256) * 2**20 // 4
    src, dst = torch.empty(n, device=dev), torch.empty(n, device=dev)
    copy_gbps = 2 * n * 4 / (_cuda_ms(torch, lambda: dst.copy_(src), repeats) * 1e-3) / 1e9
    torch_fns = _torch_baselines(torch)
    rows = []
    for w in WORKLOADS:
        if w.kind != "graph":
            continue  # the stencils' time loops have no single-call torch baseline here
        prog = w.program()
        sizes = dict(w.quick if quick else w.full)
        values = w.inputs(prog, sizes)
        expected = w.expected(prog, values, sizes)
        tens = {k: torch.from_numpy(v).to(dev) for k, v in values.items()}
        ins = {k: tens[k] for k in values if prog.arrays[k].role == "input"}
        exe = pf.compile(prog, target="cuda", params=sizes)
        exe(**tens)
        torch.cuda.synchronize()
        for name, e in expected.items():
            assert_close(tens[name].cpu().numpy(), e, w, name)
        row: dict[str, Any] = {"workload": w.name, "sizes": sizes, "kernels": len(exe.schedule.kernels)}
        row["polyfuse_ms"] = _cuda_ms(torch, lambda: exe(**tens), repeats)
        row["torch_ms"] = _cuda_ms(torch, lambda: torch_fns[w.name](**ins), repeats)
        try:
            compiled = torch.compile(torch_fns[w.name])
            row["torch_compile_ms"] = _cuda_ms(torch, lambda: compiled(**ins), repeats)
        except Exception as e:  # noqa: BLE001 - torch.compile needs triton and a compiler; record why it is missing
            row["torch_compile_error"] = f"{type(e).__name__}: {e}"[:200]
        if cupy is not None:
            cins = {k: cupy.asarray(v) for k, v in ins.items()}
            row["cupy_ms"] = _cuda_ms(torch, lambda: XP_BASELINES[w.name](cupy, **cins), repeats)
        nbytes = w.compulsory_bytes(prog, sizes)
        row["polyfuse_GBps"] = nbytes / (row["polyfuse_ms"] * 1e-3) / 1e9
        row["pct_of_copy_bandwidth"] = 100 * row["polyfuse_GBps"] / copy_gbps
        if w.flops is not None:
            row["polyfuse_GFLOPs"] = w.flops(sizes) / (row["polyfuse_ms"] * 1e-3) / 1e9
        for base in ("torch", "torch_compile", "cupy"):
            if f"{base}_ms" in row:
                row[f"speedup_vs_{base}"] = row[f"{base}_ms"] / row["polyfuse_ms"]
        rows.append(row)
    results = {"benchmark": "dnn_cuda", "quick": quick, "device": torch.cuda.get_device_name(), "copy_GBps": copy_gbps,
               "machine": machine(), "rows": rows}
    lines = [f"# polyfuse DNN workloads on {results['device']} (CUDA){' (quick)' if quick else ''}", "",
             f"Device-to-device copy: {copy_gbps:.0f} GB/s (same run). CUDA-event medians of {repeats} runs after warm-up.", "",
             "| workload | kernels | polyfuse (ms) | GB/s | % copy BW | GFLOP/s | torch (ms) | x | torch.compile (ms) | x | cupy (ms) | x |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        def cell(base: str) -> str:
            return f"{r[f'{base}_ms']:.3f} | {r[f'speedup_vs_{base}']:.2f}x" if f"{base}_ms" in r else "n/a | "
        lines.append(f"| {r['workload']} | {r['kernels']} | {r['polyfuse_ms']:.3f} | {r['polyfuse_GBps']:.0f} | "
                     f"{r['pct_of_copy_bandwidth']:.0f}% | {r.get('polyfuse_GFLOPs', math.nan):.0f} | {cell('torch')} | "
                     f"{cell('torch_compile')} | {cell('cupy')} |")
    _write(results, "dnn_cuda_quick" if quick else "dnn_cuda", "\n".join(lines) + "\n")
    return results
