"""CUDA smart fusion does not starve the GPU: a fused kernel that launches fewer than ``STARVED_THREADS``
threads for at least ``STARVED_WORK`` statement instances (attention fused into one kernel parallel over its
heads only) is distributed, whatever bytes fusion saves, and ``explain()`` says why."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from benchmarks.workloads import WORKLOADS
from polyfuse.schedule.fusion.smart import STARVED_THREADS, STARVED_WORK
from tests.test_codegen_cuda import build_emulator, emulate

ATTENTION = next(w for w in WORKLOADS if w.name == "attention")


def _threads(k) -> int:
    return math.prod(k.grid) * math.prod(k.block)


def test_attention_is_not_fused_into_a_kernel_of_eight_threads():
    sizes = dict(ATTENTION.full)  # H=8 heads, S=512, E=64
    prog = ATTENTION.program()
    # (8 KiB of shared memory a block: too little for the scores' register micro-tile, whose contraction
    # would otherwise be distributed out of the fused kernel before smart fusion rates it)
    small = 8192
    assert pf.schedule(prog, target="cuda", params=sizes, fusion="max", shared_memory=small).kernels[0].block == (8,)
    sched = pf.schedule(prog, target="cuda", params=sizes, shared_memory=small)
    assert len(sched.kernels) > 1 and all(_threads(k) >= STARVED_THREADS for k in sched.kernels if k.name != "kernel0")
    assert "fusion leaves the GPU 8 thread(s)" in sched.explain() and "starved of GPU threads" in sched.explain()
    default = pf.schedule(prog, target="cuda", params=sizes, fusion="max")  # the micro-tiled scores run apart
    assert any(k.microtile is not None for k in default.kernels)
    assert all(_threads(k) >= STARVED_THREADS for k in default.kernels if k.name != "kernel0")


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
def test_the_distributed_attention_matches_the_reference_race_free(tmp_path: Path):
    sizes = {"H": 2, "S": 512, "E": 16}  # 8 million updates on 2 threads when fused; 1024 threads apart
    prog = ATTENTION.program()
    assert 2 * 512 * 512 * 16 >= STARVED_WORK
    sched = pf.schedule(prog, target="cuda", params=sizes)
    assert len(sched.kernels) > 1
    code = pf.codegen(sched)
    rng = np.random.default_rng(0)
    args = {"q": rng.standard_normal((2, 512, 16)).astype(np.float32), "k": rng.standard_normal((2, 512, 16)).astype(np.float32),
            "p": np.zeros((2, 512, 512), np.float32)}
    want = {n: v.copy() for n, v in args.items()}
    pf.reference(prog)(**want)
    emulate(build_emulator([("attn", code)]), "attn", code, args, sizes)  # (a race or bad index raises)
    np.testing.assert_allclose(args["p"], want["p"], rtol=1e-4, atol=1e-6)
