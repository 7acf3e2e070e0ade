"""analysis.legality.check_schedule: illegal schedules are rejected with the violated dependence named."""

import islpy as isl
import pytest

import examples.kernels as K
import polyfuse as pf
from polyfuse.analysis.legality import check_schedule


@pytest.mark.parametrize("prog", K.ALL, ids=lambda p: p.name)
def test_source_schedule_is_legal(prog):
    check_schedule(prog, prog.schedule)
    check_schedule(prog, prog.schedule.get_map())


ILLEGAL = [
    # (program, schedule, kind, array, source, sink)
    (K.add_exp, "[N, M] -> { S0[i, j] -> [1, i, j]; S1[i, j] -> [0, i, j] }", "flow", "B", "S0", "S1"),
    (K.jacobi_1d, "[T, N] -> { S0[t, i] -> [-t, 0, i]; S1[t, i] -> [-t, 1, i] }", "flow", "A", "S1", "S0"),
    (K.atax, "[N, M] -> { S0[i] -> [0, i, 0, 0]; S1[i] -> [1, i, 0, 0]; S2[i, j] -> [1, i, 2, j]; S3[i, j] -> [1, i, 1, j] }",
     "flow", "tmp", "S2", "S3"),
    (K.gemm, "[N, M, K] -> { S0[i, j] -> [i, j, 1, 0]; S1[i, j, k] -> [i, j, 0, k] }", "flow", "C", "S0", "S1"),
    (K.two_mm, "[N, M, K] -> { S0[i, j] -> [1, i, j, 0, 0]; S1[i, j, k] -> [1, i, j, 1, k]; "
               "S2[i, j] -> [0, i, j, 0, 0]; S3[i, j, k] -> [0, i, j, 1, k] }", "flow", "tmp", "S0", "S3"),  # K = 0: S0 feeds S3
    (K.time_axpy, "[T, N] -> { S0[t, i] -> [-t, i] }", "flow", "y", "S0", "S0"),
]


@pytest.mark.parametrize("prog,text,kind,array,source,sink", ILLEGAL, ids=lambda v: getattr(v, "name", None))
def test_illegal_schedule_names_dependence(prog, text, kind, array, source, sink):
    with pytest.raises(pf.IllegalTransformError) as info:
        check_schedule(prog, isl.UnionMap(text))
    msg = str(info.value)
    assert f"{kind} dependence on array {array!r} from {source}" in msg
    assert f"to {sink}" in msg
    assert prog.statement(source).text in msg and "witness" in msg
    # the same schedule given to pf.schedule is rejected too
    with pytest.raises(pf.IllegalTransformError, match=f"dependence on array {array!r}"):
        pf.schedule(prog, schedule=text)


def test_seidel_interchange_with_time_inside_is_illegal():
    with pytest.raises(pf.IllegalTransformError) as info:
        check_schedule(K.seidel_2d, isl.UnionMap("[T, N] -> { S0[t, i, j] -> [j, i, t] }"))
    msg = str(info.value)
    assert "array 'A' from S0" in msg and "to S0" in msg and "witness S0[t=" in msg


def test_witness_is_a_violating_pair():
    with pytest.raises(pf.IllegalTransformError, match=r"witness S0\[i=\d+, j=\d+\] -> S1\[i=\d+, j=\d+\]"):
        check_schedule(K.add_exp, isl.UnionMap("[N, M] -> { S0[i, j] -> [1, i, j]; S1[i, j] -> [0, i, j] }"))


def test_privatised_temporary_relaxes_anti_dependences():
    """Interchanging gemm_acc's i and j is legal only with acc private to each (i, j) iteration."""
    sched = isl.UnionMap("[N, M, K] -> { S0[i, j] -> [j, i, 0, 0]; S1[i, j, k] -> [j, i, 1, k]; S2[i, j] -> [j, i, 2, 0] }")
    with pytest.raises(pf.IllegalTransformError, match="dependence on array 'acc'"):
        check_schedule(K.gemm_acc, sched)
    per_iteration = isl.UnionMap("[N, M, K] -> { S0[i, j] -> [i, j]; S1[i, j, k] -> [i, j]; S2[i, j] -> [i, j] }")
    check_schedule(K.gemm_acc, sched, {"acc": per_iteration})
    # a privatisation that cuts a live range is rejected
    per_k = isl.UnionMap("[N, M, K] -> { S0[i, j] -> [i, j, 0]; S1[i, j, k] -> [i, j, k + 1]; S2[i, j] -> [i, j, K + 1] }")
    with pytest.raises(pf.IllegalTransformError, match="privatised 'acc'"):
        check_schedule(K.gemm_acc, sched, {"acc": per_k})


def test_explicit_legal_schedule_keeps_its_order():
    text = "[N, M] -> { S0[i, j] -> [j, i, 0]; S1[i, j] -> [j, i, 1] }"
    sched = pf.schedule(K.add_exp, schedule=text, tile=None)  # untiled: the order is the given one
    check_schedule(K.add_exp, sched.tree, {})
    order = sched.tree.get_map()
    given = isl.UnionMap(text)
    # same relative order of every pair of instances
    assert order.lex_lt_union_map(order).intersect_domain(K.add_exp.domains).is_equal(
        given.lex_lt_union_map(given).intersect_domain(K.add_exp.domains).intersect_range(K.add_exp.domains))


def test_unscheduled_instances_rejected():
    with pytest.raises(pf.IllegalTransformError, match="does not schedule every"):
        check_schedule(K.add_exp, isl.UnionMap("[N, M] -> { S0[i, j] -> [i, j] }"))
