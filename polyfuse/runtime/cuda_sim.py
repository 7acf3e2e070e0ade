"""The CUDA simulator: the exact generated CUDA text run on the CPU, with data races, out-of-bounds
indices and misplaced barriers reported (``pf.compile(prog, target="cuda-sim")``,
``polyfuse run --target cuda-sim``).

Users without a GPU run and debug their CUDA with it, and every CUDA test runs through it. The kernels
are compiled as C++ (g++) after a textual instrumentation that changes no statement: each kernel's
pointer parameters are rebound as tracked arrays, each ``__shared__`` declaration becomes a tracked
static, and ``__syncthreads()``/``__shfl_xor_sync`` come from the simulator's runtime
(:mod:`polyfuse.runtime.cuda_sim_core`, which documents the execution model and what counts as a race).
The host plan runs in Python as on the GPU; arrays are copied to simulated device buffers and back, and
temporaries start as NaN (or all ones for integers), as garbage device memory would, so a read of
something never written shows in the results.

The first launch with a problem stops the run with a :class:`SimulationError` that names the kernel, the
array and element, and the two threads (block and thread coordinates).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyfuse.codegen.code import Code
from polyfuse.codegen.cuda import PRELUDE
from polyfuse.codegen.host_plan import HostPlan, Launch, run_host_plan
from polyfuse.errors import CodegenError, RuntimeUnavailable, ShapeError, SimulationError
from polyfuse.runtime.cache import cache_key, cached_artifact
from polyfuse.runtime.cuda import _check_extents, _pad3
from polyfuse.runtime.cuda_sim_copies import ASYNC_COPIES
from polyfuse.runtime.cuda_sim_core import SIM_CORE

CXX_FLAGS = ("-O1", "-std=c++17", "-shared", "-fPIC", "-w")
_POINTER = re.compile(r"(const )?([A-Za-z_][A-Za-z0-9_ ]*?)\* __restrict__ ([A-Za-z_][A-Za-z0-9_]*)")
_SHARED = re.compile(r"__shared__ (?:__align__\(\d+\) )?([A-Za-z_][A-Za-z0-9_ ]*?) ([A-Za-z_][A-Za-z0-9_]*)((?:\[[^\]]+\])+);")
_KERNEL = re.compile(r"__global__ void (?:__launch_bounds__\([^)]*\) )?([A-Za-z_][A-Za-z0-9_]*)\(")
_SYNCHRONISING = ("__syncthreads()", "pf_block_", "__shfl_")


def compiler() -> str | None:
    """The C++ compiler the simulator builds with (``$CXX`` is not consulted: g++ is what it is tested with)."""
    return shutil.which("g++")


def available() -> bool:
    """Whether the simulator can run here (it needs g++)."""
    return compiler() is not None


def instrument(text: str, prefix: str = "") -> tuple[str, list[str]]:
    """``text`` (generated CUDA, prelude included) ready to be compiled with :data:`SIM_CORE` in front:
    every ``__global__`` function renamed ``<prefix><name>`` with its pointer parameters tracked, every
    ``__shared__`` array a tracked static. Also the kernels' (new) names, in order."""
    text = _SHARED.sub(lambda m: f"static pf_shared<{m.group(1)}, {', '.join(_dims(m.group(3)))}> {m.group(2)}(\"{m.group(2)}\");", text)
    kernels: list[str] = []
    out, pos = [], 0
    for m in _KERNEL.finditer(text):
        name = m.group(1)
        kernels.append(prefix + name)
        close = text.index(")", m.end())
        body = text.index("{", close)
        header = text[m.end():close]
        params = list(_POINTER.finditer(header))
        new_header = _POINTER.sub(lambda p: f"{p.group(1) or ''}{p.group(2)}* __restrict__ {p.group(3)}_raw", header)
        binds = "".join(f'\n  const pf_global<{p.group(1) or ""}{p.group(2)}> {p.group(3)}({p.group(3)}_raw, "{p.group(3)}");' for p in params)
        out.append(text[pos:m.start()] + f"__global__ void {prefix}{name}(" + new_header + text[close:body + 1] + binds)
        pos = body + 1
    out.append(text[pos:])
    return "".join(out), kernels


def _dims(brackets: str) -> list[str]:
    return [f"(long long) ({d})" for d in re.findall(r"\[([^\]]+)\]", brackets)]


def launcher(code: Code, prefix: str = "") -> str:
    """One ``extern "C"`` function per kernel of ``code``'s host plan, ``pfsim_launch_<prefix><kernel>(grid,
    block, args...)``, returning whether the launch had to be abandoned."""
    parts = []
    for la in {la.kernel: la for la in code.launch.launches()}.values():
        params, names = [], []
        for a in la.args:
            t = f"{a.dtype.c_name}*" if a.kind == "array" else (a.dtype.c_name if a.kind == "scalar" else "long long")
            params.append(f"{t} {a.name}")
            names.append(a.name)
        fibers = "true" if _synchronises(code.text, la.kernel) else "false"
        parts.append(f'extern "C" int pfsim_launch_{prefix}{la.kernel}(const unsigned* pf_g, const unsigned* pf_b{"".join(", " + p for p in params)})\n'
                     f"{{\n  std::function<void()> body = [&] {{ {prefix}{la.kernel}({', '.join(names)}); }};\n"
                     f'  return pfsim::run_launch("{la.kernel}", pf_g, pf_b, body, {fibers});\n}}\n')
    return "\n".join(parts)


def _synchronises(text: str, kernel: str) -> bool:
    """Whether ``kernel`` uses a barrier or a warp shuffle (directly or through a block reduction)."""
    start = text.find(f" {kernel}(")
    end = text.find("\n}\n", start)
    return start >= 0 and any(s in text[start:end] for s in _SYNCHRONISING)


def simulator_source(codes: Sequence[tuple[str, Code]]) -> str:
    """One C++ translation unit simulating every ``(prefix, code)`` (prefixes keep kernels apart)."""
    parts = [SIM_CORE + ASYNC_COPIES]
    for prefix, code in codes:
        text, _ = instrument(code.text if len(parts) == 1 else code.text.replace(PRELUDE, ""), prefix)
        parts.append(text)
        parts.append(launcher(code, prefix))
    return "\n".join(parts)


def build(source: str) -> ctypes.CDLL:
    """Compile (or fetch from the on-disk cache) and load a simulator translation unit."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeUnavailable("the CUDA simulator needs a C++ compiler (g++ is not on PATH)")

    def compile_to(path: Path) -> None:
        src = path.with_suffix(".cpp")
        src.write_text(source)
        try:
            out = subprocess.run([cxx, *CXX_FLAGS, "-o", str(path), str(src)], capture_output=True, text=True)
        finally:
            src.unlink()
        if out.returncode != 0:
            raise CodegenError(f"g++ failed on the simulated CUDA:\n{out.stderr[-4000:]}")

    def load(path: Path) -> ctypes.CDLL:
        dll = ctypes.CDLL(str(path))
        dll.pfsim_issue_count.restype = ctypes.c_longlong
        dll.pfsim_issue.restype = ctypes.c_char_p
        dll.pfsim_register.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_longlong), ctypes.c_longlong]
        return dll

    return cached_artifact(cache_key("cuda-sim", cxx, " ".join(CXX_FLAGS), source), ".so", compile_to, load)


def load(code: Code, sched: Any = None) -> SimulatedCuda:
    """A callable that runs ``code`` (target ``"cuda"``) in the simulator, like the CUDA runtime's ``load``."""
    if code.target != "cuda" or not isinstance(code.launch, HostPlan):
        raise CodegenError("the CUDA simulator needs CUDA code with a host plan (polyfuse.codegen.cuda.generate_cuda)")
    return SimulatedCuda(code, build(simulator_source([("", code)])))


class SimulatedCuda:
    """Generated CUDA running in the simulator: called like a loaded CUDA program (``code.signature``
    order, numpy arrays), raising :class:`SimulationError` at the first launch with a problem."""

    def __init__(self, code: Code, library: ctypes.CDLL, prefix: str = "") -> None:
        self.code = code
        self.plan: HostPlan = code.launch
        self.library = library
        self.prefix = prefix
        self.arrays = {a.name: a for a in self.plan.arrays}

    def __call__(self, *values: Any, timer: Callable[[str, float], None] | None = None) -> None:
        signature = self.code.signature
        if len(values) != len(signature):
            raise ShapeError(f"{self.code.entry or 'program'} takes {len(signature)} arguments, got {len(values)}")
        sizes = {a.name: int(v) for a, v in zip(signature, values) if a.kind == "size"}
        scalars = {a.name: v for a, v in zip(signature, values) if a.kind == "scalar"}
        host = {a.name: v for a, v in zip(signature, values) if a.kind == "array" and a.name in self.arrays}
        self.run(host, scalars, sizes, timer)

    def run(self, host: Mapping[str, np.ndarray], scalars: Mapping[str, Any], sizes: Mapping[str, int],
            timer: Callable[[str, float], None] | None = None) -> None:
        """Run the host plan on ``host`` arrays (updated in place where the kernels write them), with
        temporaries allocated here; ``timer(kernel, seconds)`` is told each launch's (simulated) time."""
        dll = self.library
        device: dict[str, np.ndarray] = {}
        for name, array in self.arrays.items():
            shape = array.concrete_shape(sizes)
            dtype = np.dtype(array.dtype.numpy)
            if name in host:
                v = host[name]
                if not isinstance(v, np.ndarray) or v.dtype != dtype or v.shape != shape:
                    got = f"{v.dtype.name} {v.shape}" if isinstance(v, np.ndarray) else type(v).__name__
                    raise ShapeError(f"argument {name!r}: expected a {dtype.name} numpy array of shape {shape}, got {got}")
                device[name] = np.array(v, order="C", copy=True)
            else:
                device[name] = np.full(shape, np.nan if dtype.kind == "f" else -1, dtype=dtype)
        dll.pfsim_forget()
        dll.pfsim_reset()
        for name, buf in device.items():
            dims = (ctypes.c_longlong * max(buf.ndim, 1))(*buf.shape)
            dll.pfsim_register(buf.ctypes.data, name.encode(), buf.ndim, dims, buf.size)

        def launch(step: Launch, grid: tuple[int, ...], block: tuple[int, ...], env: Mapping[str, int]) -> None:
            _check_extents(step, grid, block)
            args: list[Any] = []
            for a in step.args:
                if a.kind == "array":
                    args.append(ctypes.c_void_p(device[a.name].ctypes.data))
                elif a.kind == "scalar":
                    args.append(np.ctypeslib.as_ctypes_type(np.dtype(a.dtype.numpy))(scalars[a.name]))
                else:
                    args.append(ctypes.c_longlong(env[a.name]))
            g = (ctypes.c_uint * 3)(*_pad3(grid))
            b = (ctypes.c_uint * 3)(*_pad3(block))
            start = time.perf_counter()
            getattr(dll, f"pfsim_launch_{self.prefix}{step.kernel}")(g, b, *args)
            if timer is not None:
                timer(step.kernel, time.perf_counter() - start)
            count = dll.pfsim_issue_count()
            if count:
                kept = [dll.pfsim_issue(k).decode() for k in range(dll.pfsim_issues_kept())]
                dll.pfsim_forget()
                raise SimulationError(kept, count)

        run_host_plan(self.plan, launch, sizes)
        dll.pfsim_forget()
        for name, v in host.items():
            if self._writes(name):
                v[...] = device[name]

    def _writes(self, name: str) -> bool:
        return any(a.name == name and a.written for la in self.plan.launches() for a in la.args)


def load_many(codes: Sequence[tuple[str, Code]]) -> dict[str, SimulatedCuda]:
    """Several programs in one simulator library (one g++ run), each under its prefix (a C identifier
    part that keeps their kernels apart): ``{prefix: callable}``."""
    for prefix, code in codes:
        if code.target != "cuda" or not isinstance(code.launch, HostPlan):
            raise CodegenError(f"{prefix}: the CUDA simulator needs CUDA code with a host plan")
    library = build(simulator_source(codes))
    return {prefix: SimulatedCuda(code, library, prefix) for prefix, code in codes}
