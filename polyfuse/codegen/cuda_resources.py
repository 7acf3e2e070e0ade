"""What generated CUDA asks of the GPU, known without one: ``ptxas -v`` per kernel and the occupancy it implies.

``cuda_resources(code, sizes)`` (also ``Code.resources()`` and ``polyfuse codegen --target cuda --resources``)
compiles the kernels with ``nvcc -cubin -Xptxas -v`` for one architecture and reports, per kernel: registers
per thread, spill stores and loads, stack, static shared memory and barriers; and, at the given sizes (the
host plan is interpreted to find every launch), the largest block and grid it launches, the launches, and
the theoretical occupancy on that architecture with what limits it (registers, shared memory, threads per
SM or blocks per SM), computed from the published per-SM limits below. Why: no GPU has been available to
this project; these are the static facts a user tuning a kernel would otherwise read off Nsight Compute.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from polyfuse.codegen.code import Code
from polyfuse.codegen.host_plan import run_host_plan
from polyfuse.errors import CodegenError, PolyfuseError, RuntimeUnavailable


@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits of one architecture (CUDA C Programming Guide, compute capabilities table)."""

    threads: int
    blocks: int
    registers: int
    shared: int  # bytes an SM's blocks may use in all
    shared_reserved: int  # bytes the system reserves per block (sm_80 and later)
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128


ARCHITECTURES: dict[str, SmLimits] = {
    "sm_70": SmLimits(threads=2048, blocks=32, registers=65536, shared=98304, shared_reserved=0),
    "sm_80": SmLimits(threads=2048, blocks=32, registers=65536, shared=167936, shared_reserved=1024),
    "sm_86": SmLimits(threads=1536, blocks=16, registers=65536, shared=102400, shared_reserved=1024),
    "sm_89": SmLimits(threads=1536, blocks=24, registers=65536, shared=102400, shared_reserved=1024),
    "sm_90": SmLimits(threads=2048, blocks=32, registers=65536, shared=233472, shared_reserved=1024),
}


@dataclass(frozen=True)
class KernelResources:
    """One kernel's ``ptxas -v`` figures and, when sizes were given, its launches and occupancy."""

    kernel: str
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack: int  # bytes per thread
    shared: int  # static shared memory, bytes per block
    barriers: int
    threads: int | None = None  # the largest block it is launched with
    blocks: int | None = None  # the largest grid
    launches: int | None = None
    occupancy: float | None = None  # resident warps / the SM's maximum, at ``threads`` per block
    limiter: str | None = None


@dataclass(frozen=True)
class Resources:
    """:func:`cuda_resources`' report: ``print()`` it for a table."""

    arch: str
    sizes: Mapping[str, int] | None
    kernels: tuple[KernelResources, ...]

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in (self.sizes or {}).items()) or "no sizes: launches not evaluated"
        lines = [f"CUDA resources ({self.arch}, ptxas -v; {at})",
                 f"{'kernel':32s} {'regs':>5s} {'spill st/ld B':>13s} {'stack B':>7s} {'smem B':>7s} {'bar':>3s} "
                 f"{'threads':>7s} {'blocks':>8s} {'launches':>8s} {'occupancy':>9s}  limited by"]
        for k in self.kernels:
            occupancy = f"{k.occupancy:.0%}" if k.occupancy is not None else "-"
            lines.append(f"{k.kernel:32s} {k.registers:5d} {f'{k.spill_stores}/{k.spill_loads}':>13s} {k.stack:7d} {k.shared:7d} "
                         f"{k.barriers:3d} {_or_dash(k.threads):>7s} {_or_dash(k.blocks):>8s} {_or_dash(k.launches):>8s} "
                         f"{occupancy:>9s}  {k.limiter or '-'}")
        return "\n".join(lines)


def _or_dash(v: int | None) -> str:
    return "-" if v is None else str(v)


def cuda_resources(code: Code, sizes: Mapping[str, int] | None = None, arch: str = "sm_90") -> Resources:
    """The resources of every kernel of ``code`` (CUDA) on ``arch``; launches and occupancy at ``sizes``
    (every size param) when given. :class:`RuntimeUnavailable` without ``nvcc``."""
    if code.target != "cuda":
        raise PolyfuseError(f"resources are reported for CUDA code, not {code.target!r}")
    if arch not in ARCHITECTURES:
        raise PolyfuseError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    figures = _ptxas(code.text, arch)
    launched: dict[str, tuple[int, int, int]] = {}
    if sizes is not None and code.launch is not None:
        def record(launch, grid, block, env) -> None:
            threads, blocks, n = launched.get(launch.kernel, (0, 0, 0))
            launched[launch.kernel] = (max(threads, math.prod(block)), max(blocks, math.prod(grid)), n + 1)

        run_host_plan(code.launch, record, {k: int(v) for k, v in sizes.items()})
    limits = ARCHITECTURES[arch]
    kernels = []
    for name, f in figures.items():
        threads, blocks, launches = launched.get(name, (None, None, 0 if sizes is not None else None))
        occupancy, limiter = occupancy_of(limits, threads, f["registers"], f["shared"]) if threads else (None, None)
        kernels.append(KernelResources(name, f["registers"], f["spill_stores"], f["spill_loads"], f["stack"], f["shared"],
                                       f["barriers"], threads, blocks, launches, occupancy, limiter))
    return Resources(arch, dict(sizes) if sizes is not None else None, tuple(kernels))


def occupancy_of(limits: SmLimits, threads: int, registers: int, shared: int) -> tuple[float, str]:
    """Theoretical occupancy of blocks of ``threads`` threads using ``registers`` per thread and ``shared``
    bytes of shared memory, and the resource that limits it."""
    warps = math.ceil(threads / 32)
    max_warps = limits.threads // 32
    per_warp = math.ceil(max(registers, 1) * 32 / limits.register_unit) * limits.register_unit
    by = {
        "threads per SM": max_warps // warps,
        "blocks per SM": limits.blocks,
        "registers": (limits.registers // per_warp) // warps,
    }
    if shared:
        by["shared memory"] = limits.shared // (math.ceil((shared + limits.shared_reserved) / limits.shared_unit) * limits.shared_unit)
    limiter = min(by, key=lambda k: by[k])
    return min(1.0, by[limiter] * warps / max_warps), limiter


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def _ptxas(text: str, arch: str) -> dict[str, dict[str, int]]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeUnavailable("nvcc is not on PATH: the CUDA resources come from ptxas -v")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "kernels.cu"
        src.write_text(text)
        proc = subprocess.run([nvcc, f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o", str(Path(d) / "kernels.cubin"), str(src)],
                              capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise CodegenError(f"nvcc failed on the generated CUDA:\n{proc.stderr.strip()[-4000:]}")
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in proc.stderr.splitlines() + proc.stdout.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = out.setdefault(m.group(1), {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0, "shared": 0,
                                                  "barriers": 0})
            continue
        if current is None:
            continue
        if (m := _FRAME.search(line)):
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        if (m := _USED.search(line)):
            current["registers"] = int(m.group(1))
            if (b := _BARRIERS.search(line)):
                current["barriers"] = int(b.group(1))
            if (s := _SMEM.search(line)):
                current["shared"] = int(s.group(1))
    if not out:
        raise CodegenError(f"ptxas -v reported no kernel for the generated CUDA:\n{proc.stderr.strip()[-2000:]}")
    return out
