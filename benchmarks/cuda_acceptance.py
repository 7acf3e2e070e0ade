"""Issue 12's GPU figures in one run (``python -m benchmarks.cuda_acceptance --out DIR``; needs a GPU, torch
and pycuda): gemm 2048³ f32 against cuBLAS through PyTorch (4096³ too with ``--large``), softmax / layernorm /
a sum to a scalar against the device-to-device copy bandwidth measured in the same run, the host time of a
call, and sweeps (``--sweep rows,gemm``) of the cooperative-row kernels' block size and unrolling and of the
CUDA register micro-tile's shape for gemm (block tile, thread tile, k step, stages, minimum blocks an SM),
so that the plans' constants rest on measurements.

Two times are taken for every polyfuse program, both with CUDA events:

* **call**: ``exe(**tensors)`` on torch tensors, as a user calls it (the Python host plan included);
* **kernels**: the launches of one call recorded and replayed back to back (``prepared_call`` in a loop),
  which is the GPU time of the generated kernels alone: the figure comparable with a library kernel.

Peers are timed the same way (back-to-back calls between two events) in interleaved rounds; ratios are
medians of the per-round ratios with their spread (min..max). Writes ``cuda_acceptance.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polyfuse as pf
from benchmarks.harness import machine
from benchmarks.workloads import BY_NAME
from examples.kernels import gemm_acc  # C = A @ B with a scalar accumulator

N, M, K = pf.params("N M K")

_TALL = {"block_rows": 128, "block_lanes": 64, "thread_rows": 8, "thread_lanes": 4}
_SQUARE = {"block_rows": 64, "block_lanes": 64, "thread_rows": 4, "thread_lanes": 4}
GEMM_SHAPES: list[dict | None] = [  # micro-tile plan fields (cuda_microtile.CudaMicroTile); None is the default plan
    None,  # rows x k tiles, 128 x 64, 8 x 4 a thread, k16, 3 stages: 105 registers, 25 % occupancy (0.72 of cuBLAS)
    {**_TALL, "k_major": False, "k_stage": 16, "stages": 3, "min_blocks": 3},  # 80 registers, 37.5 %
    {**_TALL, "k_major": False, "k_stage": 16, "stages": 2, "min_blocks": 3},
    {**_TALL, "k_major": False, "k_stage": 8, "stages": 4, "min_blocks": 0},  # 94 registers
    {**_TALL, "k_major": False, "k_stage": 8, "stages": 3, "min_blocks": 0},
    {"block_rows": 128, "block_lanes": 128, "thread_rows": 8, "thread_lanes": 8, "k_major": False, "k_stage": 16, "stages": 2,
     "min_blocks": 2},  # 128 registers
    {"block_rows": 128, "block_lanes": 128, "thread_rows": 8, "thread_lanes": 8, "k_major": False, "k_stage": 8, "stages": 3,
     "min_blocks": 2},
    # session 19's default, tiles k x width (A transposed on the copy): 64 registers, 50 % (0.63 on an H200)
    {**_TALL, "k_major": True, "k_stage": 8, "stages": 3, "min_blocks": 4},
    {**_SQUARE, "k_major": False, "k_stage": 16, "stages": 3, "min_blocks": 0},
]


def _shape_name(shape: dict | None) -> str:
    if shape is None:
        return "default"
    return (f"{shape['block_rows']}x{shape['block_lanes']} {shape['thread_rows']}x{shape['thread_lanes']} k{shape['k_stage']} "
            f"s{shape['stages']}{' min_blocks ' + str(shape['min_blocks']) if shape['min_blocks'] else ''}"
            f"{' k-major' if shape['k_major'] else ' rows x k'}")


@pf.program
def gemm_inplace(A: pf.f32[N, K], B: pf.f32[K, M], C: pf.f32[N, M]):
    """C = A @ B in the ``C[i, j] +=`` form."""
    for i in range(N):
        for j in range(M):
            C[i, j] = 0.0
            for k in range(K):
                C[i, j] += A[i, k] * B[k, j]


def _total() -> pf.Program:
    g = pf.Graph("total")
    return g.build(y=pf.ops.sum(g.input("x", (N,))))


# ----- timing -------------------------------------------------------------------------------------------
class Recorder:
    """Records the launches of one call of a CUDA executable so that they can be replayed without Python's
    host plan in between (the kernels' own GPU time)."""

    def __init__(self, compiled: Any) -> None:
        self.program = compiled.function  # runtime.cuda.CudaProgram
        self.launches: list[Callable[[], None]] = []

    def record(self, values: list) -> None:
        """Run one call, keeping each launch (kernel, grid, block, arguments) packed as the runtime packs it."""
        launchers = self.program._launchers
        saved = dict(launchers)
        launches = self.launches

        class Spy:
            def __init__(self, launcher: Any) -> None:
                self.launcher = launcher

            def __call__(self, grid: tuple, block: tuple, args: list) -> None:
                launches.append(self.launcher.packed(grid, block, list(args)))
                self.launcher(grid, block, args)

        try:
            for k, launcher in saved.items():
                launchers[k] = Spy(launcher)
            self.program(*values)
        finally:
            launchers.update(saved)
        if not launches:
            raise RuntimeError("recorded no launch: the runtime no longer launches through CudaProgram._launchers")

    def replay(self) -> None:
        for launch in self.launches:
            launch()


def alternating_calls(exe: Any, first: dict, second: dict) -> Callable[[], None]:
    """A call of ``exe`` on ``first`` and ``second`` by turns: a new set of tensors at every call, as fresh
    activations are, so that every call is bound (none repeats the one before it: ``runtime/repeat.py``)."""
    turns = [first, second]

    def call() -> None:
        turns.reverse()
        exe(**turns[0])

    return call


def _ms_per_call(torch: Any, fn: Callable[[], Any], inner: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / inner


def interleaved(torch: Any, fns: dict[str, Callable[[], Any]], rounds: int = 15, round_ms: float = 20.0) -> dict[str, list[float]]:
    """Per-round ms per call of every function, the functions taking turns in every round."""
    inner = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        one = _ms_per_call(torch, fn, 3)
        inner[name] = max(1, min(200, int(round_ms / max(one, 1e-3))))
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_ms_per_call(torch, fn, inner[name]))
    return times


def ratio(times: dict[str, list[float]], a: str, b: str) -> dict[str, float]:
    """Median, min and max of the per-round ratio ``time(a) / time(b)``."""
    r = [x / y for x, y in zip(times[a], times[b])]
    return {"median": statistics.median(r), "min": min(r), "max": max(r)}


def _compile(torch: Any, prog: pf.Program, sizes: dict, tensors: dict, **options: Any) -> tuple[Any, Recorder, float, list]:
    t0 = time.perf_counter()
    exe = pf.compile(prog, target="cuda", params=sizes, **options)
    compiled = exe.specialise(sizes)
    seconds = time.perf_counter() - t0
    values = [sizes[a.name] if a.kind == "size" else tensors[a.name] for a in compiled.code.signature]
    rec = Recorder(compiled)
    rec.record(values)
    torch.cuda.synchronize()
    return compiled, rec, seconds, values


def _resources(compiled: Any, sizes: dict) -> list[dict]:
    try:
        return [dataclasses.asdict(k) | {"kernel": k.kernel} for k in compiled.code.resources(sizes).kernels]
    except Exception as e:  # noqa: BLE001 - resources need ptxas; record why they are missing
        return [{"error": f"{type(e).__name__}: {e}"[:200]}]


# ----- the checks ---------------------------------------------------------------------------------------
def copy_bandwidth(torch: Any, nbytes: int = 1 << 30) -> float:
    """GB/s of a device-to-device copy counting bytes read and written."""
    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    t = interleaved(torch, {"copy": lambda: dst.copy_(src)}, rounds=10)
    return 2 * nbytes / (statistics.median(t["copy"]) * 1e-3) / 1e9


def gemm(torch: Any, n: int, rows: list[dict]) -> None:
    """Both forms at the default plan, against cuBLAS (FP32, TF32 off) and, for reference, cuBLAS in TF32."""
    sizes = {"N": n, "M": n, "K": n}
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand(n, n, device="cuda", generator=gen) - 0.5
    b = torch.rand(n, n, device="cuda", generator=gen) - 0.5
    want = torch.empty(n, n, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.mm(a, b, out=want)
    flops = 2.0 * n**3
    for prog in (gemm_inplace, gemm_acc):
        c = torch.zeros(n, n, device="cuda")
        compiled, rec, seconds, values = _compile(torch, prog, sizes, {"A": a, "B": b, "C": c})
        err = float((c - want).abs().max() / want.abs().max())
        out = torch.empty(n, n, device="cuda")

        def cublas() -> None:
            torch.mm(a, b, out=out)

        def tf32() -> None:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.mm(a, b, out=out)
            torch.backends.cuda.matmul.allow_tf32 = False

        t = interleaved(torch, {"kernels": rec.replay, "call": lambda: compiled.function(*values), "cublas": cublas, "cublas_tf32": tf32})
        med = {k: statistics.median(v) for k, v in t.items()}
        rows.append({"check": f"gemm {n}^3 f32 ({prog.name})", "sizes": sizes, "compile_s": seconds, "max_rel_err": err,
                     "ms": med, "tflops": {k: flops / (v * 1e-3) / 1e12 for k, v in med.items()},
                     "fraction_of_cublas": ratio(t, "cublas", "kernels"), "call_fraction_of_cublas": ratio(t, "cublas", "call"),
                     "fraction_of_cublas_tf32": ratio(t, "cublas_tf32", "kernels"),
                     "plan": str(next((k.microtile for k in compiled.schedule.kernels if k.microtile), None)),
                     "resources": _resources(compiled, sizes)})
        print(rows[-1]["check"], {k: round(v, 2) for k, v in rows[-1]["tflops"].items()}, rows[-1]["fraction_of_cublas"], flush=True)


def gemm_sweep(torch: Any, n: int, rows: list[dict]) -> None:
    """The micro-tile plan's shape varied (the scalar-accumulator form): TFLOP/s of the kernel alone."""
    km = importlib.import_module("polyfuse.schedule.mapping.kernels")
    original = km.sized_for_the_gpu
    sizes = {"N": n, "M": n, "K": n}
    a = torch.rand(n, n, device="cuda") - 0.5
    b = torch.rand(n, n, device="cuda") - 0.5
    want = a @ b
    out = torch.empty(n, n, device="cuda")
    fns: dict[str, Callable[[], Any]] = {"cublas": lambda: torch.mm(a, b, out=out)}
    info = {}
    for shape in GEMM_SHAPES:
        name = _shape_name(shape)
        if shape is not None:
            km.sized_for_the_gpu = lambda plan, *args, _f=shape, **kw: dataclasses.replace(plan, **_f)
        try:
            c = torch.zeros(n, n, device="cuda")
            compiled, rec, _, _ = _compile(torch, gemm_acc, sizes, {"A": a, "B": b, "C": c})
            info[name] = {"max_rel_err": float((c - want).abs().max() / want.abs().max()),
                          "resources": _resources(compiled, sizes)}
            fns[name] = rec.replay
        except Exception as e:  # noqa: BLE001 - a shape the printer or ptxas refuses is recorded, not fatal
            info[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        finally:
            km.sized_for_the_gpu = original
    t = interleaved(torch, fns, rounds=9)
    for name, v in info.items():
        if name in t:
            v["tflops"] = 2.0 * n**3 / (statistics.median(t[name]) * 1e-3) / 1e12
            v["fraction_of_cublas"] = ratio(t, "cublas", name)
    rows.append({"check": f"gemm {n}^3 micro-tile sweep", "shapes": info,
                 "cublas_tflops": 2.0 * n**3 / (statistics.median(t["cublas"]) * 1e-3) / 1e12})
    print(rows[-1]["check"], {k: round(v.get("tflops", 0), 1) for k, v in info.items()}, flush=True)


def row_kernels(torch: Any, copy_gbps: float, rows: list[dict]) -> None:
    """softmax and layernorm at two sizes, and a sum to a scalar, as % of the copy bandwidth."""
    F = torch.nn.functional
    cases = []
    for r, d in ((8192, 1024), (16384, 4096)):
        cases.append(("softmax", {"R": r, "D": d}, lambda x: torch.softmax(x, dim=-1)))
        cases.append(("layernorm", {"R": r, "D": d}, lambda x, gamma, beta: F.layer_norm(x, x.shape[-1:], gamma, beta, 1e-5)))
    cases.append(("total", {"N": 1 << 26}, lambda x: x.sum()))
    for name, sizes, peer in cases:
        prog = _total() if name == "total" else BY_NAME[name].program()
        ins = {}
        for arg in prog.arguments:
            arr = prog.arrays[arg]
            shape = arr.concrete_shape(sizes)
            ins[arg] = (torch.rand(shape, device="cuda") * 8 - 4) if arr.role == "input" else torch.zeros(shape, device="cuda")
        inputs = {k: v for k, v in ins.items() if prog.arrays[k].role == "input"}
        compiled, rec, seconds, values = _compile(torch, prog, sizes, ins)
        out_name = next(k for k in prog.arguments if prog.arrays[k].role != "input")
        want = peer(**inputs)
        err = float((ins[out_name] - want).abs().max() / want.abs().max().clamp_min(1e-30))
        nbytes = sum(v.numel() * v.element_size() for v in ins.values())
        t = interleaved(torch, {"kernels": rec.replay, "call": lambda: compiled.function(*values), "torch": lambda: peer(**inputs)})
        med = {k: statistics.median(v) for k, v in t.items()}
        rows.append({"check": f"{name} {sizes}", "sizes": sizes, "compile_s": seconds, "max_rel_err": err, "ms": med,
                     "pct_of_copy": {k: 100 * nbytes / (v * 1e-3) / 1e9 / copy_gbps for k, v in med.items()},
                     "torch_over_polyfuse": ratio(t, "torch", "kernels"), "kernels": len(compiled.schedule.kernels),
                     "launches": len(rec.launches), "resources": _resources(compiled, sizes)})
        print(rows[-1]["check"], {k: round(v, 1) for k, v in rows[-1]["pct_of_copy"].items()}, flush=True)


ROW_SWEEP = [  # (workload, sizes, threads per row, unroll, whole shares unrolled behind a guard where they fit)
    # Session 13 on an H100, % of copy, the plain loop under #pragma unroll: softmax 8192x1024, threads 32/64/128/256:
    # unroll 4 59/74/73/66 %, unroll 8 68/80/85/43 %; layernorm 8192x1024 unroll 4: 77/82/81/73 %, unroll 8 at 64/128
    # threads 79/84 %; softmax 16384x4096, 256 threads: unroll 4 86 %, 8 95 % (512 threads: 82/93 %); 8192x2048,
    # 256 threads: 90/92 %; 8192x1000, 128 threads: 51 % unrolled 4 or 8 (the shorter threads in the remainder loop).
    *[(name, {"R": 8192, "D": 1024}, threads, 8, False) for name in ("softmax", "layernorm") for threads in (64, 128, 256)],
    ("softmax", {"R": 8192, "D": 1000}, 128, 8, True),
]


def row_sweep(torch: Any, copy_gbps: float, rows: list[dict]) -> None:
    """Cooperative-row kernels with the block size (threads per row) and the cyclic loops' unroll varied:
    % of the copy bandwidth of the kernel alone, so that ``rows.block_size`` rests on measurements."""
    rm = importlib.import_module("polyfuse.schedule.mapping.rows")
    cr = importlib.import_module("polyfuse.codegen.cuda_rows")
    size, unroll, full_unroll = rm.block_size, rm.row_unroll, cr.FULL_UNROLL
    info: dict[str, dict] = {}
    for name, sizes, threads, u, full in ROW_SWEEP:
        key = f"{name} {sizes['R']}x{sizes['D']} threads {threads} unroll {u}{' (whole share, guarded)' if full else ''}"
        rm.block_size = lambda length, _b=threads, **_: _b
        rm.row_unroll = lambda length, threads, _u=u: _u
        cr.FULL_UNROLL = full_unroll if full else 0
        try:
            prog = BY_NAME[name].program()
            ins = {}
            for arg in prog.arguments:
                arr = prog.arrays[arg]
                ins[arg] = torch.rand(arr.concrete_shape(sizes), device="cuda") * 8 - 4
            compiled, rec, _, _ = _compile(torch, prog, sizes, ins)
            nbytes = sum(v.numel() * v.element_size() for v in ins.values())
            t = interleaved(torch, {"kernels": rec.replay}, rounds=5)
            info[key] = {"pct_of_copy": 100 * nbytes / (statistics.median(t["kernels"]) * 1e-3) / 1e9 / copy_gbps,
                         "block": [k.block for k in compiled.schedule.kernels], "resources": _resources(compiled, sizes)}
        except Exception as e:  # noqa: BLE001 - record and go on
            info[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
        finally:
            rm.block_size, rm.row_unroll, cr.FULL_UNROLL = size, unroll, full_unroll
        print(key, round(info[key].get("pct_of_copy", -1), 1), flush=True)
    rows.append({"check": "row kernels sweep", "rows_sweep": info})


ELEMENT_SWEEP = [(1024, 1), (128, 8), (256, 4), (256, 8), (512, 8), (256, 16)]
"""(threads, iterations a thread) of the element-wise kernels (``mapping/element_share.py``); (1024, 1) is
the mapping before it: one element a thread in blocks of 1024."""


def element_sweep(torch: Any, copy_gbps: float, rows: list[dict]) -> None:
    """Element-wise kernels (add_exp, chain4 at 4096 x 4096) with the block's threads and each thread's
    share of the innermost loop varied: % of the copy bandwidth of the kernel alone."""
    es = importlib.import_module("polyfuse.schedule.mapping.element_share")
    saved = es.THREADS, es.SHARE
    info: dict[str, dict] = {}
    for name in ("add_exp", "chain4"):
        sizes = {"R": 4096, "D": 4096}
        prog = BY_NAME[name].program()
        ins = {a: torch.rand(prog.arrays[a].concrete_shape(sizes), device="cuda") * 2 - 1 for a in prog.arguments}
        nbytes = sum(v.numel() * v.element_size() for v in ins.values())
        fns = {}
        for threads, share in ELEMENT_SWEEP:
            key = f"{name} 4096x4096 threads {threads} share {share}"
            es.THREADS, es.SHARE = threads, share
            try:
                compiled, rec, _, _ = _compile(torch, prog, sizes, ins)
                fns[key] = rec.replay
                info[key] = {"block": [k.block for k in compiled.schedule.kernels], "resources": _resources(compiled, sizes)}
            except Exception as e:  # noqa: BLE001 - record and go on
                info[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
            finally:
                es.THREADS, es.SHARE = saved
        t = interleaved(torch, fns, rounds=7)
        for key, v in t.items():
            info[key]["pct_of_copy"] = 100 * nbytes / (statistics.median(v) * 1e-3) / 1e9 / copy_gbps
            print(key, round(info[key]["pct_of_copy"], 1), flush=True)
    rows.append({"check": "element-wise sweep", "rows_sweep": info})


def host_overhead(torch: Any, rows: list[dict]) -> None:
    """Microseconds of host (Python) time per call: ``exe(**tensors)`` as a user calls it, on the same
    tensors again (a repeated call: ``runtime/repeat.py``) and on a new set at each call (bound each time),
    and the loaded program's ``function(*values)``, on sizes small enough that the GPU never holds the host
    back, with the top of a cProfile of the calls on new tensors (what to shorten next)."""
    import cProfile  # noqa: PLC0415
    import io  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    for name, sizes in (("softmax", {"R": 64, "D": 256}), ("mlp", {"M": 64, "K": 64, "H": 128})):
        prog = BY_NAME[name].program()
        tens = {a: torch.rand(prog.arrays[a].concrete_shape(sizes), device="cuda") for a in prog.arguments}
        exe = pf.compile(prog, target="cuda", params=sizes)
        compiled = exe.specialise(sizes)
        values = [sizes[a.name] if a.kind == "size" else tens[a.name] for a in compiled.code.signature]
        alternating = alternating_calls(exe, tens, {a: torch.rand_like(t) for a, t in tens.items()})
        found = {}
        for what, fn in (("exe_us", lambda: exe(**tens)), ("exe_new_tensors_us", alternating),
                         ("function_us", lambda: compiled.function(*values))):
            exe._last_call = None  # (forget the calls on ``tens``: alternating, no call then repeats the one before it)
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(500):
                fn()
            found[what] = (time.perf_counter() - t0) / 500 * 1e6
            torch.cuda.synchronize()
        exe._last_call = None
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            alternating()
        prof.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
        rows.append({"check": f"host time per call, {name} {sizes}", **found, "launches": len(compiled.code.launch.launches()),
                     "profile": text.getvalue()[-4000:]})
        print(rows[-1]["check"], {k: round(v, 1) for k, v in found.items()}, flush=True)


def _table(results: dict) -> str:
    lines = [f"# Issue 12 on {results['device']}", "",
             f"Device-to-device copy: {results['copy_GBps']:.0f} GB/s (bytes read + written), same run.", "",
             "| check | polyfuse kernels | polyfuse call | peer | ratio (median, min..max) |", "|---|---:|---:|---:|---|"]
    for r in results["rows"]:
        if "tflops" in r and "fraction_of_cublas" in r:
            f = r["fraction_of_cublas"]
            lines.append(f"| {r['check']} | {r['tflops']['kernels']:.1f} TFLOP/s | {r['tflops']['call']:.1f} TFLOP/s | "
                         f"cuBLAS {r['tflops']['cublas']:.1f} (TF32 {r['tflops']['cublas_tf32']:.1f}) | "
                         f"{f['median']:.2f} of cuBLAS ({f['min']:.2f}..{f['max']:.2f}) |")
        elif "pct_of_copy" in r:
            p, f = r["pct_of_copy"], r["torch_over_polyfuse"]
            lines.append(f"| {r['check']} | {p['kernels']:.0f} % of copy | {p['call']:.0f} % | torch {p['torch']:.0f} % | "
                         f"torch / polyfuse {f['median']:.2f} ({f['min']:.2f}..{f['max']:.2f}) |")
        elif "exe_us" in r:
            lines.append(f"| {r['check']} | exe(**tensors) {r['exe_us']:.1f} µs, new tensors each call "
                         f"{r.get('exe_new_tensors_us', float('nan')):.1f} µs | function(*values) {r['function_us']:.1f} µs | | |")
        elif "rows_sweep" in r:
            for name, v in r["rows_sweep"].items():
                what = f"{v['pct_of_copy']:.0f} % of copy" if "pct_of_copy" in v else v.get("error", "")
                lines.append(f"| sweep {name} | {what} | | | |")
        elif "shapes" in r:
            for name, v in r["shapes"].items():
                regs = [x.get("registers") for x in v.get("resources", []) if "registers" in x]
                what = f"{v['tflops']:.1f} TFLOP/s, {v['fraction_of_cublas']['median']:.2f} of cuBLAS" if "tflops" in v else v.get("error", "")
                lines.append(f"| sweep {name} | {what} | registers {regs} | cuBLAS {r['cublas_tflops']:.1f} | |")
    return "\n".join(lines) + "\n"


def run(out: Path, sweep: str = "rows,gemm,elements", large: bool = False) -> dict:
    import torch  # noqa: PLC0415 - the GPU benchmark's own dependency

    rows: list[dict] = []
    copy = copy_bandwidth(torch)
    print(f"copy {copy:.0f} GB/s", flush=True)
    results = {"benchmark": "cuda_acceptance", "device": torch.cuda.get_device_name(), "copy_GBps": copy, "machine": machine(),
               "torch": torch.__version__, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    steps = [lambda: gemm(torch, 2048, rows), lambda: row_kernels(torch, copy, rows), lambda: host_overhead(torch, rows)]
    if "rows" in sweep:
        steps.append(lambda: row_sweep(torch, copy, rows))
    if "gemm" in sweep:
        steps.append(lambda: gemm_sweep(torch, 2048, rows))
    if "elements" in sweep:
        steps.append(lambda: element_sweep(torch, copy, rows))
    if large:
        steps.append(lambda: gemm(torch, 4096, rows))
    for step in steps:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - keep what the other checks measured
            rows.append({"check": "error", "error": f"{type(e).__name__}: {e}"[:500]})
            print("error:", rows[-1]["error"], flush=True)
        (out / "cuda_acceptance.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        (out / "cuda_acceptance.md").write_text(_table(results))
    print(_table(results))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sweep", default="rows,gemm,elements", help="the sweeps to run (rows, gemm, elements; all by default) or none")
    parser.add_argument("--large", action="store_true", help="gemm at 4096^3 as well")
    args = parser.parse_args()
    run(args.out, sweep=args.sweep, large=args.large)
