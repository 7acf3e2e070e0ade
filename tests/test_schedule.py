"""pf.schedule: kernel plans, contraction, mapping marks and fusion decisions on the shared corpus."""

import warnings

import islpy as isl
import pytest

import examples.kernels as K
import polyfuse as pf
from polyfuse.analysis.legality import check_schedule
from polyfuse.schedule.model import BLOCK_MARK, GRID_MARK, KERNEL_MARK, PARALLEL_MARK, Kernel
from polyfuse.schedule.tiling.microtile import MICROTILE_MARK

N = K.N




@pf.program
def normalise(A: pf.f32[N], B: pf.f32[N]):
    """B = A / sum(A): every consumer instance needs the whole reduction."""
    total = 0.0
    for i in range(N):
        total += A[i]
    for i in range(N):
        B[i] = A[i] / total


def _marks(tree: isl.Schedule) -> list[tuple[str, isl.ScheduleNode]]:
    found = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark:
            found.append((node.mark_get_id().name, node.copy()))
        return True

    tree.get_root().foreach_descendant_top_down(visit)
    return found


def _statements_under(node) -> set[str]:
    names = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    return set(names)


def _check_marks(sched) -> None:
    """Every statement under exactly one kernel mark whose user object is the schedule's Kernel."""
    kernels = [(n, node) for n, node in _marks(sched.tree) if n == KERNEL_MARK]
    assert [node.mark_get_id().user for _, node in kernels] == list(sched.kernels)
    seen: list[str] = []
    for _, node in kernels:
        k = node.mark_get_id().user
        assert isinstance(k, Kernel)
        assert _statements_under(node) == set(k.statements)
        seen.extend(k.statements)
    assert sorted(seen) == sorted(s.name for s in sched.program.statements)


@pytest.mark.parametrize("prog", K.ALL, ids=lambda p: p.name)
@pytest.mark.parametrize("target", ["c", "cuda"])
@pytest.mark.parametrize("fusion", ["none", "min", "max", "smart"])
def test_every_program_every_policy(prog, target, fusion):
    sched = pf.schedule(prog, target=target, fusion=fusion, params={p: 64 for p in prog.params})
    _check_marks(sched)
    if not sched.contracted:
        check_schedule(sched.program, sched.tree)  # (the program scheduled: gemm_acc's accumulator is forwarded)
    assert sched.explain().startswith(f"schedule of {prog.name}")
    for k in sched.kernels:
        if target == "cuda":
            assert len(k.grid) == len(k.block) >= 1
            threads = 1
            for b in k.block:
                threads *= b
            assert threads <= 1024
        else:
            assert k.grid == () and k.block == ()


@pytest.mark.parametrize("prog", [K.add_exp, K.gemm_acc, K.jacobi_2d, K.lu, K.atax], ids=lambda p: p.name)
@pytest.mark.parametrize("tile", [None, "auto", (8,), (4, 8), {"S0": (16, 16)}])
@pytest.mark.parametrize("target", ["c", "cuda"])
def test_tile_settings(prog, tile, target):
    sched = pf.schedule(prog, target=target, tile=tile, params={p: 50 for p in prog.params})
    _check_marks(sched)


def test_add_exp_max_fuses_and_contracts():
    sched = pf.schedule(K.add_exp, fusion="max")
    assert len(sched.kernels) == 1 and sched.contracted == {"B"}
    sched = pf.schedule(K.add_exp, target="cuda", fusion="max", params={"N": 100, "M": 100})
    assert len(sched.kernels) == 1 and sched.contracted == {"B"}


def test_add_exp_none_keeps_two_kernels():
    sched = pf.schedule(K.add_exp, fusion="none")
    assert len(sched.kernels) == 2 and sched.contracted == set()
    assert "fusion='none'" in sched.explain()


def test_gemm_acc_cuda_2d_grid():
    sched = pf.schedule(K.gemm_acc, target="cuda", params={"N": 1000, "M": 500, "K": 64})
    init, k = sched.kernels  # C = 0, then the contraction with a register micro-tile
    assert len(k.grid) == 2 and k.block == (16, 16) and k.microtile is not None
    # The grid covers the (i, j) space with the block tiles: x runs over M = 500, y over N = 1000; 64 x 64
    # tiles would make 128 blocks, fewer than an H100's 132 SMs, so they are 32 x 32 (2 x 2 a thread)
    assert (k.microtile.block_rows, k.microtile.thread_rows) == (32, 2) and k.grid == (-(-500 // 32), -(-1000 // 32))
    assert not sched.contracted and "the accumulator 'acc' is updated in C[i, j] directly" in sched.explain()
    fixed = pf.schedule(K.gemm_acc, target="cuda", tile=(16, 32), params={"N": 1000, "M": 500, "K": 64})
    assert fixed.kernels[0].block == (32, 16) and fixed.kernels[0].grid == (16, 63)
    names = [n for n, _ in _marks(sched.tree)]
    assert names == [KERNEL_MARK, GRID_MARK, BLOCK_MARK] * 2


def test_gemm_acc_c_parallel_mark():
    """The accumulator is forwarded into C (``schedule/accumulators.py``): the contraction is micro-tiled
    like gemm's ``C[i, j] +=`` form, after a parallel kernel initialising C."""
    sched = pf.schedule(K.gemm_acc, target="c")
    marks = _marks(sched.tree)
    assert [n for n, _ in marks] == [KERNEL_MARK, PARALLEL_MARK, KERNEL_MARK, PARALLEL_MARK, MICROTILE_MARK]
    band = marks[1][1].child(0)
    assert band.get_type() == isl.schedule_node_type.band and band.band_member_get_coincident(0)
    assert not sched.contracted
    row = pf.schedule(K.row_sum, target="c")  # a row reduction keeps its accumulator in a register
    assert [n for n, _ in _marks(row.tree)] == [KERNEL_MARK, PARALLEL_MARK] and row.contracted == {"acc"}


def test_jacobi_2d_cuda_host_time_loop():
    sched = pf.schedule(K.jacobi_2d, target="cuda", params={"N": 100, "T": 10})
    assert 1 <= len(sched.kernels) <= 2
    root = sched.tree.get_root().child(0)
    assert root.get_type() == isl.schedule_node_type.band
    assert not root.band_member_get_coincident(0)
    t_only = isl.UnionMap("[N, T] -> { S0[t, i, j] -> [t]; S1[t, i, j] -> [t] }")
    partial = root.band_get_partial_schedule_union_map().intersect_domain(K.jacobi_2d.domains)
    assert partial.is_equal(t_only.intersect_domain(K.jacobi_2d.domains))
    for name, node in _marks(sched.tree):
        if name == KERNEL_MARK:
            assert node.get_schedule_depth() == 1


def test_tiling_invariant():
    """After tiling, i = 32*it + ii with 0 <= ii < 32 (C default)."""
    sched = pf.schedule(K.add_exp, target="c", fusion="none")
    node = _marks(sched.tree)[1][1].child(0)  # parallel mark -> tile band
    tile = node.band_get_partial_schedule_union_map()
    point = node.child(0).band_get_partial_schedule_union_map()
    both = tile.flat_range_product(point).intersect_domain(K.add_exp.domains)
    expected = isl.UnionMap(
        "[N, M] -> { S0[i, j] -> [it, jt, ii, jj] : i = 32it + ii and j = 32jt + jj and 0 <= ii < 32 and 0 <= jj < 32 }"
    ).intersect_domain(K.add_exp.domains)
    assert both.intersect_domain(isl.UnionSet("[N, M] -> { S0[i, j] }")).is_equal(
        expected.intersect_domain(isl.UnionSet("[N, M] -> { S0[i, j] }")))


def test_explicit_legal_schedule_accepted():
    sched = pf.schedule(K.add_exp, schedule="[N, M] -> { S0[i, j] -> [i, j, 0]; S1[i, j] -> [i, j, 1] }")
    assert sched.fusion == "explicit"
    assert len(sched.kernels) == 1


def test_explicit_schedule_parse_error():
    with pytest.raises(pf.PolyfuseError, match="cannot parse"):
        pf.schedule(K.add_exp, schedule="{ S0[i, j] -> [i, ")


def test_explain_names_blocking_dependence():
    sched = pf.schedule(normalise, fusion="smart")
    assert len(sched.kernels) >= 2
    text = sched.explain()
    assert "flow dependence on 'total'" in text
    assert "not fused" in text


def test_bad_arguments():
    with pytest.raises(pf.PolyfuseError, match="fusion"):
        pf.schedule(K.add_exp, fusion="most")
    with pytest.raises(pf.PolyfuseError, match="target"):
        pf.schedule(K.add_exp, target="fpga")
    with pytest.raises(pf.PolyfuseError, match="tile"):
        pf.schedule(K.add_exp, tile=(0, 4))
    with pytest.raises(pf.PolyfuseError, match="threads"):
        pf.schedule(K.add_exp, target="cuda", tile=(64, 64))
    with pytest.raises(pf.PolyfuseError, match="sizes"):
        pf.schedule(K.add_exp, params={"Q": 3})


def test_a_policy_keeps_its_first_legal_variant(monkeypatch):
    """The later variants of a policy (temporaries' order not relaxed for isl, then not at all) are only
    fallbacks: once one is legal, no other is finished (they never won, and cost deriche a third of its
    compile time), and a variant that fails the legality check hands over to the next."""
    from tests.kernels import BY_NAME  # deriche: its variants are different trees (add_exp's are one)

    k = BY_NAME["deriche"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    sched_module = __import__("importlib").import_module("polyfuse.schedule")
    finish = sched_module._finish
    calls = []

    def counting(prog, base, view, *args, **kwargs):
        calls.append(view.relaxed)
        return finish(prog, base, view, *args, **kwargs)

    monkeypatch.setattr(sched_module, "_finish", counting)
    first = pf.schedule(prog, target="c", fusion="min")
    assert len(calls) == 1  # (two variants were finished before)

    def first_refused(prog, base, view, *args, **kwargs):
        calls.append(view.relaxed)
        if len(calls) == 1:
            raise pf.IllegalTransformError("the first variant is refused")
        return finish(prog, base, view, *args, **kwargs)

    calls.clear()
    monkeypatch.setattr(sched_module, "_finish", first_refused)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fall back to fusion='none': the next variant is legal
        second = pf.schedule(prog, target="c", fusion="min")
    assert len(calls) == 2 and second.kernels and first.kernels
