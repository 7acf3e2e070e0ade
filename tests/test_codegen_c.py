"""The C/OpenMP back end: every corpus program, compiled under every fusion policy and tiling, agrees with the
reference interpreter; plus dtype coverage, the fusion outcome visible in the C text, and readability.

Two layers are tested. ``generate_c`` + ``CFunction`` on hand-built schedules (source order with a kernel mark
per top-level child, and a hand-fused producer/consumer) needs nothing but the printer. ``pf.compile`` runs the
whole pipeline through the scheduler.
"""

from __future__ import annotations

import re

import islpy as isl
import numpy as np
import pytest

import examples.kernels as corpus
import polyfuse as pf
from polyfuse.codegen.c import generate_c
from polyfuse.runtime.args import bind
from polyfuse.runtime.cpu import CFunction
from polyfuse.schedule.model import Kernel, Schedule

SIZES = {"N": 11, "M": 9, "K": 13, "T": 3}
FUSION = ("none", "min", "max", "smart")
TILES = ("auto", None)


# ----- helpers ------------------------------------------------------------------------------------


def make_inputs(prog: pf.Program, sizes: dict[str, int], seed: int = 0) -> dict:
    """Random arguments at ``sizes``; lu and cholesky get symmetric, diagonally dominant matrices."""
    rng = np.random.default_rng(seed)
    own = {n: sizes[n] for n in prog.params}
    kwargs: dict = {}
    for name in prog.arguments:
        if name in prog.arrays:
            a = prog.arrays[name]
            shape = a.concrete_shape(own)
            if a.dtype.is_float:
                x = rng.uniform(-1, 1, shape)
                if prog.name in ("lu", "cholesky"):
                    x = x @ x.T + shape[0] * np.eye(shape[0])
            else:
                x = rng.integers(-50, 50, shape)
            kwargs[name] = np.ascontiguousarray(x, dtype=a.dtype.numpy)
        else:
            kwargs[name] = prog.scalars[name].numpy(1.25 if prog.scalars[name].is_float else 3)
    kwargs.update({n: v for n, v in own.items() if n == "T"})
    return kwargs


def copy_args(kwargs: dict) -> dict:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


def assert_matches_reference(prog: pf.Program, run, sizes: dict[str, int] = SIZES) -> None:
    """Run ``run(**kwargs)`` and the reference on the same random inputs; compare every array argument."""
    args = make_inputs(prog, sizes)
    expected = copy_args(args)
    pf.reference(prog)(**expected)
    run(**args)
    for name in prog.arguments:
        if name in prog.arrays:
            tol = 1e-4 if prog.arrays[name].dtype == pf.f32 else 1e-9
            np.testing.assert_allclose(args[name], expected[name], rtol=tol, atol=tol, err_msg=f"{prog.name}: {name}")


def run_code(sched: Schedule):
    """A callable running ``generate_c(sched)`` directly (no scheduler, no Executable)."""
    code = generate_c(sched)
    fn = CFunction(code)
    prog = sched.program

    def run(**kwargs):
        b = bind(prog, kwargs)
        temps = {n: np.empty(prog.arrays[n].concrete_shape(b.sizes), prog.arrays[n].dtype.numpy) for n in code.temporaries}
        fn(*(b.sizes[a.name] if a.kind == "size" else b.scalars[a.name] if a.kind == "scalar"
             else b.arrays.get(a.name, temps.get(a.name)) for a in code.signature))

    return run


def _filter_statements(node: isl.ScheduleNode) -> tuple[str, ...]:
    sets: list[isl.Set] = []
    node.filter_get_filter().foreach_set(sets.append)
    return tuple(sorted(s.get_tuple_name() for s in sets))


def source_order_schedule(prog: pf.Program) -> Schedule:
    """The source order with a ``kernel`` mark above each top-level child (one kernel per top-level nest)."""
    node = prog.schedule.get_root().child(0)
    kernels: list[Kernel] = []
    if node.get_type() == isl.schedule_node_type.sequence:
        for k in range(node.n_children()):
            kernel = Kernel(f"k{k}", _filter_statements(node.child(k)))
            kernels.append(kernel)
            node = node.child(k).child(0).insert_mark(isl.Id("kernel", user=kernel)).parent().parent()
    else:
        kernel = Kernel("k0", tuple(s.name for s in prog.statements))
        kernels.append(kernel)
        node = node.insert_mark(isl.Id("kernel", user=kernel))
    return Schedule(prog, node.get_schedule(), "c", "none", tuple(kernels))


def fused_add_exp_schedule() -> Schedule:
    """add_exp with both statements in one parallel (i, j) nest and B contracted to a scalar."""
    prog = corpus.add_exp
    s0, s1 = (isl.Schedule.from_domain(isl.UnionSet.from_set(s.domain)) for s in prog.statements)
    band = isl.MultiUnionPwAff("[N, M] -> [{ S0[i, j] -> [(i)]; S1[i, j] -> [(i)] }, { S0[i, j] -> [(j)]; S1[i, j] -> [(j)] }]")
    tree = s0.sequence(s1).insert_partial_schedule(band)
    kernel = Kernel("k0", ("S0", "S1"), parallel_depth=1)
    node = tree.get_root().child(0).insert_mark(isl.Id("parallel")).insert_mark(isl.Id("kernel", user=kernel))
    return Schedule(prog, node.get_schedule(), "c", "max", (kernel,), contracted=frozenset({"B"}))


# ----- the printer alone --------------------------------------------------------------------------


@pytest.mark.parametrize("prog", corpus.ALL, ids=lambda p: p.name)
def test_source_order_matches_reference(prog):
    assert_matches_reference(prog, run_code(source_order_schedule(prog)))


def test_fused_producer_consumer_is_one_parallel_nest_without_b():
    sched = fused_add_exp_schedule()
    code = generate_c(sched)
    assert code.text.count("#pragma omp parallel for") == 1
    assert "B" not in [a.name for a in code.signature] and code.temporaries == ()
    assert not re.search(r"\bB\[", code.text)  # no global buffer: B is a private scalar
    body = code.text[code.text.index("#pragma omp parallel for"):]
    assert re.search(r"for \(int64_t c0 = 0; c0 < N; c0 \+= 1\) \{\n\s+float B;", body)
    assert_matches_reference(corpus.add_exp, run_code(sched))


def test_generated_code_is_readable():
    text = generate_c(source_order_schedule(corpus.gemm_acc)).text
    assert text.startswith("/* polyfuse: program gemm_acc")
    assert " *   kernel k0: S0, S1, S2" in text
    assert "void gemm_acc_kernel(\n    const int64_t " in text
    assert all(f"    const int64_t {p},\n" in text for p in "NMK")
    assert "    const float *restrict A,\n" in text and "    float *restrict C)" in text
    expected_nest = (
        "        for (int64_t c0 = 0; c0 < N; c0 += 1) {\n"
        "            for (int64_t c1 = 0; c1 < M; c1 += 1) {\n"
        "                acc = 0.0f;  /* S0 */\n"
        "                #pragma omp simd reduction(+:acc)\n"  # (reassociate=True, the default)
        "                for (int64_t c2 = 0; c2 < K; c2 += 1) {\n"
        "                    acc += A[c0 * K + c2] * B[c2 * M + c1];  /* S1 */\n"
    )
    assert expected_nest in text


def test_floor_division_and_modulo_indices_use_exact_helpers():
    text = generate_c(source_order_schedule(corpus.modulo)).text
    assert "#define polyfuse_floord" in text
    assert_matches_reference(corpus.modulo, run_code(source_order_schedule(corpus.modulo)))


I = pf.params("I")


@pf.program
def typed(x: pf.i32[I], y: pf.i32[I], u: pf.f32[I], v: pf.f64[I], k: pf.i32, s: pf.f32, d: pf.f64):
    """Every dtype, scalar arguments of each, integer floor division/modulo and the float intrinsics."""
    for i in range(I):
        y[i] = pf.max(x[i] // k, x[i] % k) + pf.abs(x[i]) * k + i
    for i in range(I):
        u[i] = pf.where(u[i] > 0.0, pf.sqrt(pf.abs(u[i])) * s, pf.tanh(u[i])) + pf.exp(u[i] * 0.5) + pf.log(pf.abs(u[i]) + 1.0)
    for i in range(I):
        v[i] = pf.pow(pf.abs(v[i]), 1.5) * d + pf.min(v[i], 0.25) + i * 0.5


def test_dtypes_and_scalar_arguments():
    text = generate_c(source_order_schedule(typed)).text
    for spelling in ("const int *restrict x", "const int k", "const float s", "const double d",
                     "pf_floordiv_i32(", "pf_mod_i32(", "pf_tanh_f32(", "pf_exp_f32(", "pf_log_f32(", "sqrtf(",
                     "pow(", "pf_fmin_f64("):
        assert spelling in text, spelling
    assert re.search(r"\b0\.5f\b", text)
    assert_matches_reference(typed, run_code(source_order_schedule(typed)), {"I": 17})


# ----- the whole pipeline -------------------------------------------------------------------------


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"tile={t}")
@pytest.mark.parametrize("fusion", FUSION)
@pytest.mark.parametrize("prog", corpus.ALL, ids=lambda p: p.name)
def test_compiled_matches_reference(prog, fusion, tile):
    exe = pf.compile(prog, target="c", fusion=fusion, tile=tile)
    assert_matches_reference(prog, exe)
    assert exe.code.target == "c" and exe.schedule.fusion == fusion


def test_fusion_max_producer_consumer_has_one_parallel_nest_and_no_b_buffer():
    exe = pf.compile(corpus.add_exp, target="c", fusion="max")
    a, c = np.random.default_rng(1).random((2, 65, 67), dtype=np.float32)  # work enough for OpenMP
    exe(A=a, C=c)
    np.testing.assert_allclose(c, np.exp(a + 1), rtol=1e-5)
    text = exe.code.text
    assert len(exe.schedule.kernels) == 1
    assert text.count("#pragma omp parallel for") == 1
    assert "B" in exe.schedule.contracted and "B" not in [x.name for x in exe.code.signature]
    assert not re.search(r"\bB\[", text)


def test_executable_specialises_per_shape():
    exe = pf.compile(corpus.add_exp, target="c")
    for n, m in ((4, 5), (6, 3), (4, 5)):
        a = np.ones((n, m), np.float32)
        c = np.zeros_like(a)
        exe(A=a, C=c)
        np.testing.assert_allclose(c, np.exp(2.0), rtol=1e-6)
    assert len(exe._specialisations) == 2
    with pytest.raises(pf.ShapeError):
        exe(A=np.ones((4, 5), np.float32), C=np.ones((5, 4), np.float32))


def test_compile_time_params_specialise_eagerly():
    exe = pf.compile(corpus.time_axpy, target="c", params={"N": 8, "T": 4})
    assert exe.schedule.params["N"] == 8
    x, y = np.ones(8), np.zeros(8)
    exe(x=x, y=y, a=0.5, T=4)
    np.testing.assert_allclose(y, 2.0)


# ----- the vectorisable math library (codegen/c_math.py) ------------------------------------------
#
# Each function is compared with numpy over random values in its interesting range, log-uniform magnitudes of
# both signs from the smallest subnormal to the largest float, random bit patterns (every class of float,
# NaNs included), and the special values. Errors are in ulps of the reference; NaN must match NaN exactly,
# and signed zeros and infinities are compared exactly. The references: f32 functions against numpy's f64
# result rounded to f32 (numpy's own f32 exp/log are up to 2-3 ulp off that, so it would be a poor ruler);
# f64 functions against numpy's f64 (glibc, itself within 1 ulp of the exact result). The bounds are the
# measured maxima (exact results computed with mpmath: exp 0.9, log 0.51, tanh 2.5 ulp in f64): exp and log
# are one rounding plus a tiny polynomial error, so 1 ulp from a reference that is itself rounded; tanh
# divides two rounded values and inherits expm1's error (~1.2 ulp after the 2^k rescaling): 2 ulp (f32),
# 3 ulp (f64); pow f32 is computed in double, so only the final rounding (and a double rounding of exact
# ties, e.g. 17^6) remains: 1 ulp.

ULP_BOUNDS = {("exp", "f32"): 1, ("log", "f32"): 1, ("tanh", "f32"): 2, ("pow", "f32"): 1,
              ("exp", "f64"): 1, ("log", "f64"): 1, ("tanh", "f64"): 3}
NUMPY_MATH = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "pow": np.power, "fmax": np.fmax, "fmin": np.fmin}
MATH_ARITY = {"exp": 1, "log": 1, "tanh": 1, "pow": 2, "fmax": 2, "fmin": 2}
MATH_CASES = [(f, d) for d in ("f32", "f64") for f in MATH_ARITY if (f, d) != ("pow", "f64")]


def _math_wrappers() -> str:
    """C source: the whole math library plus ``w_<fn>_<dtype>(n, x[, z], y)`` applying it elementwise."""
    from polyfuse.codegen import c_math

    lines = ["#include <math.h>", "#include <stdint.h>", c_math.math_source(c_math.all_parts())]
    for fn, dt in MATH_CASES:
        ct = "float" if dt == "f32" else "double"
        ins = ", ".join(f"const {ct} *restrict {v}" for v in "xz"[:MATH_ARITY[fn]])
        call = ", ".join(f"{v}[i]" for v in "xz"[:MATH_ARITY[fn]])
        lines.append(f"void w_{fn}_{dt}(int64_t n, {ins}, {ct} *restrict y)\n"
                     f"{{ for (int64_t i = 0; i < n; i++) y[i] = pf_{fn}_{dt}({call}); }}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def math_lib():
    from polyfuse.runtime.cpu import load_library

    return load_library(_math_wrappers())


def _apply(lib, fn: str, dt: str, *args: np.ndarray) -> np.ndarray:
    import ctypes

    args = tuple(np.ascontiguousarray(a) for a in args)
    out = np.empty_like(args[0])
    getattr(lib, f"w_{fn}_{dt}")(ctypes.c_int64(out.size), *(ctypes.c_void_p(a.ctypes.data) for a in (*args, out)))
    return out


def _ordinal(a: np.ndarray) -> np.ndarray:
    """Floats mapped monotonically onto integers (adjacent floats differ by 1; -0 and +0 both map to 0)."""
    it = np.int32 if a.dtype == np.float32 else np.int64
    i = a.view(it).astype(np.int64)
    return np.where(i < 0, -(i & np.int64(np.iinfo(it).max)), i)


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in ulps; NaN against NaN is 0, NaN against a number is huge."""
    g, w = _ordinal(got), _ordinal(want)
    same = (g >= 0) == (w >= 0)
    d = np.where(same, np.abs(g - np.where(same, w, 0)), np.int64(2) ** 62)
    d = np.where(np.isnan(got) & np.isnan(want), 0, d)
    return np.where(np.isnan(got) ^ np.isnan(want), np.int64(2) ** 62, d)


def _specials(np_dtype) -> np.ndarray:
    fi = np.finfo(np_dtype)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, fi.max, -fi.max, fi.tiny, -fi.tiny, fi.smallest_subnormal,
            -fi.smallest_subnormal, fi.tiny / 3, -fi.tiny / 7, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, -1.5,
            fi.eps, -fi.eps, 88.72, -87.33, -103.97, 709.78, -708.4, -745.1, 9.01, -9.01, 19.06, 2.0 ** 24, 2.0 ** 24 + 2]
    with np.errstate(over="ignore"):
        return np.array(vals, np_dtype)


def _math_inputs(np_dtype, lo: float, hi: float, n: int = 200_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    fi = np.finfo(np_dtype)
    itype = np.uint32 if np_dtype == np.float32 else np.uint64
    bits = rng.integers(0, np.iinfo(itype).max, n, dtype=itype, endpoint=True).view(np_dtype)
    mags = np.exp2(rng.uniform(np.log2(float(fi.smallest_subnormal)), np.log2(float(fi.max)), n))
    with np.errstate(over="ignore"):
        mags = (mags * rng.choice([-1.0, 1.0], n)).astype(np_dtype)
    return np.concatenate([_specials(np_dtype), rng.uniform(lo, hi, n).astype(np_dtype), mags, bits])


def _reference(fn: str, dt: str, *args: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dt == "f32":
            return NUMPY_MATH[fn](*(a.astype(np.float64) for a in args)).astype(np.float32)
        return NUMPY_MATH[fn](*args)


def _assert_specials_exact(got: np.ndarray, want: np.ndarray, args: tuple[np.ndarray, ...]) -> None:
    """Where the reference is NaN or infinite the result is exactly that, and zeros have the reference's sign
    (a zero against the smallest subnormal is left to the ulp bound: pow's exact ties such as 32^-30 = 2^-150)."""
    special = np.isnan(want) | np.isinf(want) | ((want == 0) & (got == 0))
    same = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    bad = np.nonzero(special & ~same)[0]
    assert bad.size == 0, [(tuple(a[k] for a in args), got[k], want[k]) for k in bad[:5]]


@pytest.mark.parametrize("fn, dt", [c for c in MATH_CASES if MATH_ARITY[c[0]] == 1], ids=lambda c: str(c))
def test_math_unary_within_ulps_of_numpy(math_lib, fn, dt):
    np_dtype = np.float32 if dt == "f32" else np.float64
    lo, hi = {"exp": (-760.0, 760.0), "log": (0.0, 10.0), "tanh": (-25.0, 25.0)}[fn]
    if dt == "f32" and fn == "exp":
        lo, hi = -110.0, 95.0
    x = _math_inputs(np_dtype, lo, hi)
    got, want = _apply(math_lib, fn, dt, x), _reference(fn, dt, x)
    err = ulp_error(got, want)
    worst = int(np.argmax(err))
    assert err[worst] <= ULP_BOUNDS[fn, dt], f"{fn}_{dt}({x[worst]!r}) = {got[worst]!r}, numpy {want[worst]!r}"
    _assert_specials_exact(got, want, (x,))


def test_math_special_values_exactly(math_lib):
    """The C99 special cases the reference interpreter and softmax rely on, spelled out."""
    lib = math_lib
    for dt, np_dtype in (("f32", np.float32), ("f64", np.float64)):
        x = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, -1.0, 1.0], np_dtype)
        e, lg, th = (_apply(lib, f, dt, x) for f in ("exp", "log", "tanh"))
        assert e[0] == 0 and not np.signbit(e[0]) and e[1] == np.inf and np.isnan(e[2]) and e[3] == e[4] == 1
        assert lg[1] == np.inf and np.isnan(lg[2]) and lg[3] == lg[4] == -np.inf and np.isnan(lg[5]) and lg[6] == 0
        assert th[0] == -1 and th[1] == 1 and np.isnan(th[2]) and th[3] == 0 and np.signbit(th[3]) and not np.signbit(th[4])
        m = _apply(lib, "fmax", dt, np.array([np.nan, 1.0, -np.inf], np_dtype), np.array([2.0, np.nan, -3.0], np_dtype))
        np.testing.assert_array_equal(m, np.array([2.0, 1.0, -3.0], np_dtype))


def test_math_pow_f32_within_one_ulp(math_lib):
    rng = np.random.default_rng(1)
    sp = _specials(np.float32)
    gx, gy = (g.ravel() for g in np.meshgrid(sp, sp))  # every pair of special values
    n = 200_000
    x = np.concatenate([gx, rng.uniform(0, 4, n), np.exp2(rng.uniform(-149, 128, n)) * rng.choice([-1, 1], n),
                        np.round(rng.uniform(-50, 50, n))]).astype(np.float32)
    y = np.concatenate([gy, rng.uniform(-40, 40, n), rng.uniform(-3, 3, n), np.round(rng.uniform(-30, 30, n))]).astype(np.float32)
    got, want = _apply(math_lib, "pow", "f32", x, y), _reference("pow", "f32", x, y)
    err = ulp_error(got, want)
    worst = int(np.argmax(err))
    assert err[worst] <= ULP_BOUNDS["pow", "f32"], f"pow({x[worst]!r}, {y[worst]!r}) = {got[worst]!r}, numpy {want[worst]!r}"
    _assert_specials_exact(got, want, (x, y))


@pytest.mark.parametrize("dt", ("f32", "f64"))
def test_math_fmax_fmin_match_numpy(math_lib, dt):
    np_dtype = np.float32 if dt == "f32" else np.float64
    a = _math_inputs(np_dtype, -10.0, 10.0, n=50_000)
    b = np.random.default_rng(2).permutation(a)
    for fn in ("fmax", "fmin"):
        got, want = _apply(math_lib, fn, dt, a, b), NUMPY_MATH[fn](a, b)
        assert np.array_equal(got, want, equal_nan=True), fn


def _gcc_vector_report(source: str) -> str:
    """GCC's report of the loops it vectorised in ``source`` compiled with the runtime's flags."""
    import subprocess
    import tempfile
    from pathlib import Path

    from polyfuse.runtime.cpu import compiler, compiler_flags

    cc = compiler()
    macros = subprocess.run([cc, "-dM", "-E", "-"], input="", capture_output=True, text=True, timeout=60).stdout
    if "__GNUC__" not in macros or "__clang__" in macros:
        pytest.skip("the vectorisation report needs GCC")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.c"
        src.write_text(source)
        proc = subprocess.run([cc, *compiler_flags(cc), "-fopt-info-vec-optimized", str(src), "-o", str(Path(d) / "k.so")],
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _vectorised_lines(report: str) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(r"k\.c:(\d+):\d+: optimized: loop vectorized", report)}


def test_math_functions_vectorise():
    source = _math_wrappers()
    lines = _vectorised_lines(_gcc_vector_report(source))
    for fn, dt in MATH_CASES:
        k = next(n for n, line in enumerate(source.splitlines(), 1) if line.startswith(f"void w_{fn}_{dt}("))
        assert k + 1 in lines, f"the loop calling pf_{fn}_{dt} was not vectorised"


# ----- fused programs with transcendental math, end to end ------------------------------------------


def _innermost_loop_lines(text: str) -> list[int]:
    """Line numbers of the ``for`` loops whose body holds no other loop."""
    lines = text.splitlines()
    out = []
    for k, line in enumerate(lines):
        if line.lstrip().startswith("for ("):
            depth, j = 0, k
            inner = True
            while True:
                depth += lines[j].count("{") - lines[j].count("}")
                j += 1
                if depth <= 0 or j >= len(lines):
                    break
                inner = inner and not lines[j].lstrip().startswith("for (")
            if inner:
                out.append(k + 1)
    return out


N_, M_ = pf.params("N_ M_")


@pf.program
def math_chain(A: pf.f32[N_, M_], B: pf.f32[N_, M_], C: pf.f32[N_, M_], D: pf.f32[N_, M_]):
    """A fused f32 chain through every float intrinsic, written as separate statements."""
    T1 = pf.empty((N_, M_), pf.f32)
    T2 = pf.empty((N_, M_), pf.f32)
    for i in range(N_):
        for j in range(M_):
            T1[i, j] = pf.tanh(A[i, j] * B[i, j] + C[i, j]) + pf.exp(A[i, j] * 3.0)
    for i in range(N_):
        for j in range(M_):
            T2[i, j] = pf.log(pf.abs(T1[i, j]) + 1e-3) * pf.sqrt(pf.abs(B[i, j]))
    for i in range(N_):
        for j in range(M_):
            D[i, j] = pf.max(T2[i, j], -1.0) + pf.pow(pf.abs(C[i, j]), B[i, j]) - pf.min(A[i, j], 0.25)


@pf.program
def math_chain64(X: pf.f64[N_, M_], Y: pf.f64[N_, M_]):
    """The vectorised f64 functions, fused: sigmoid of tanh, log, max (f64 pow stays libm's, a scalar call)."""
    for i in range(N_):
        for j in range(M_):
            Y[i, j] = 1.0 / (1.0 + pf.exp(-pf.tanh(X[i, j] * 4.0))) + pf.log(pf.abs(X[i, j]) + 0.5) + pf.max(X[i, j], 0.0)


@pytest.mark.parametrize("fusion", ("none", "smart", "max"))
@pytest.mark.parametrize("prog", (math_chain, math_chain64), ids=lambda p: p.name)
def test_fused_math_matches_reference_and_numpy(prog, fusion):
    exe = pf.compile(prog, target="c", fusion=fusion)
    assert_matches_reference(prog, exe, {"N_": 37, "M_": 45})
    if prog is math_chain:
        rng = np.random.default_rng(3)
        a, b, c = (rng.uniform(-2, 2, (37, 45)).astype(np.float32) for _ in range(3))
        d = np.empty_like(a)
        exe(A=a, B=b, C=c, D=d)
        t1 = np.tanh(a * b + c) + np.exp(a * np.float32(3))
        t2 = np.log(np.abs(t1) + np.float32(1e-3)) * np.sqrt(np.abs(b))
        want = np.fmax(t2, np.float32(-1)) + np.power(np.abs(c), b) - np.fmin(a, np.float32(0.25))
        np.testing.assert_allclose(d, want, rtol=1e-4, atol=1e-5)


def test_fused_math_inner_loops_vectorise():
    """Every innermost loop of the fused chain (inside ``omp parallel for``) is vectorised by GCC."""
    for prog in (math_chain, math_chain64):
        exe = pf.compile(prog, target="c", fusion="smart", params={"N_": 512, "M_": 512})
        text = exe.code.text
        assert "#pragma omp parallel for" in text and "tanhf(" not in text and "expf(" not in text
        inner = _innermost_loop_lines(text)
        assert inner
        vectorised = _vectorised_lines(_gcc_vector_report(text))
        # (gcc reports a loop under ``#pragma omp simd`` at its body's first line)
        missing = {k for k in inner if not {k, k + 1} & vectorised}
        assert not missing, [text.splitlines()[k - 1] for k in sorted(missing)]


def test_softmax_with_infinities_matches_numpy():
    """softmax through pf.ops: max with -inf, exp(-inf) = 0, rows of mixed magnitude."""
    from polyfuse import ops

    R_, D_ = pf.params("R_ D_")
    g = pf.Graph("softmax_inf")
    prog = g.build(y=ops.softmax(g.input("x", (R_, D_)), axis=-1))
    rng = np.random.default_rng(4)
    x = rng.uniform(-30, 30, (23, 131)).astype(np.float32)
    x[0, :] = -np.inf
    x[0, 5] = 1.0  # one finite entry: y = [0, ..., 1, ..., 0]
    x[1, ::3] = -np.inf
    x[2, :] *= 10.0  # exp underflows to 0 for most entries
    for fusion in ("none", "smart"):
        exe = pf.compile(prog, target="c", fusion=fusion)
        y = np.empty_like(x)
        exe(x=x, y=y)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
        assert y[0, 5] == 1.0 and np.count_nonzero(y[0]) == 1 and np.all(y[1, ::3] == 0)
        ref = {"x": x.copy(), "y": np.empty_like(x)}
        pf.reference(prog)(**ref)
        np.testing.assert_allclose(y, ref["y"], rtol=1e-5, atol=1e-7)
