"""What ``make demo`` runs: one program through every stage polyfuse has so far.

1. the program (``print(prog)``): statements, iteration domains, accesses, source schedule;
2. its exact dependences (``print(prog.dependences())``);
3. the reference interpreter on a small input, checked against numpy;
4. compilation with the best backend available, once ``pf.compile`` exists.
"""

from __future__ import annotations

import sys
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

    # ---- compiled code -------------------------------------------------------------------------
    # With pf.compile: the best backend ("auto": CUDA with a GPU and pycuda, else C), compared with the
    # reference result above. A machine that cannot run the chosen backend says so and skips.
    section("compiled")
    compile_ = getattr(pf, "compile", None)
    if compile_ is None:
        print("pf.compile is not available yet; skipped")
        return 0 if ok else 1
    try:
        exe = compile_(add_exp, target="auto")
        out = np.zeros((n, m), np.float32)
        exe(A=a, C=out)
    except pf.RuntimeUnavailable as e:
        print(f"no backend can run here: {e}; skipped")
        return 0 if ok else 1
    same = bool(np.allclose(out, c, rtol=1e-5, atol=1e-6))
    print(f"target {getattr(exe, 'target', 'auto')}: checksum sum(C) = {float(out.sum()):.6f}")
    print(f"max |compiled - reference| = {float(np.abs(out - c).max()):.3g}  ->  {'OK' if same else 'MISMATCH'}")
    ok = ok and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
