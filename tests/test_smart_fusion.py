"""``fusion="smart"`` decides kernel by kernel: a fused kernel is distributed back into the unfused loop
nests exactly where the traffic model says fusion loses bytes, and the rest stays fused."""

from __future__ import annotations

import dataclasses
import importlib
from types import MappingProxyType

import numpy as np

import polyfuse as pf

smart = importlib.import_module("polyfuse.schedule.smart")
traffic_model = importlib.import_module("polyfuse.cost.traffic")

N, M = pf.params("N M")


@pf.program
def two_chains(A: pf.f32[N, M], B: pf.f32[N, M], C: pf.f32[M, N], D: pf.f32[N, M], E: pf.f32[N, M]):
    for i in range(N):
        for j in range(M):
            B[i, j] = A[i, j] * 2.0
    for j in range(M):
        for i in range(N):
            C[j, i] = B[i, j] + A[i, j]
    for i in range(N):
        for j in range(M):
            D[i, j] = pf.exp(A[i, j])
    for i in range(N):
        for j in range(M):
            E[i, j] = D[i, j] + 1.0


def _smart_notes(sched: pf.Schedule) -> list[str]:
    return [n for n in sched.notes if n.startswith("fusion='smart'")]


def test_every_fused_kernel_is_compared_and_the_numbers_are_explained():
    sched = pf.schedule(two_chains, target="c", fusion="smart", params={"N": 256, "M": 256})
    assert [k.statements for k in sched.kernels] == [("S0", "S1"), ("S2", "S3")]
    notes = _smart_notes(sched)
    assert any("kernel0 (S0+S1)" in n and "B fused vs" in n and "as S0 | S1: kept fused" in n for n in notes), notes
    assert any("kernel1 (S2+S3)" in n and "as S2 | S3: kept fused" in n for n in notes), notes
    text = sched.explain()
    assert "B fused vs" in text


def _inflating(kernel_statements: tuple[str, ...], factor: int):
    """The real traffic model, with the kernel made of exactly ``kernel_statements`` costing ``factor`` times
    more: a fusion that loses bytes, where the model is otherwise untouched."""
    real = traffic_model.program_traffic

    def model(prog, tree, kernels, contracted, params):
        report = real(prog, tree, kernels, contracted, params)
        per_kernel = dict(report.per_kernel)
        for name, k in per_kernel.items():
            if k.statements == kernel_statements:
                arrays = {a: dataclasses.replace(t, read_bytes=t.read_bytes * factor) for a, t in k.per_array.items()}
                per_kernel[name] = dataclasses.replace(k, per_array=MappingProxyType(arrays))
        total = sum(k.total_bytes for k in per_kernel.values())
        return dataclasses.replace(report, per_kernel=MappingProxyType(per_kernel), total_bytes=total)

    return model


def test_a_losing_fusion_is_distributed_and_the_others_kept(monkeypatch):
    monkeypatch.setattr(smart, "program_traffic", _inflating(("S0", "S1"), 10))
    sched = pf.schedule(two_chains, target="c", fusion="smart", params={"N": 64, "M": 48})
    assert [k.statements for k in sched.kernels] == [("S0",), ("S1",), ("S2", "S3")]
    notes = _smart_notes(sched)
    assert any("kernel0 (S0+S1)" in n and "fusion loses: distributed" in n for n in notes), notes
    assert any("distributed 1 kernel(s): 3 kernel(s)" in n for n in notes), notes
    assert sched.fusion == "smart"
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (64, 48)).astype(np.float32)
    got = {k: np.zeros(s, np.float32) for k, s in (("B", (64, 48)), ("C", (48, 64)), ("D", (64, 48)), ("E", (64, 48)))}
    want = {k: v.copy() for k, v in got.items()}
    exe = pf.compile(two_chains, target="c", fusion="smart", params={"N": 64, "M": 48})
    exe(A=a, **got)
    pf.reference(two_chains)(A=a, **want)
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert [k.statements for k in exe.schedule.kernels] == [("S0",), ("S1",), ("S2", "S3")]


def test_distribution_that_would_be_illegal_keeps_the_fused_kernel(monkeypatch):
    """Distributing is checked like any schedule: a wrong order of the parts is refused, fused stays."""
    monkeypatch.setattr(smart, "program_traffic", _inflating(("S0", "S1"), 10))
    real = smart.distribute
    monkeypatch.setattr(smart, "distribute", lambda prog, base, view, parts: real(prog, base, view, {k: v[::-1] for k, v in parts.items()}))
    sched = pf.schedule(two_chains, target="c", fusion="smart", params={"N": 64, "M": 48})
    assert [k.statements for k in sched.kernels] == [("S0", "S1"), ("S2", "S3")]
    assert any("distributing failed" in n for n in _smart_notes(sched)), sched.notes
