"""The DNN workloads of ``benchmarks/workloads.py`` on CUDA: polyfuse against PyTorch eager, ``torch.compile``
and CuPy (``python -m benchmarks run --target cuda``; needs a GPU, torch and pycuda).

CUDA-event timings of polyfuse on torch tensors (``__cuda_array_interface__``) and of each baseline,
effective GB/s (compulsory bytes) or GFLOP/s, the ratio to each baseline, the device name, and the % of a
device-to-device copy's bandwidth measured in the same run. Writes ``dnn_cuda[_quick].{json,md}`` (and a
bar chart ``.png`` when matplotlib is installed) under ``--out`` (default: outside the source tree, see
:func:`benchmarks.versus.default_out`). The C back end's benchmark is :mod:`benchmarks.versus`.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import polyfuse as pf
from benchmarks.cuda_acceptance import Recorder, alternating_calls
from benchmarks.harness import machine
from benchmarks.versus import default_out
from benchmarks.workloads import GELU_C, WORKLOADS, Workload


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


def assert_close(got: np.ndarray, expected: np.ndarray, w: Workload, name: str) -> None:
    """Equal up to float32 rounding. The absolute tolerance scales with the largest expected magnitude: a
    float32 sum of many terms (3mm's 512-long dot products of dot products) is off by a few ulp of its
    largest partial sums, so an element that cancels to near zero cannot be held to ``rtol`` of itself."""
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=max(w.rtol, 1e-3), atol=1e-3 * max(1.0, scale), err_msg=f"{w.name}: {name}")


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


def _write(results: dict, stem: str, table: str, out: Path | None) -> None:
    folder = Path(out) if out is not None else default_out()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    (folder / f"{stem}.md").write_text(table)
    results["plot"] = plot(results, folder / f"{stem}.png")
    print(table)


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


def run_cuda(quick: bool = False, out: Path | None = None) -> dict:
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
        exe._last_call = None  # (the calls above are remembered; alternating from here, no call repeats one before it)
        alternating = alternating_calls(exe, tens, {k: v.clone() for k, v in tens.items()})
        row["polyfuse_new_tensors_ms"] = _cuda_ms(torch, alternating, repeats)
        compiled = exe.specialise(sizes)
        recorder = Recorder(compiled)
        recorder.record([sizes[a.name] if a.kind == "size" else tens[a.name] for a in compiled.code.signature])
        row["polyfuse_kernels_ms"] = _cuda_ms(torch, recorder.replay, repeats)  # the kernels alone, no Python host plan
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
        row["kernels_pct_of_copy_bandwidth"] = 100 * nbytes / (row["polyfuse_kernels_ms"] * 1e-3) / 1e9 / copy_gbps
        if w.flops is not None:
            row["polyfuse_GFLOPs"] = w.flops(sizes) / (row["polyfuse_ms"] * 1e-3) / 1e9
        for base in ("torch", "torch_compile", "cupy"):
            if f"{base}_ms" in row:
                row[f"speedup_vs_{base}"] = row[f"{base}_ms"] / row["polyfuse_ms"]
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)  # what a run cut short still reports
    results = {"benchmark": "dnn_cuda", "quick": quick, "device": torch.cuda.get_device_name(), "copy_GBps": copy_gbps,
               "machine": machine(), "rows": rows}
    lines = [f"# polyfuse DNN workloads on {results['device']} (CUDA){' (quick)' if quick else ''}", "",
             f"Device-to-device copy: {copy_gbps:.0f} GB/s (same run). CUDA-event medians of {repeats} runs after warm-up.", "",
             "polyfuse: calls on the same tensors (a repeated call, ``runtime/repeat.py``); new tensors: two sets "
             "alternated, so that every call is bound. The ratios (x) are to the first.", "",
             "| workload | kernels | polyfuse (ms) | new tensors (ms) | kernels alone (ms) | GB/s | % copy BW (kernels alone) | GFLOP/s | "
             "torch (ms) | x | torch.compile (ms) | x | cupy (ms) | x |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        def cell(base: str) -> str:
            return f"{r[f'{base}_ms']:.3f} | {r[f'speedup_vs_{base}']:.2f}x" if f"{base}_ms" in r else "n/a | "
        lines.append(f"| {r['workload']} | {r['kernels']} | {r['polyfuse_ms']:.3f} | {r.get('polyfuse_new_tensors_ms', math.nan):.3f} | "
                     f"{r['polyfuse_kernels_ms']:.3f} | {r['polyfuse_GBps']:.0f} | "
                     f"{r['pct_of_copy_bandwidth']:.0f}% ({r['kernels_pct_of_copy_bandwidth']:.0f}%) | {r.get('polyfuse_GFLOPs', math.nan):.0f} | {cell('torch')} | "
                     f"{cell('torch_compile')} | {cell('cupy')} |")
    _write(results, "dnn_cuda_quick" if quick else "dnn_cuda", "\n".join(lines) + "\n", out)
    return results
