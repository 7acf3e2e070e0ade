"""Concrete sizes lifted into parameters for isl's whole-component scheduler (``fusion/lifting.py``): the
BERT-sized MLP of ``pf.from_torch`` used not to finish scheduling; lifted, isl solves it at once, and the
schedule it returns is put back over the concrete domain."""

from __future__ import annotations

import importlib
import time

import islpy as isl
import numpy as np

import polyfuse as pf
from polyfuse import ops

lifting = importlib.import_module("polyfuse.schedule.fusion.lifting")
scheduler = importlib.import_module("polyfuse.schedule.fusion.scheduler")


def _constraints() -> isl.ScheduleConstraints:
    dom = isl.UnionSet("{ S0[i, j] : 0 <= i <= 127 and 0 <= j <= 3071; S1[i, j, k] : 0 <= i <= 127 and 0 <= j <= 767 "
                       "and 0 <= k <= 3071 }")
    dep = isl.UnionMap("{ S0[i, k] -> S1[i, j, k] : 0 <= i <= 127 and 0 <= j <= 767 and 0 <= k <= 3071 }")
    return isl.ScheduleConstraints.on_domain(dom).set_validity(dep).set_proximity(dep).set_coincidence(dep)


def test_lift_turns_large_constants_into_parameters_and_keeps_coefficients():
    lifted = lifting.lift(_constraints())
    assert lifted is not None
    text = lifted.to_str()
    assert "pf_size3071" in text and "pf_size767" in text and "3071 " not in text.replace("pf_size3071", "")
    dom = isl.UnionSet("{ S[i, j] : 0 <= i <= 99 and 0 <= j < 64 and 64i + j <= 6000 }")
    scaled = lifting.lift(isl.ScheduleConstraints.on_domain(dom))
    assert scaled is not None and "64i" in scaled.to_str()  # a coefficient stays a number
    assert lifting.lift(isl.ScheduleConstraints.on_domain(isl.UnionSet("[N] -> { S[i] : 0 <= i < N }"))) is None


def test_lowered_schedule_is_over_the_concrete_domain():
    sc = _constraints()
    tree = lifting.lower(lifting.lift(sc).compute_schedule(), sc.get_domain())
    assert tree is not None and tree.get_domain().is_equal(sc.get_domain())
    assert "pf_size" not in tree.to_str()
    # the lowered schedule respects the dependence
    sched = tree.get_map()
    ordered = sc.get_validity().apply_domain(sched).apply_range(sched)
    maps: list[isl.Map] = []
    ordered.foreach_map(maps.append)
    assert maps and all(m.is_subset(isl.Map.lex_lt(m.get_space().domain())) for m in maps)


def test_concrete_softmax_rows_still_fuse_into_one_kernel():
    """Whole-component scheduling is what fuses a row reduction with the elementwise work on its row;
    lifted, it still does for a program whose sizes are numbers."""
    g = pf.Graph("softmax_concrete")
    prog = g.build(y=ops.softmax(g.input("x", (512, 1024)), axis=-1))
    assert not prog.params
    sched = pf.schedule(prog, target="c")
    assert len(sched.kernels) == 1, sched.explain()
    x = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    y = np.empty_like(x)
    pf.compile_schedule(sched)(x=x, y=y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_bert_sized_mlp_schedules_in_seconds_with_smart_fusion():
    """relu(x W1 + b1) W2 + b2 at 128 x 768 -> 3072 -> 768, sizes all numbers: smart fusion finishes (the
    bias and activation fused after the first product), with no fallback to fusion='min'."""
    M, K, H = 128, 768, 3072
    g = pf.Graph("mlp_concrete")
    x, w1, b1 = g.input("x", (M, K)), g.input("w1", (K, H)), g.input("b1", (H,))
    w2, b2 = g.input("w2", (H, K)), g.input("b2", (K,))
    prog = g.build(y=ops.gelu(x @ w1 + b1) @ w2 + b2)
    start = time.perf_counter()
    sched = pf.schedule(prog, target="c")
    assert time.perf_counter() - start < 60
    assert sched.fusion == "smart" and "fell back" not in sched.explain()
