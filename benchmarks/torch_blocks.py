"""PyTorch blocks through ``torch.compile(model, backend="polyfuse")`` against eager PyTorch and
``torch.compile`` with Inductor, on the CPU.

Usage: ``python -m benchmarks.torch_blocks [--size quick|bert] [--rounds R] [--threads T] [--out FILE]``.

Blocks (``--size bert``: a BERT-base layer, hidden 768, 12 heads, sequence 128, batch 1):

* ``mlp``: Linear(768, 3072) -> GELU -> Linear(3072, 768) on (batch, seq, 768);
* ``encoder_layer``: ``nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu", batch_first=True)``
  in eval mode (its inference fast path, which polyfuse spells out in ``pf.ops``);
* ``conv_bn_relu``: Conv2d(64, 64, 3, padding=1) -> BatchNorm2d (eval) -> ReLU on (batch, 64, 56, 56).

Method: every implementation is compiled and checked against eager first (max |error| recorded), then
timed in interleaved rounds: in each round each implementation runs ``calls`` times back to back (after
one warm-up call) and its median call time is that round's time. Ratios are paired per round
(``eager / polyfuse``, ``inductor / polyfuse``: above 1 means polyfuse is faster) and reported as the
median over rounds with the min and max. Every implementation uses ``--threads`` threads (torch's intra-op
pool and polyfuse's OpenMP). Compile times and polyfuse's fusion (the policy taken and kernels per
compiled partition) are recorded. Results go to ``--out`` (JSON, plus a Markdown table beside it), by
default under the system's temporary directory, outside the tracked tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = {
    "quick": dict(d=32, heads=4, ff=64, seq=8, batch=1, channels=4, hw=8),
    "bert": dict(d=768, heads=12, ff=3072, seq=128, batch=1, channels=64, hw=56),
}


def blocks(size: dict[str, int]) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    d, b, s = size["d"], size["batch"], size["seq"]
    mlp = nn.Sequential(nn.Linear(d, size["ff"]), nn.GELU(), nn.Linear(size["ff"], d)).eval()
    layer = nn.TransformerEncoderLayer(d, size["heads"], size["ff"], dropout=0.1, activation="gelu", batch_first=True).eval()
    c = size["channels"]
    conv = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()).eval()
    with torch.no_grad():
        conv[1].running_mean.uniform_(-0.5, 0.5)
        conv[1].running_var.uniform_(0.5, 1.5)
    return {
        "mlp": (mlp, (torch.randn(b, s, d),)),
        "encoder_layer": (layer, (torch.randn(b, s, d),)),
        "conv_bn_relu": (conv, (torch.randn(b, c, size["hw"], size["hw"]),)),
    }


def _median_call(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_block(name: str, model: Any, inputs: tuple[Any, ...], rounds: int, calls: int, time_limit: float | None) -> dict[str, Any]:
    import torch

    import polyfuse as pf
    from polyfuse.frontend.torch.report import partitions

    impls: dict[str, Callable[[], Any]] = {}
    row: dict[str, Any] = {"block": name, "input_shapes": [list(x.shape) for x in inputs], "compile_s": {}, "max_abs_error": {}}
    with torch.no_grad():
        want = model(*inputs)
        for impl, make in (("eager", lambda: model),
                           ("inductor", lambda: torch.compile(model, backend="inductor")),
                           ("polyfuse", lambda: torch.compile(model, backend="polyfuse", options={"schedule_time_limit": time_limit}))):
            torch._dynamo.reset()
            pf.torch_report(reset=True)
            partitions(reset=True)
            t = time.perf_counter()
            fn = make()
            got = fn(*inputs)  # compiles on the first call
            row["compile_s"][impl] = round(time.perf_counter() - t, 2)
            row["max_abs_error"][impl] = float((got - want).abs().max())
            if impl == "polyfuse":
                row["report"] = pf.torch_report(reset=True)
                row["partitions"] = partitions(reset=True)
            impls[impl] = (lambda f=fn: f(*inputs))
        per_round: dict[str, list[float]] = {k: [] for k in impls}
        for _ in range(rounds):
            for impl, fn in impls.items():
                fn()  # warm-up
                per_round[impl].append(_median_call(fn, calls))
    row["median_ms"] = {k: round(statistics.median(v) * 1e3, 3) for k, v in per_round.items()}
    row["ratios"] = {}
    for base in ("eager", "inductor"):
        r = [b / p for b, p in zip(per_round[base], per_round["polyfuse"])]
        row["ratios"][f"{base}/polyfuse"] = {"median": round(statistics.median(r), 3), "min": round(min(r), 3), "max": round(max(r), 3)}
    return row


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# polyfuse torch blocks ({result['size']}, {result['threads']} thread(s), {result['rounds']} rounds x {result['calls']} calls)",
             "", f"machine: {result['machine']}; torch {result['torch']}", "",
             "| block | eager ms | inductor ms | polyfuse ms | eager/polyfuse (min-max) | inductor/polyfuse (min-max) | polyfuse kernels / statements (fusion) | compile s (inductor, polyfuse) | max abs err |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        m, q = r["median_ms"], r["ratios"]
        parts = ", ".join(f"{p['kernels']}/{p['statements']} ({p['fusion']})" for p in r.get("partitions", [])) or "-"
        ratio = lambda k: f"{q[k]['median']:.2f} ({q[k]['min']:.2f}-{q[k]['max']:.2f})"  # noqa: E731
        lines.append(f"| {r['block']} | {m['eager']:.3f} | {m['inductor']:.3f} | {m['polyfuse']:.3f} | {ratio('eager/polyfuse')} | "
                     f"{ratio('inductor/polyfuse')} | {parts} | {r['compile_s']['inductor']}, {r['compile_s']['polyfuse']} | "
                     f"{r['max_abs_error']['polyfuse']:.2e} |")
    lines.append("")
    lines.append("Ratios above 1: polyfuse is faster. Each ratio is the median over rounds of paired per-round times.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.torch_blocks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="bert")
    parser.add_argument("--only", help="comma-separated blocks (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="calls per implementation per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per polyfuse scheduler run (0: unbounded)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "polyfuse_torch_blocks.json")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # polyfuse's OpenMP code reads it when it first runs
    import torch

    torch.set_num_threads(args.threads)
    chosen = blocks(SIZES[args.size])
    names = args.only.split(",") if args.only else list(chosen)
    result: dict[str, Any] = {"size": args.size, "sizes": SIZES[args.size], "threads": args.threads, "rounds": args.rounds,
                              "calls": args.calls, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
                              "torch": torch.__version__, "rows": []}
    for name in names:
        model, inputs = chosen[name]
        row = run_block(name, model, inputs, args.rounds, args.calls, args.time_limit or None)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
