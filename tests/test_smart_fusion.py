"""``fusion="smart"`` decides kernel by kernel: a fused kernel is distributed back into the unfused loop
nests exactly where the traffic model says fusion loses bytes, and the rest stays fused."""

from __future__ import annotations

import dataclasses
import importlib
import re
import warnings
from types import MappingProxyType

import islpy as isl
import numpy as np
import pytest

import examples.kernels as K
import polyfuse as pf

smart = importlib.import_module("polyfuse.schedule.fusion.smart")
rating_sizes = importlib.import_module("polyfuse.schedule.fusion.rating_sizes")
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
    sched = pf.schedule(two_chains, target="c", fusion="smart", params={"N": 128, "M": 96})
    assert [k.statements for k in sched.kernels] == [("S0",), ("S1",), ("S2", "S3")]
    notes = _smart_notes(sched)
    assert any("kernel0 (S0+S1)" in n and "fusion loses: distributed" in n for n in notes), notes
    assert any("distributed 1 kernel(s): 3 kernel(s)" in n for n in notes), notes
    assert sched.fusion == "smart"
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (128, 96)).astype(np.float32)
    got = {k: np.zeros(s, np.float32) for k, s in (("B", (128, 96)), ("C", (96, 128)), ("D", (128, 96)), ("E", (128, 96)))}
    want = {k: v.copy() for k, v in got.items()}
    exe = pf.compile(two_chains, target="c", fusion="smart", params={"N": 128, "M": 96})
    exe(A=a, **got)
    pf.reference(two_chains)(A=a, **want)
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert [k.statements for k in exe.schedule.kernels] == [("S0",), ("S1",), ("S2", "S3")]


def test_distribution_that_fails_falls_back_to_the_better_rated_schedule_with_a_warning(monkeypatch):
    """Distributing is checked like any schedule: a wrong order of the parts is refused. The fused kernel
    (rated 10x its bytes here) is then not kept silently: minimal fusion, rated better, is taken, and a
    warning at the caller's line says so."""
    monkeypatch.setattr(smart, "program_traffic", _inflating(("S0", "S1"), 10))
    real = smart.distribute
    monkeypatch.setattr(smart, "distribute",
                        lambda prog, base, view, parts, **kw: real(prog, base, view, {k: v[::-1] for k, v in parts.items()}, **kw))
    with pytest.warns(pf.PolyfuseWarning, match="distributing the kernels where fusion loses failed.*fell back to fusion='min'") as got:
        sched = pf.schedule(two_chains, target="c", fusion="smart", params={"N": 128, "M": 96})
    assert {w.filename for w in got} == {__file__}
    unfused = pf.schedule(two_chains, target="c", fusion="min", params={"N": 128, "M": 96})
    assert [k.statements for k in sched.kernels] == [k.statements for k in unfused.kernels]
    assert sched.fusion == "smart"
    assert "fell back to fusion='min'" in sched.explain()


# -- an MLP at transformer sizes: relu(x @ w1 + b1) @ w2 + b2 ----------------------------------------------

MLP_SIZES = {"M": 2048, "K": 1024, "H": 4096}


def _mlp() -> pf.Program:
    m, k, h = pf.params("M K H")
    g = pf.Graph("mlp")
    x, w1, b1 = g.input("x", (m, k)), g.input("w1", (k, h)), g.input("b1", (h,))
    w2, b2 = g.input("w2", (h, k)), g.input("b2", (k,))
    return g.build(y=pf.ops.relu(x @ w1 + b1) @ w2 + b2)


def _unmarked(tree: isl.Schedule) -> isl.Schedule:
    """A finished schedule tree without its kernel and parallel marks: an explicit schedule to replay."""

    def walk(node: isl.ScheduleNode) -> isl.ScheduleNode:
        while node.get_type() == isl.schedule_node_type.mark:
            node = node.delete()
        for k in range(node.n_children()):
            node = walk(node.child(k)).parent()
        return node

    return walk(tree.get_root()).get_schedule()


def _replays_correctly(prog: pf.Program, sched: pf.Schedule) -> None:
    """The statement order ``sched`` chose at its (large) sizes, compiled at small sizes and compared with
    the reference interpreter, with the same kernels."""
    exe = pf.compile(prog, target="c", schedule=_unmarked(sched.tree), tile=None)
    rng = np.random.default_rng(7)
    m, k, h = 9, 7, 11
    args = {"x": (m, k), "w1": (k, h), "b1": (h,), "w2": (h, k), "b2": (k,)}
    ins = {n: rng.uniform(-1, 1, shape).astype(np.float32) for n, shape in args.items()}
    got, want = np.zeros((m, k), np.float32), np.zeros((m, k), np.float32)
    exe(**ins, y=got)
    pf.reference(prog)(**ins, y=want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # (the initialisations moved into their contractions' tiles after fusion are no fusion decision: the
    # replay, with no tiles, keeps them apart)
    folded = {m.group(1) for n in sched.notes for m in [re.match(r"(S\d+) \(the initialisation of", n)] if m}

    def groups(kernels) -> list[tuple[str, ...]]:
        return [g for g in (tuple(s for s in k.statements if s not in folded) for k in kernels) if g]

    assert groups(exe.schedule.kernels) == groups(sched.kernels)


def test_mlp_smart_fusion_is_never_rated_worse_than_minimal_fusion():
    """The fused MLP needs a skewed band (its inner loop strides through ``w1``) and the model rates it
    about 4x minimal fusion's bytes: smart fusion distributes it within the default isl budget, with no
    warning, and says why in explain()."""
    prog = _mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pf.PolyfuseWarning)
        sched = pf.schedule(prog, target="c", params=MLP_SIZES)
    unfused = pf.schedule(prog, target="c", fusion="min", params=MLP_SIZES)
    assert sched.traffic().total_bytes <= unfused.traffic().total_bytes
    assert len(sched.kernels) > 1
    text = sched.explain()
    assert "fusion loses" in text and ": distributed" in text
    # the contractions apart, the epilogues fused with each other: fewer bytes than distributing everything
    assert "kept the schedule with the contractions apart" in text
    assert "the model rates them better in separate kernels" in text
    _replays_correctly(prog, sched)


def test_mlp_distribution_out_of_budget_falls_back_to_minimal_fusion_with_a_warning(monkeypatch):
    """When distributing runs out of its isl budget (forced here: the step starts with one operation
    left), the better rated schedule, minimal fusion's, is kept, and a warning and explain() name it."""
    real = smart.distribute

    def starved(*args, **kw):
        isl.DEFAULT_CONTEXT.set_max_operations(1)
        return real(*args, **kw)

    monkeypatch.setattr(smart, "distribute", starved)
    prog = _mlp()
    with pytest.warns(pf.PolyfuseWarning, match=r"ran out of its budget.*fell back to fusion='min'.*raise isl_budget=") as got:
        sched = pf.schedule(prog, target="c", params=MLP_SIZES)
    assert {w.filename for w in got} == {__file__}
    unfused = pf.schedule(prog, target="c", fusion="min", params=MLP_SIZES)
    assert sched.traffic().total_bytes == unfused.traffic().total_bytes
    assert "fell back to fusion='min', the better rated alternative" in sched.explain()
    _replays_correctly(prog, sched)


def test_a_tiny_isl_budget_warns_at_the_callers_line_naming_the_fallback():
    """pf.compile schedules on the first call: the warning points at that call, not into polyfuse."""
    exe = pf.compile(_mlp(), target="c", isl_budget=2000)
    rng = np.random.default_rng(1)
    ins = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in (("x", (5, 3)), ("w1", (3, 4)), ("b1", (4,)), ("w2", (4, 3)), ("b2", (3,)))}
    got_y, want = np.zeros((5, 3), np.float32), np.zeros((5, 3), np.float32)
    with pytest.warns(pf.PolyfuseWarning, match="fell back to") as got:
        exe(**ins, y=got_y)
    assert {w.filename for w in got} == {__file__}
    pf.reference(exe.program)(**ins, y=want)
    np.testing.assert_allclose(got_y, want, rtol=1e-5, atol=1e-5)


def _attention() -> pf.Program:
    h, s, e = pf.params("H S E")
    g = pf.Graph("attention")
    q, k, v = g.input("q", (h, s, e)), g.input("k", (h, s, e)), g.input("v", (h, s, e))
    p = pf.ops.softmax((q @ pf.ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1)
    return g.build(o=p @ v)


def _block() -> pf.Program:
    """A transformer block: layernorm, 8-head attention with an output projection, residual, MLP."""
    h, s, e, d, f = pf.params("H S E D F")
    g = pf.Graph("block")
    x, gamma, beta = g.input("x", (s, d)), g.input("gamma", (d,)), g.input("beta", (d,))
    wq, wk, wv = (g.input(n, (h, d, e)) for n in ("wq", "wk", "wv"))
    wo = g.input("wo", (h, e, d))
    w1, b1, w2, b2 = g.input("w1", (d, f)), g.input("b1", (f,)), g.input("w2", (f, d)), g.input("b2", (d,))
    y = pf.ops.layernorm(x, gamma, beta, eps=1e-5)
    q, k, v = y @ wq, y @ wk, y @ wv
    p = pf.ops.softmax((q @ pf.ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1)
    r = x + pf.ops.sum(p @ v @ wo, axis=0)
    return g.build(y=r + pf.ops.relu(r @ w1 + b1) @ w2 + b2)


def _within_budget_and_rated(prog: pf.Program, sizes) -> pf.Schedule:
    """Scheduled under the default budget with no step running out, and no more bytes than fusion='min'
    unless a warning says why."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sched = pf.schedule(prog, target="c", params=sizes)
    said = [str(w.message) for w in caught if issubclass(w.category, pf.PolyfuseWarning)]
    assert not [m for m in said if "ran out" in m or "budget" in m], said
    assert not [n for n in sched.notes if "ran out" in n], sched.notes
    unfused = pf.schedule(prog, target="c", fusion="min", params=sizes)
    if sched.traffic().total_bytes > unfused.traffic().total_bytes:
        assert any("although" in m for m in said), said
    return sched


def test_attention_schedules_within_the_default_budget():
    sched = _within_budget_and_rated(_attention(), {"H": 8, "S": 512, "E": 64})
    assert "fusion='smart' by traffic" in sched.explain()


@pytest.mark.slow
def test_transformer_block_schedules_within_the_default_budget():
    sched = _within_budget_and_rated(_block(), {"H": 8, "S": 512, "E": 64, "D": 512, "F": 2048})
    assert "fusion='smart' by traffic" in sched.explain()


def test_a_comparison_that_runs_out_keeps_the_fused_schedule_unrated_with_a_warning(monkeypatch):
    def exhausted(*args, **kwargs):
        raise smart.BudgetExhausted("the traffic comparison ran out of its budget (forced)")

    monkeypatch.setattr(smart, "program_traffic", exhausted)
    with pytest.warns(pf.PolyfuseWarning, match="without rating it against fusion='min'") as got:
        sched = pf.schedule(two_chains, target="c", params={"N": 64, "M": 48})
    assert {w.filename for w in got} == {__file__}
    assert [k.statements for k in sched.kernels] == [("S0", "S1"), ("S2", "S3")]
    assert "without rating it" in sched.explain()


@pf.program(assume="M <= 100")
def bounded_chains(A: pf.f32[N, M], B: pf.f32[N, M], C: pf.f32[M, N]):
    for i in range(N):
        for j in range(M):
            B[i, j] = A[i, j] * 2.0
    for j in range(M):
        for i in range(N):
            C[j, i] = B[i, j] + A[i, j]


def test_representative_sizes_respect_the_programs_assumptions():
    """Without params, sizes are taken as 1024 or the largest power of two the assumptions allow, so the
    comparison is made (no warning) rather than refused."""
    assert rating_sizes.representative_sizes(bounded_chains, {}) == {"N": 1024, "M": 64}
    with warnings.catch_warnings():
        warnings.simplefilter("error", pf.PolyfuseWarning)
        sched = pf.schedule(bounded_chains, target="c", fusion="smart")
    assert any("by traffic at N=1024, M=64" in n for n in sched.notes), sched.notes


def test_a_sliding_windows_extent_is_rated_as_a_small_filter():
    """A convolution written with symbolic sizes: the filter extents (reduction loops added to an output
    iterator in a subscript) are rated at 3, not 1024 like the tensors' sizes; a matmul's sizes are not
    windows. The note says which size is which."""
    n, c, h, w, f, kh, kw = pf.params("N C H W F KH KW")
    g = pf.Graph("conv")
    x, wt = g.input("x", (n, c, h, w)), g.input("w", (f, c, kh, kw))
    conv = g.build(y=pf.ops.relu(pf.ops.conv2d(x, wt)))
    assert rating_sizes.window_params(conv) == {"KH", "KW"}
    assert rating_sizes.representative_sizes(conv, {}) == {"N": 1024, "C": 1024, "H": 1024, "W": 1024, "F": 1024,
                                                     "KH": 3, "KW": 3}
    assert rating_sizes.representative_sizes(conv, {"KH": 5}) == {"N": 1024, "C": 1024, "H": 1024, "W": 1024,
                                                            "F": 1024, "KH": 5, "KW": 3}
    assert rating_sizes.window_params(K.gemm_acc) == frozenset()
    assert rating_sizes.window_params(two_chains) == frozenset()


def test_a_less_parallel_minimal_fusion_is_noted_not_warned():
    """Minimal fusion of a stencil runs its time loop in one sequential kernel (the model counts it as one
    tile, so its bytes look small): smart keeps the parallel kernels, says why in a note, and does not warn
    (a warning would advise the slower schedule)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pf.PolyfuseWarning)
        sched = pf.schedule(K.jacobi_2d, target="c")
    assert all(k.parallel_depth for k in sched.kernels)
    assert any("would run 1 more kernel(s) sequentially" in n for n in sched.notes), sched.notes


def test_attention_keeps_its_contractions_apart_and_its_softmax_fused():
    """Fusing all of attention loses both matmuls' register micro-tiles; distributing everything writes
    the scores once per softmax step. Smart fusion takes a third schedule: each contraction alone, the
    row-wise softmax between them fused into one kernel."""
    h, s, e = pf.params("H S E")
    g = pf.Graph("attention")
    q, k, v = g.input("q", (h, s, e)), g.input("k", (h, s, e)), g.input("v", (h, s, e))
    prog = g.build(o=pf.ops.softmax((q @ pf.ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1) @ v)
    sizes = {"H": 2, "S": 133, "E": 64}
    sched = pf.schedule(prog, target="c", params=sizes)
    assert "kept the schedule with the contractions apart" in sched.explain()
    micro = smart._microtiles(sched)
    contractions = [kern for kern in sched.kernels if micro.get(kern.name)]
    # (each with its initialisation, moved into its tiles after fusion: tiling/init_fold.py)
    assert len(contractions) == 2 and all(len(kern.statements) == 2 for kern in contractions)
    between = sched.kernels.index(contractions[1]) - sched.kernels.index(contractions[0])
    assert between == 2  # one fused softmax kernel between the two matmuls
    rng = np.random.default_rng(4)
    qv, kv, vv = (rng.uniform(-1, 1, (2, 133, 64)).astype(np.float32) for _ in range(3))
    got = pf.compile(prog, target="c", params=sizes)(q=qv, k=kv, v=vv)
    scores = (qv.astype(np.float64) @ kv.transpose(0, 2, 1)) * 0.125
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ vv, rtol=1e-4, atol=1e-5)
