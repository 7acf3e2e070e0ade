"""C target: a kernel whose schedule has a parallel loop with at least two iterations at the given sizes
runs it as an OpenMP loop, even where the marked loop itself has one iteration (batch 1) or the tile
search would cover a whole dimension with one tile; results are checked against numpy."""

from __future__ import annotations

import importlib
import re

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from polyfuse.codegen.c_openmp import two
from polyfuse.codegen.code import Argument, Code

Nb, C, H, W, F = pf.params("Nb C H W F")


def _omp_loops(text: str) -> list[tuple[str, str]]:
    """(pragma, the loop header that follows it) for every OpenMP loop of the generated C."""
    lines = text.splitlines()
    return [(ln.strip(), lines[k + 1].strip()) for k, ln in enumerate(lines) if "#pragma omp parallel for" in ln]


def _upper(header: str) -> int:
    m = re.search(r"<= (\d+);", header)
    assert m, header
    return int(m.group(1))


def test_conv2d_with_batch_one_runs_in_parallel():
    """Batch 1, odd sizes, and work enough to pay for the team (tiny work runs serially)."""
    g = pf.Graph("conv")
    x = g.input("x", (Nb, C, H, W), pf.f32)
    w = g.input("w", (F, C, 3, 3), pf.f32)
    prog = g.build(y=pf.ops.relu(pf.ops.conv2d(x, w, padding=1)))
    sizes = {"Nb": 1, "C": 13, "H": 15, "W": 21, "F": 16}
    exe = pf.compile(prog, target="c", params=sizes)
    loops = _omp_loops(exe.code.text)
    assert loops, "no OpenMP loop in a kernel with 16 independent filters"
    assert all(_upper(header) >= 1 for _, header in loops)  # every OpenMP loop has at least 2 iterations
    rng = np.random.default_rng(0)
    xv = rng.uniform(-1, 1, (1, 13, 15, 21)).astype(np.float32)
    wv = rng.uniform(-1, 1, (16, 13, 3, 3)).astype(np.float32)
    y = np.zeros((1, 16, 15, 21), np.float32)
    exe(x=xv, w=wv, y=y)
    pad = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(y)
    for r in range(3):
        for s in range(3):
            want += np.einsum("nchw,fc->nfhw", pad[:, :, r:r + 15, s:s + 21], wv[:, :, r, s])
    np.testing.assert_allclose(y, np.maximum(want, 0), rtol=1e-5, atol=1e-5)


def test_batch_of_one_parallelises_the_next_loop():
    g = pf.Graph("ew")
    x = g.input("x", (Nb, H, W), pf.f32)
    prog = g.build(y=pf.ops.exp(x + 1.0))
    sizes = {"Nb": 1, "H": 64, "W": 64}
    exe = pf.compile(prog, target="c", params=sizes)
    loops = _omp_loops(exe.code.text)
    assert loops and all(_upper(header) >= 1 for _, header in loops)
    xv = np.random.default_rng(1).uniform(-1, 1, (1, 64, 64)).astype(np.float32)
    y = np.zeros_like(xv)
    exe(x=xv, y=y)
    np.testing.assert_allclose(y, np.exp(xv + 1), rtol=1e-6)


def test_two_parallel_tile_loops_are_collapsed():
    M, K, N = pf.params("M K N")
    g = pf.Graph("mm")
    a = g.input("a", (M, K), pf.f32)
    b = g.input("b", (K, N), pf.f32)
    prog = g.build(c=a @ b)
    text = pf.codegen(pf.schedule(prog, target="c", params={"M": 64, "K": 64, "N": 512})).text
    assert any("collapse(2)" in pragma for pragma, _ in _omp_loops(text))


MEDIUM = {"gemm": {"NI": 200, "NJ": 220, "NK": 240}, "2mm": {"NI": 180, "NJ": 190, "NK": 210, "NL": 220},
          "syrk": {"M": 200, "N": 240}, "covariance": {"M": 240, "N": 260}}  # (PolyBench/C 4.2.1's MEDIUM)


@pytest.mark.parametrize("name", sorted(MEDIUM))
def test_collapse_joins_only_the_band_s_two_parallel_members(name):
    """At PolyBench's MEDIUM sizes isl elides the lane tile loop of these contractions (fewer lanes than one
    tile), so the loop printed right inside the row tiles is the k tile loop, which carries the sum.
    Collapsed with the row tiles, two threads updated the same rows at once (a race: 2mm's ``tmp`` came
    out wrong in one benchmark run of ten). Every ``collapse(2)`` joins a loop and its band successor."""
    from tests.kernels import BY_NAME

    k = BY_NAME[name]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    params = {p: MEDIUM[name][p.upper()] for p in prog.params}
    text = pf.codegen(pf.schedule(prog, target="c", params=params)).text
    assert _omp_loops(text)  # (still parallel: over the row tiles)
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if "collapse(2)" in line:
            outer, inner = (int(re.search(r"for \(int64_t c(\d+) =", x).group(1)) for x in lines[n + 1:n + 3])
            assert inner == outer + 1, (line, lines[n + 1], lines[n + 2])


def test_a_printed_openmp_loop_that_would_race_is_a_compile_error(monkeypatch):
    """The printer checks each OpenMP loop it emits against the dependences: with the session-10 rule
    back (collapse whatever perfectly nested loop follows), 2mm at MEDIUM would collapse the row tiles
    with the k tiles; that is now a CodegenError naming the carried dependence, not a race at run time.
    The rule as it is passes the same check on every PolyBench-style kernel (the tests above)."""
    from polyfuse.codegen import c as c_printer
    from tests.kernels import BY_NAME

    def collapse_any(self, node, it):
        inner = node.for_get_body()
        return two(it) and inner.get_type() == isl.ast_node_type.for_ and not inner.for_is_degenerate()

    tile_shapes = importlib.import_module("polyfuse.schedule.tiling.tile_shapes")
    monkeypatch.setattr(tile_shapes, "full_width_vector_units", lambda: False)  # (Kc 128: 2mm's k has two tiles)
    k = BY_NAME["2mm"]
    prog = pf.from_c(str(k.path), function=k.function, defines=k.defines, assume=k.assume)
    sched = pf.schedule(prog, target="c", params={p: MEDIUM["2mm"][p.upper()] for p in prog.params})
    monkeypatch.setattr(c_printer._CPrinter, "_collapsible", collapse_any)
    with pytest.raises(pf.CodegenError, match=r"would emit an OpenMP loop that races .*flow dependence on array '\w+'.*"
                                              r"carries it"):
        pf.codegen(sched)


def test_threads_option_sets_the_count_for_the_call_and_restores_it():
    from polyfuse.runtime import cpu

    g = pf.Graph("ew1")
    x = g.input("x", (H, W), pf.f32)
    exe = pf.compile(g.build(y=pf.ops.exp(x)), target="c", threads=1)
    xv = np.linspace(-1, 1, 128 * 65, dtype=np.float32).reshape(128, 65)  # enough work for an OpenMP loop
    np.testing.assert_allclose(exe(xv), np.exp(xv), rtol=1e-6)
    lib = exe.compiled.function.library
    before = lib.omp_get_max_threads()
    # a library whose entry records OpenMP's count while it runs, called the way compiled programs are
    probe = Code("#include <stdint.h>\nint omp_get_max_threads(void);\n"
                 "void probe_kernel(int32_t *restrict seen) { seen[0] = omp_get_max_threads(); }\n",
                 "c", (), "probe_kernel", (Argument("seen", "array", pf.i32),))
    function = cpu.CFunction(probe)
    seen = np.zeros(1, np.int32)
    function.call_in_team([seen], 3)
    assert seen[0] == 3 and lib.omp_get_max_threads() == before
    seen[0] = 0
    function.bound([seen], before + 2)()  # a prepared call sets it in C, around the same entry
    assert seen[0] == before + 2 and lib.omp_get_max_threads() == before
    function.bound([seen])()
    assert seen[0] == before
    with pytest.raises(pf.PolyfuseError, match="threads= must be a positive int"):
        pf.compile(g.build(y=pf.ops.exp(x)), target="c", threads=0)


def _random_args(prog: pf.Program, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name in prog.arguments:
        arr = prog.arrays[name]
        out[name] = rng.uniform(1, 2, arr.concrete_shape(sizes)).astype(arr.dtype.numpy)
    return out


@pytest.mark.parametrize("name, sizes", [("jacobi_1d", {"N": 5003, "T": 3}), ("jacobi_2d", {"N": 71, "T": 3}),
                                         ("lu", {"N": 23}), ("floyd_warshall", {"N": 21}), ("cholesky", {"N": 17})])
def test_host_loops_keep_one_parallel_region(name, sizes):
    from examples import kernels as K

    prog = getattr(K, name)
    exe = pf.compile(prog, target="c", params=sizes)
    text = exe.code.text
    if name.startswith("jacobi"):  # a time loop around parallel kernels: one region, no fork/join per step
        assert text.count("#pragma omp parallel\n") == 1 and "#pragma omp parallel for" not in text
        assert text.count("#pragma omp for") == 2
    args = _random_args(prog, sizes)
    if name == "cholesky":  # symmetric positive definite
        n = sizes["N"]
        a = args["A"]
        args["A"] = (a @ a.T + n * np.eye(n)).astype(a.dtype)
    want = {k: v.copy() for k, v in args.items()}
    scalars = {k: v for k, v in sizes.items() if k not in ("N",)}
    exe(**args, **scalars)
    pf.reference(prog)(**want, **scalars)
    for k in args:
        np.testing.assert_allclose(args[k], want[k], rtol=1e-9 if args[k].dtype == np.float64 else 1e-5, err_msg=k)


T = pf.params("T")


@pf.program
def _host_mix(A: pf.f64[W], B: pf.f64[W]):
    for t in range(T):
        for i in range(W):
            B[i] = A[i] * 0.5 + 1.0
        for i in range(1, W):
            A[i] = A[i - 1] * 0.25 + B[i]


def test_sequential_kernel_inside_a_region_runs_on_one_thread():
    exe = pf.compile(_host_mix, target="c", params={"W": 5001, "T": 6}, fusion="none")
    text = exe.code.text
    assert "#pragma omp parallel\n" in text and "#pragma omp single" in text and "#pragma omp for" in text
    rng = np.random.default_rng(9)
    a, b = rng.uniform(0, 1, 5001), rng.uniform(0, 1, 5001)
    want_a, want_b = a.copy(), b.copy()
    pf.reference(_host_mix)(A=want_a, B=want_b, T=6)
    for _ in range(5):  # racing threads in the single kernel would show up as differences
        got_a, got_b = a.copy(), b.copy()
        exe(A=got_a, B=got_b, T=6)
        np.testing.assert_array_equal(got_a, want_a)
        np.testing.assert_array_equal(got_b, want_b)


@pf.program(assume="W >= 1")
def _host_singles(A: pf.f64[W], B: pf.f64[W], s: pf.f64[T]):
    """Per step: a scalar sum, a scale that needs it, then a parallel update (gramschmidt's shape)."""
    for t in range(T):
        for i in range(1, W):
            s[t] = s[t] + A[i - 1] * A[i]
        A[0] = s[t] * 0.001
        for i in range(1, W):
            B[i] = A[i] * 0.5 + B[i - 1] * 0.25
        for i in range(W):
            A[i] = A[i] * 0.99 + B[i] * 0.01


def test_consecutive_one_thread_kernels_share_one_omp_single():
    """The kernels of a host loop's region that run on one thread, one after another, are one ``omp
    single`` (one barrier per step, not one per kernel: gramschmidt's four per column cost it its second
    thread), each still in its own labelled block, which the profiler times."""
    exe = pf.compile(_host_singles, target="c", params={"W": 9000, "T": 5}, fusion="none", threads=2)
    text = exe.code.text
    singles = text.count("#pragma omp single")
    labelled = text.count("(one thread of the team: omp single) */")
    assert singles == 1 and labelled == 3, text
    rng = np.random.default_rng(4)
    a, b, s = rng.uniform(0, 1, 9000), rng.uniform(0, 1, 9000), np.zeros(5)
    want = {"A": a.copy(), "B": b.copy(), "s": s.copy()}
    pf.reference(_host_singles)(**want, T=5)
    for _ in range(3):  # racing threads would show up as differences
        got = {"A": a.copy(), "B": b.copy(), "s": s.copy()}
        exe(**got, T=5)
        for k in got:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12, err_msg=k)
    got = {"A": a.copy(), "B": b.copy(), "s": s.copy()}
    profile = exe.profile(**got, T=5)
    assert [k.launches for k in profile.kernels] == [5] * len(profile.kernels)


def test_a_batch_of_one_never_hands_parallelism_to_a_reduction_loop():
    """Regression (fuzzer): marks of different kernels share iterator names; the hand-over to the next
    loop must follow the kernel's own band, never another kernel's (here the row sums' next member is the
    reduction: running it in parallel raced on the sums)."""
    g = pf.Graph("ln")
    x = g.input("x", (2, 55), pf.f64)
    prog = g.build(y=pf.ops.layernorm(x, eps=1e-5))
    exe = pf.compile(prog, target="c", fusion="min", params={})
    text = exe.code.text
    for kernel in text.split("/* kernel ")[1:]:
        if "+= x[" in kernel:  # the row-sum kernel: its only parallel member has a single tile
            body = kernel.split("*/", 1)[1]
            assert "#pragma omp parallel" not in body and "#pragma omp for" not in body  # (omp simd is fine)
    xv = np.random.default_rng(0).uniform(-1, 1, (2, 55))
    want = np.zeros((2, 55))
    pf.reference(prog)(x=xv, y=want)
    for _ in range(20):
        y = np.zeros((2, 55))
        exe(x=xv, y=y)
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_tiny_work_runs_serially_and_the_same_program_at_size_runs_in_parallel():
    """Starting the OpenMP team costs microseconds (milliseconds when it sleeps): a launch with fewer than
    SERIAL_INSTANCES statement instances is a plain loop nest; the same program with more work is not."""
    from polyfuse.schedule.mapping.kernels import SERIAL_INSTANCES

    g = pf.Graph("ew2")
    x = g.input("x", (H, W), pf.f32)
    prog = g.build(y=pf.ops.exp(x + 1.0))
    small = pf.compile(prog, target="c", params={"H": 8, "W": 9})
    assert "omp parallel" not in small.code.text and "omp for" not in small.code.text
    # each launch too small for the team, everywhere: the program runs as written, and explain() says why
    assert "every kernel runs on one thread at these sizes" in small.schedule.explain()
    xv = np.linspace(-1, 1, 72, dtype=np.float32).reshape(8, 9)
    np.testing.assert_allclose(small(xv), np.exp(xv + 1), rtol=1e-6)
    big = {"H": 2, "W": SERIAL_INSTANCES // 2}
    assert _omp_loops(pf.compile(prog, target="c", params=big).code.text)
    host = pf.compile(_host_mix, target="c", params={"W": 64, "T": 1000}, fusion="none")
    assert "omp parallel" not in host.code.text and "omp for" not in host.code.text  # 64 per launch, however many launches


def test_workers_are_placed_one_per_cpu_and_the_caller_is_left_free():
    """A sleeping OpenMP team must wake on CPUs of its own (see polyfuse.runtime.placement): after a call,
    each worker thread of the team is bound to one CPU and the calling thread keeps its affinity.
    Checked in a fresh process, where no other test has started an OpenMP team."""
    import os
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    script = (
        "import os, numpy as np, polyfuse as pf\n"
        "H, W = pf.params('H W')\n"
        "g = pf.Graph('ew3'); x = g.input('x', (H, W), pf.f32)\n"
        "exe = pf.compile(g.build(y=pf.ops.exp(x)), target='c', threads=2)\n"
        "exe(np.ones((256, 64), np.float32))\n"
        "me = os.sched_getaffinity(0)\n"
        "tasks = [int(t) for t in os.listdir('/proc/self/task') if int(t) != os.getpid()]\n"
        "bound = [t for t in tasks if len(os.sched_getaffinity(t)) == 1]\n"
        "print(len(me), len(bound))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    caller, bound = map(int, out.stdout.split())
    assert caller == len(os.sched_getaffinity(0)) and bound >= 1
    env["POLYFUSE_PLACE_WORKERS"] = "0"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1] == "0"


@pf.program
def _rowscan(A: pf.f32[H, W]):
    for i in range(H):
        for j in range(1, W):
            A[i, j] = A[i, j - 1] + A[i, j]


def test_a_chosen_parallel_loop_leads_the_kernel_and_a_carried_one_is_refused():
    """parallel= puts the named loop outermost and parallel (C: the OpenMP loop, CUDA: the mapped
    dimension); one that carries a dependence is an IllegalTransformError naming the dependence."""
    from examples import kernels as K

    sizes = {"N": 64, "M": 96, "K": 32}
    exe = pf.compile(K.gemm_acc, target="c", params=sizes, parallel={"S1": "j"})
    (pragma, header), = _omp_loops(exe.code.text)
    assert _upper(header) == 96 // 8 - 1  # over j's tiles (8 wide), not i's
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (64, 32)).astype(np.float32), rng.uniform(-1, 1, (32, 96)).astype(np.float32)
    np.testing.assert_allclose(exe(A=a, B=b), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(pf.IllegalTransformError, match=r"loop 'j' cannot run in parallel: the flow dependence on 'A' "
                                                       r"from S0 to S0 is carried by it"):
        pf.schedule(_rowscan, target="c", params={"H": 100, "W": 100}, parallel={"S0": "j"})
    cuda = pf.schedule(_rowscan, target="cuda", params={"H": 100, "W": 100}, parallel={"S0": "i"})
    assert cuda.kernels[0].grid and cuda.kernels[0].block == (32,)
    for bad, message in (({"S9": "i"}, "does not have"), ({"S0": "q"}, "not one of its loop iterators"),
                         ({"S0": ("i", "i")}, "distinct iterator names")):
        with pytest.raises(pf.PolyfuseError, match=message):
            pf.schedule(_rowscan, target="c", parallel=bad)


def test_a_tiny_kernel_beside_parallel_ones_says_why_it_is_serial():
    g = pf.Graph("mixed")
    x = g.input("x", (H, W), pf.f32)
    v = g.input("v", (W,), pf.f32)
    prog = g.build(y=pf.ops.exp(x + 1.0), z=v * 2.0)
    sched = pf.schedule(prog, target="c", params={"H": 256, "W": 64}, fusion="none")
    explain = sched.explain()
    assert "64 statement instances per launch at these sizes, fewer than 4096" in explain, explain
    assert any(k.parallel_depth for k in sched.kernels)


def test_code_without_a_parallel_region_is_called_without_openmp(monkeypatch):
    """A program with no parallel region at its sizes (here too small for one) never starts a team, so its
    calls, plain or prepared, with or without ``threads=``, go straight to the entry: OpenMP's thread count
    is neither read nor set around them. Code with a region goes through the team wrapper."""
    from polyfuse.runtime import cpu

    g = pf.Graph("tiny")
    x = g.input("x", (4, 5), pf.f32)
    prog = g.build(y=pf.ops.exp(x))
    xv = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    exe = pf.compile(prog, target="c", threads=2)
    exe(xv)
    function = exe.compiled.function
    assert "omp parallel" not in function.code.text and not cpu.uses_openmp(function.code.text)
    assert not function.parallel

    def no_team(*args):
        raise AssertionError("the team wrapper was called")

    monkeypatch.setattr(function, "in_team", no_team)
    np.testing.assert_allclose(exe(xv), np.exp(xv), rtol=1e-6)
    y = np.zeros((4, 5), np.float32)
    exe.prepare(xv, y)()
    np.testing.assert_allclose(y, np.exp(xv), rtol=1e-6)
    assert cpu.uses_openmp("#pragma omp parallel for schedule(static)\n") and cpu.uses_openmp("n = omp_get_max_threads();")
    assert not cpu.uses_openmp("#pragma omp simd\nfor (;;) {}\n")
