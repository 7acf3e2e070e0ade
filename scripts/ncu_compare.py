"""Compare the traffic model with Nsight Compute's DRAM counters, kernel by kernel.

UNTESTED: written without a GPU. Usage (on a machine with CUDA, pycuda and ``ncu`` on PATH)::

    python scripts/ncu_compare.py examples/kernels.py::gemm --size N=2048,M=2048,K=2048

It compiles the program for CUDA at the sizes, runs it once under
``ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv``, and prints, per kernel, the modelled
read / write bytes (``Schedule.traffic()``) next to the measured ones and their ratio.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys

METRICS = "dram__bytes_read.sum,dram__bytes_write.sum"


def _child(spec: str, sizes: dict[str, int]) -> None:
    """Run the program once (inside ncu)."""
    import numpy as np

    import polyfuse as pf
    from polyfuse.cli.loading import load_program

    prog = load_program(spec)
    exe = pf.compile(prog, target="cuda")
    args = {}
    for name, arr in prog.arrays.items():
        if arr.role != "temp":
            args[name] = np.random.rand(*arr.concrete_shape(sizes)).astype(arr.dtype.numpy)
    for name in prog.scalars:
        args[name] = 1.0
    exe(**args, **{k: v for k, v in sizes.items() if k not in args})


def _to_bytes(value: str, unit: str) -> float:
    scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(unit, 1)
    return float(value.replace(",", "")) * scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("--size", required=True)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = {k: int(v) for k, v in (kv.split("=") for kv in a.size.split(","))}
    if a.child:
        _child(a.spec, sizes)
        return 0
    import polyfuse as pf
    from polyfuse.cli.loading import load_program

    sched = pf.schedule(load_program(a.spec), target="cuda", params=sizes)
    report = sched.traffic()
    cmd = ["ncu", "--metrics", METRICS, "--csv", sys.executable, __file__, a.spec, "--size", a.size, "--child"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [r for r in csv.DictReader(io.StringIO(out[out.find('"ID"'):]))]
    measured: dict[str, list[float]] = {}
    for r in rows:
        name = r["Kernel Name"].split("(")[0]
        m = measured.setdefault(name, [0.0, 0.0])
        k = 0 if r["Metric Name"] == "dram__bytes_read.sum" else 1
        m[k] += _to_bytes(r["Metric Value"], r.get("Metric Unit", "byte"))
    print(f"{'kernel':<24}{'model read':>16}{'ncu read':>16}{'model write':>16}{'ncu write':>16}")
    for k in report.per_kernel.values():
        got = next((v for n, v in measured.items() if n.endswith(k.name)), [float("nan")] * 2)
        print(f"{k.name:<24}{k.read_bytes:>16}{got[0]:>16.0f}{k.write_bytes:>16}{got[1]:>16.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
