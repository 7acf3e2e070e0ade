"""What ``make demo`` runs: one program through every stage polyfuse has so far.

1. the program (``print(prog)``): statements, iteration domains, accesses, source schedule;
2. its exact dependences (``print(prog.dependences())``);
3. the reference interpreter on a small input, checked against numpy;
4. the same program compiled with the best backend present ("auto": CUDA when a GPU and pycuda are usable,
   else C/OpenMP), checked against the reference;
5. a fused DNN block (bias + GELU + residual, built with ``pf.Graph``) timed against the baseline of that
   backend: PyTorch on a GPU, numpy on the CPU, with the speed-up.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import add_exp  # noqa: E402

import polyfuse as pf  # noqa: E402


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def main() -> int:
    n, m = 6, 5
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, m)).astype(np.float32)
    expected = np.exp(a + np.float32(1.0))

    section("program")
    print(add_exp)

    section("dependences")
    print(add_exp.dependences())

    section(f"reference interpreter, N={n} M={m}")
    c = np.zeros((n, m), np.float32)
    pf.reference(add_exp)(A=a, C=c)
    ok = bool(np.allclose(c, expected, rtol=1e-5, atol=1e-6))
    print(f"checksum sum(C) = {float(c.sum()):.6f}")
    print(f"numpy    sum    = {float(expected.sum()):.6f}")
    print(f"max |C - numpy| = {float(np.abs(c - expected).max()):.3g}  ->  {'OK' if ok else 'MISMATCH'}")

    section("compiled (best backend)")
    try:
        exe = pf.compile(add_exp, target="auto")
        out = np.zeros((n, m), np.float32)
        exe(A=a, C=out)
    except pf.RuntimeUnavailable as e:
        print(f"no backend can run here: {e}")
        return 1
    same = bool(np.allclose(out, c, rtol=1e-5, atol=1e-6))
    print(f"target {exe.target}: {len(exe.schedule.kernels)} kernel(s), contracted {sorted(exe.schedule.contracted)}")
    print(f"max |compiled - reference| = {float(np.abs(out - c).max()):.3g}  ->  {'OK' if same else 'MISMATCH'}")
    return 0 if ok and same and fused_block(exe.target) else 1


def fused_block(target: str, rows: int = 4096, cols: int = 1024) -> bool:
    """y = gelu(x + b) + x as one fused kernel, against the backend's baseline."""
    section(f"fused block y = gelu(x + b) + x, {rows}x{cols} f32, target {target}")
    g = pf.Graph("bias_gelu_residual")
    x = g.input("x", (rows, cols), pf.f32)
    b = g.input("b", (cols,), pf.f32)
    prog = g.build(y=pf.ops.gelu(x + b) + x)
    exe = pf.compile(prog, target=target)
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((rows, cols)).astype(np.float32)
    bv = rng.standard_normal(cols).astype(np.float32)
    y = np.zeros_like(xv)
    exe(x=xv, b=bv, y=y)
    sched = exe.schedule
    print(f"{len(sched.kernels)} kernel(s); temporaries kept out of memory: {sorted(sched.contracted) or 'none'}")
    if target == "cuda":
        return _against_torch(exe, xv, bv, y)
    want = _numpy_block(xv, bv)
    ok = bool(np.allclose(y, want, rtol=1e-4, atol=1e-5))
    ours = _median_seconds(lambda: exe(x=xv, b=bv, y=y))
    base = _median_seconds(lambda: _numpy_block(xv, bv))
    print(f"polyfuse C/OpenMP: {ours * 1e3:8.2f} ms    numpy: {base * 1e3:8.2f} ms    speed-up {base / ours:.2f}x")
    print(f"max |polyfuse - numpy| = {float(np.abs(y - want).max()):.3g}  ->  {'OK' if ok else 'MISMATCH'}")
    return ok


def _numpy_block(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    h = x + b
    return np.float32(0.5) * h * (np.float32(1.0) + np.tanh(np.float32(0.7978845608) * (h + np.float32(0.044715) * h**3))) + x


def _median_seconds(fn, repeat: int = 9) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _against_torch(exe, xv: np.ndarray, bv: np.ndarray, y_host: np.ndarray) -> bool:
    """On a GPU: polyfuse on torch tensors in place, against PyTorch eager, timed with CUDA events."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: the fused result was computed, but there is no baseline to time against")
        return bool(np.allclose(y_host, _numpy_block(xv, bv), rtol=1e-4, atol=1e-5))
    x, b = torch.from_numpy(xv).cuda(), torch.from_numpy(bv).cuda()
    y = torch.empty_like(x)

    def ours():
        exe(x=x, b=b, y=y)

    def eager():
        return torch.nn.functional.gelu(x + b, approximate="tanh") + x

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(20):
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(stop))
        return statistics.median(samples)

    t_ours, t_torch = timed(ours), timed(eager)
    ok = bool(torch.allclose(y, eager(), rtol=1e-4, atol=1e-5))
    print(f"{torch.cuda.get_device_name()}: polyfuse {t_ours:.3f} ms    PyTorch eager {t_torch:.3f} ms    speed-up {t_torch / t_ours:.2f}x")
    print(f"result matches PyTorch: {'OK' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
