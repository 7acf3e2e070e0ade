"""Static evidence for the CUDA back end, no GPU needed: ``python -m benchmarks cuda-static [--out DIR] [--arch sm_90]``
(also ``make bench-cuda-static``).

For every DNN workload (its full sizes) and every PolyBench-style kernel (LARGE), the CUDA code polyfuse
generates is compiled with ``ptxas -v`` (``Code.resources()``): per kernel the registers, spills, shared
memory, the largest block and grid launched at those sizes, and the theoretical occupancy on the
architecture. Next to it the schedule's modelled global-memory bytes (``sched.traffic()``), the
workload's FLOPs where known, and the time they imply on an H100 (SXM: 3.35 TB/s, 67 TFLOP/s FP32) at
the roofline. Kernels that run on one thread, launch fewer blocks than the H100's 132 SMs, spill, or
reach under 50 % occupancy are flagged. Results: ``cuda_static.json`` and ``cuda_static.md``.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import re
import time
from pathlib import Path
from typing import Any

import polyfuse as pf
from benchmarks.polybench import SIZES as PB_SIZES
from benchmarks.polybench import default_out
from benchmarks.workloads import WORKLOADS
from tests.kernels import BY_NAME

H100_BYTES_PER_S = 3.35e12
H100_FLOPS = 67e12
H100_SMS = 132


def _programs() -> list[tuple[str, pf.Program, dict[str, int], Any]]:
    out = []
    for w in WORKLOADS:
        out.append((w.name, w.program(), dict(w.full), w))
    for name in PB_SIZES:
        k = BY_NAME[name]
        prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
        dims = PB_SIZES[name]["LARGE"]
        out.append((f"polybench {name}", prog, {p: dims[p.upper()] for p in prog.params}, None))
    return out


def _flags(k: Any) -> list[str]:
    flags = []
    if k.threads == 1 and k.blocks == 1:
        flags.append("one thread")
    elif k.blocks is not None and k.blocks < H100_SMS:
        flags.append(f"{k.blocks} blocks < {H100_SMS} SMs")
    if k.spill_stores or k.spill_loads:
        flags.append("spills")
    if k.occupancy is not None and k.occupancy < 0.5:
        flags.append(f"occupancy {k.occupancy:.0%} ({k.limiter})")
    return flags


def run(out: Path | None = None, arch: str = "sm_90") -> dict:
    started = time.time()
    rows = []
    for label, prog, sizes, workload in _programs():
        sched = pf.schedule(prog, target="cuda", params=sizes)
        code = pf.codegen(sched)
        res = code.resources(sizes, arch)
        try:
            traffic = sched.traffic()
            per_kernel = {f"{prog.name}_k{n}": traffic.per_kernel[k.name].total_bytes
                          for n, k in enumerate(sched.kernels) if k.name in traffic.per_kernel}
            total = traffic.total_bytes
        except pf.PolyfuseError:
            per_kernel, total = {}, None
        flops = workload.flops(sizes) if workload is not None and workload.flops is not None else None
        compulsory = workload.compulsory_bytes(prog, sizes) if workload is not None else None
        roofline = max(total / H100_BYTES_PER_S if total else 0.0, flops / H100_FLOPS if flops else 0.0) * 1e3 if total else None
        kernels = []
        for k in res.kernels:
            base = re.sub(r"(_k\d+)_\d+$", r"\1", k.kernel)  # (a kernel launched from two places: <name>_k3_1)
            row = dataclasses.asdict(k) | {"modelled_bytes": per_kernel.get(base), "flags": _flags(k)}
            kernels.append(row)
        rows.append({"program": label, "sizes": sizes, "kernels": kernels, "modelled_bytes": total, "compulsory_bytes": compulsory,
                     "flops": flops, "h100_roofline_ms": roofline})
    results = {"benchmark": "cuda_static", "arch": arch, "h100": {"bytes_per_s": H100_BYTES_PER_S, "flops": H100_FLOPS, "sms": H100_SMS},
               "machine": {"platform": platform.platform(), "python": platform.python_version()},
               "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "rows": rows}
    lines = [f"# CUDA static evidence ({arch}, ptxas -v; no GPU needed)", "",
             f"`python -m benchmarks cuda-static`, {results['started']}. Per kernel: registers, spill stores/loads (bytes), static "
             "shared memory, the largest block and grid at the sizes, launches, theoretical occupancy (limiter). Per program: "
             "modelled global bytes (`sched.traffic()`), compulsory bytes and FLOPs where the workload defines them, and the H100 "
             f"roofline time they imply ({H100_BYTES_PER_S / 1e12:.2f} TB/s, {H100_FLOPS / 1e12:.0f} TFLOP/s FP32).", "",
             "| program | kernel | regs | spill B | smem B | threads | blocks | launches | occupancy | flags |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    flagged = {"one thread": 0, "blocks": 0, "spills": 0, "occupancy": 0}
    for r in rows:
        extra = []
        if r["modelled_bytes"] is not None:
            extra.append(f"{r['modelled_bytes'] / 1e6:.1f} MB modelled")
        if r["compulsory_bytes"]:
            extra.append(f"{r['compulsory_bytes'] / 1e6:.1f} MB compulsory")
        if r["flops"]:
            extra.append(f"{r['flops'] / 1e9:.1f} GFLOP")
        if r["h100_roofline_ms"] is not None:
            extra.append(f"H100 roofline {r['h100_roofline_ms']:.3f} ms")
        lines.append(f"| **{r['program']}** | {', '.join(extra) or '-'} | | | | | | | | |")
        for k in r["kernels"]:
            occ = f"{k['occupancy']:.0%}" if k["occupancy"] is not None else "-"
            lines.append(f"| | {k['kernel']} | {k['registers']} | {k['spill_stores']}/{k['spill_loads']} | {k['shared']} | "
                         f"{k['threads'] if k['threads'] is not None else '-'} | {k['blocks'] if k['blocks'] is not None else '-'} | "
                         f"{k['launches'] if k['launches'] is not None else '-'} | {occ} | {'; '.join(k['flags'])} |")
            for f in k["flags"]:
                key = next((x for x in flagged if x in f), None)
                if key:
                    flagged[key] += 1
    n = sum(len(r["kernels"]) for r in rows)
    lines += ["", f"{n} kernels: {flagged['one thread']} on one thread, {flagged['blocks']} with fewer blocks than SMs, "
                  f"{flagged['spills']} spilling, {flagged['occupancy']} under 50 % occupancy."]
    results["summary"] = {"kernels": n, **flagged}
    folder = Path(out) if out is not None else default_out()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cuda_static.json").write_text(json.dumps(results, indent=2) + "\n")
    (folder / "cuda_static.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return results


__all__ = ["run"]
