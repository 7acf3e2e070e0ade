"""Vectorisable C implementations of the value intrinsics, emitted into generated C by :mod:`polyfuse.codegen.c`.

Why: glibc's ``expf``/``tanhf``/``logf`` are opaque scalar calls, so a fused loop that calls one cannot be
auto-vectorised and loses to numpy's SIMD ufuncs. These functions are ``static inline`` (always inlined
under GCC and Clang, so a kernel with many calls cannot exhaust the inliner's budget), branch-free (every
special case is a select, which GCC if-converts into blends), call nothing but ``fabs``/``copysign``/``sqrt``
(which compile to single instructions), reinterpret floats through unions, and use only integer operations
AVX2 has for the element width (no 64-bit arithmetic shifts, no int64 <-> double conversions), so GCC at
``-O3`` vectorises a loop that calls them. They need no special flags beyond what :mod:`polyfuse.runtime.cpu`
passes (in particular no ``-ffast-math``: NaN and infinity semantics are kept).

The algorithms (written for polyfuse, in the classical style):

* ``exp``: ``k = round(x / ln2)`` by the add-a-shift trick (so ``k`` is read from the float's bits, with no
  float-to-int conversion), ``r = x - k ln2`` with ``ln2`` split in two so ``k * ln2_hi`` is exact, a
  polynomial for ``e^r - 1`` on ``|r| <= ln2/2``, then ``2^k`` applied as two exactly representable
  factors ``2^k1 * 2^k2`` so that results in the subnormal range are rounded once and overflow gives inf.
  The input is clamped to where the result is 0 or inf, which also maps ``-inf`` to 0 and ``inf`` to inf;
  NaN fails every comparison and flows through. f32 uses a degree-6 minimax polynomial (fitted for
  polyfuse, error 0.05 ulp) and clamps ``|x|`` to 104 with an unsigned integer ``min`` on its bits, NaN
  restored by one final select: GCC turns a two-sided float clamp into three mask compares and two blends
  (not ``vmaxps``, whose NaN rule differs), which cost softmax a fifth of its time. f64 keeps the Taylor
  polynomial of degree 14.
* ``tanh``: ``tanh|x| = -m / (2 + m)`` with ``m = expm1(-2|x|)``, computed like ``exp`` as
  ``2^k (e^r - 1) + (2^k - 1)`` (no cancellation for small ``|x|``), sign restored with ``copysign``.
* ``log``: subnormals rescaled, ``x = 2^e m`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the bits,
  ``f = m - 1`` (exact), ``s = f / (2 + f)``, the atanh series in ``s^2``, and the result assembled as
  ``e ln2_hi + (f - (f^2/2 - (s (f^2/2 + R) + e ln2_lo)))`` so the rounding of ``s`` only touches small terms;
  0 -> -inf, negatives -> NaN, inf -> inf by selects.
* ``pow`` (f32): ``exp(y log|x|)`` evaluated in double (``log`` and ``exp`` above, f64), which leaves far less
  than one float ulp of error even where ``y log|x|`` is near the overflow threshold; C99's special cases
  (``pow(x, 0) = 1``, ``pow(1, y) = 1``, ``pow(-1, +-inf) = 1``, odd integer powers of negative numbers and of
  -0, NaN for a negative finite base with a non-integer exponent) are selects. f64 ``pow`` stays libm's: an
  accurate vector version needs a double-double logarithm.
* ``max``/``min``: C's ``fmax``/``fmin`` (a NaN operand is ignored), as selects, since GCC only inlines the
  libm functions under ``-ffinite-math-only``.

Multiply-adds go through ``PF_FMAF``/``PF_FMA``: a fused ``fma`` where the target has one (``-march=native``
on x86-64 with FMA, or AArch64), ``a * b + c`` elsewhere. GCC does not contract ``a * b + c`` by itself in
ISO C mode (``-std=c99`` implies ``-ffp-contract=off``), so without it the polynomials ran as separate
multiplies and adds. Results can differ by one rounding between a machine with FMA and one without; both
stay within the bounds below.

Accuracy (tested in ``tests/test_codegen_c.py`` against numpy over the whole range and the special values):
``exp``, ``log`` within 1 ulp in f32 and f64, ``tanh`` within 2 ulp in f32 and 3 ulp in f64, ``pow`` f32
within 1 ulp.
"""

from __future__ import annotations

from collections.abc import Iterable

_BITS = """\
#if defined(__GNUC__)
#define PF_MATH static inline __attribute__((always_inline))
#else
#define PF_MATH static inline
#endif
typedef union { float f; uint32_t u; } pf_f32_bits;
typedef union { double f; uint64_t u; } pf_f64_bits;
PF_MATH uint32_t pf_as_u32(float x) { pf_f32_bits b; b.f = x; return b.u; }
PF_MATH float pf_as_f32(uint32_t u) { pf_f32_bits b; b.u = u; return b.f; }
PF_MATH uint64_t pf_as_u64(double x) { pf_f64_bits b; b.f = x; return b.u; }
PF_MATH double pf_as_f64(uint64_t u) { pf_f64_bits b; b.u = u; return b.f; }
#if defined(__GNUC__) && (defined(__FMA__) || defined(__aarch64__))
#define PF_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#define PF_FMA(a, b, c) __builtin_fma((a), (b), (c))
#else
#define PF_FMAF(a, b, c) ((a) * (b) + (c))
#define PF_FMA(a, b, c) ((a) * (b) + (c))
#endif
"""

# e^r - 1 on |r| <= ln2/2 (a little more after rounding k): Taylor to degree 8 (f32: truncation < 2e-9
# relative) and 14 (f64: < 3e-19 relative), evaluated as r + r^2 * (1/2 + r/6 + ...).
_EXPM1_POLY = """\
PF_MATH float pf_expm1_poly_f32(float r)
{
    float p = 1.0f / 40320.0f;
    p = PF_FMAF(p, r, 1.0f / 5040.0f);
    p = PF_FMAF(p, r, 1.0f / 720.0f);
    p = PF_FMAF(p, r, 1.0f / 120.0f);
    p = PF_FMAF(p, r, 1.0f / 24.0f);
    p = PF_FMAF(p, r, 1.0f / 6.0f);
    p = PF_FMAF(p, r, 0.5f);
    return PF_FMAF(r * r, p, r);
}
PF_MATH double pf_expm1_poly_f64(double r)
{
    double p = 1.0 / 87178291200.0;
    p = PF_FMA(p, r, 1.0 / 6227020800.0);
    p = PF_FMA(p, r, 1.0 / 479001600.0);
    p = PF_FMA(p, r, 1.0 / 39916800.0);
    p = PF_FMA(p, r, 1.0 / 3628800.0);
    p = PF_FMA(p, r, 1.0 / 362880.0);
    p = PF_FMA(p, r, 1.0 / 40320.0);
    p = PF_FMA(p, r, 1.0 / 5040.0);
    p = PF_FMA(p, r, 1.0 / 720.0);
    p = PF_FMA(p, r, 1.0 / 120.0);
    p = PF_FMA(p, r, 1.0 / 24.0);
    p = PF_FMA(p, r, 1.0 / 6.0);
    p = PF_FMA(p, r, 0.5);
    return PF_FMA(r * r, p, r);
}
"""

# round(x / ln2) read from the low mantissa bits after adding 1.5 * 2^(p-1); ln2 = ln2_hi + ln2_lo where
# ln2_hi has 16 (f32) / 32 (f64) significant bits, so k * ln2_hi is exact for every k the clamps allow.
_EXP = """\
PF_MATH float pf_exp_f32(float x)
{
    const float shift = 0x1.8p23f;
    uint32_t bits = pf_as_u32(x);
    uint32_t mag = bits & 0x7fffffffu;
    mag = mag < 0x42d00000u ? mag : 0x42d00000u;  /* |x| <= 104: exp(-104) rounds to 0, exp(104) overflows */
    float xc = pf_as_f32(mag | (bits & 0x80000000u));
    float t = PF_FMAF(xc, 0x1.715476p+0f, shift);
    float kf = t - shift;
    int32_t k = (int32_t)(pf_as_u32(t) - pf_as_u32(shift));
    int32_t k1 = k >> 1;
    int32_t k2 = k - k1;
    float r = PF_FMAF(-kf, 0x1.7f7d1cp-20f, PF_FMAF(-kf, 0x1.62e4p-1f, xc));
    float q = 0x1.6a22cep-10f;
    q = PF_FMAF(q, r, 0x1.123abap-7f);
    q = PF_FMAF(q, r, 0x1.5558f6p-5f);
    q = PF_FMAF(q, r, 0x1.55549p-3f);
    q = PF_FMAF(q, r, 0x1.fffffcp-2f);
    float p = 1.0f + PF_FMAF(r * r, q, r);
    float y = (p * pf_as_f32((uint32_t)(k1 + 127) << 23)) * pf_as_f32((uint32_t)(k2 + 127) << 23);
    return x != x ? x : y;
}
PF_MATH double pf_exp_f64(double x)
{
    const double shift = 0x1.8p52;
    x = x < -746.0 ? -746.0 : x;  /* exp(-746) rounds to 0 */
    x = x > 710.0 ? 710.0 : x;    /* exp(710) overflows */
    double t = PF_FMA(x, 0x1.71547652b82fep+0, shift);
    double kf = t - shift;
    uint64_t k = pf_as_u64(t) - pf_as_u64(shift);
    uint64_t k1 = pf_as_u64(kf * 0.5 + shift) - pf_as_u64(shift);
    uint64_t k2 = k - k1;
    double r = PF_FMA(-kf, 0x1.a39ef35793c76p-33, PF_FMA(-kf, 0x1.62e42feep-1, x));
    double p = 1.0 + pf_expm1_poly_f64(r);
    return (p * pf_as_f64((k1 + 1023u) << 52)) * pf_as_f64((k2 + 1023u) << 52);
}
"""

# tanh|x| = -m / (2 + m), m = expm1(-2|x|) in (-1, 0]; below -30 (f32) / -40 (f64) m rounds to -1.
_TANH = """\
PF_MATH float pf_tanh_f32(float x)
{
    const float shift = 0x1.8p23f;
    float y = -2.0f * fabsf(x);
    y = y < -30.0f ? -30.0f : y;
    float t = PF_FMAF(y, 0x1.715476p+0f, shift);
    float kf = t - shift;
    uint32_t k = pf_as_u32(t) - pf_as_u32(shift);
    float r = PF_FMAF(-kf, 0x1.7f7d1cp-20f, PF_FMAF(-kf, 0x1.62e4p-1f, y));
    float s = pf_as_f32((k + 127u) << 23);
    float m = PF_FMAF(s, pf_expm1_poly_f32(r), s - 1.0f);
    return copysignf(-m / (2.0f + m), x);
}
PF_MATH double pf_tanh_f64(double x)
{
    const double shift = 0x1.8p52;
    double y = -2.0 * fabs(x);
    y = y < -40.0 ? -40.0 : y;
    double t = PF_FMA(y, 0x1.71547652b82fep+0, shift);
    double kf = t - shift;
    uint64_t k = pf_as_u64(t) - pf_as_u64(shift);
    double r = PF_FMA(-kf, 0x1.a39ef35793c76p-33, PF_FMA(-kf, 0x1.62e42feep-1, y));
    double s = pf_as_f64((k + 1023u) << 52);
    double m = PF_FMA(s, pf_expm1_poly_f64(r), s - 1.0);
    return copysign(-m / (2.0 + m), x);
}
"""

# log(1 + f) = 2 atanh(s), s = f / (2 + f), |s| <= 0.1716: the series 2s + 2s^3/3 + ... to s^11 (f32,
# truncation < 3e-10 relative) and s^25 (f64, < 2e-19). R below is (series - 2s) / s. The exponent is
# extracted with a logical shift of (bits - bits(sqrt(1/2))) offset to stay non-negative, and converted to
# floating point through the bits of 2^23 + e (f32 uses an int32 conversion, which SSE2 has).
_LOG = """\
PF_MATH float pf_log_f32(float x)
{
    int tiny = x < 0x1p-126f;
    float xs = tiny ? x * 0x1p25f : x;
    uint32_t t = pf_as_u32(xs) - 0x3f3504f3u + (128u << 23);
    int32_t e = (int32_t)(t >> 23) - 128 - (tiny ? 25 : 0);
    float f = pf_as_f32((t & 0x7fffffu) + 0x3f3504f3u) - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float R = 2.0f / 11.0f;
    R = PF_FMAF(R, z, 2.0f / 9.0f);
    R = PF_FMAF(R, z, 2.0f / 7.0f);
    R = PF_FMAF(R, z, 2.0f / 5.0f);
    R = PF_FMAF(R, z, 2.0f / 3.0f);
    R = R * z;
    float hfsq = 0.5f * f * f;
    float ef = (float)e;
    float y = ef * 0x1.62e4p-1f + (f - (hfsq - (s * (hfsq + R) + ef * 0x1.7f7d1cp-20f)));
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    return x != x ? x : y;
}
PF_MATH double pf_log_f64(double x)
{
    int tiny = x < 0x1p-1022;
    double xs = tiny ? x * 0x1p54 : x;
    uint64_t t = pf_as_u64(xs) - 0x3fe6a09e667f3bcdu + (2048ull << 52);
    double ef = pf_as_f64(0x4330000000000000ull | (t >> 52)) - (0x1p52 + 2048.0) - (tiny ? 54.0 : 0.0);
    double f = pf_as_f64((t & 0xfffffffffffffull) + 0x3fe6a09e667f3bcdull) - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double R = 2.0 / 25.0;
    R = PF_FMA(R, z, 2.0 / 23.0);
    R = PF_FMA(R, z, 2.0 / 21.0);
    R = PF_FMA(R, z, 2.0 / 19.0);
    R = PF_FMA(R, z, 2.0 / 17.0);
    R = PF_FMA(R, z, 2.0 / 15.0);
    R = PF_FMA(R, z, 2.0 / 13.0);
    R = PF_FMA(R, z, 2.0 / 11.0);
    R = PF_FMA(R, z, 2.0 / 9.0);
    R = PF_FMA(R, z, 2.0 / 7.0);
    R = PF_FMA(R, z, 2.0 / 5.0);
    R = PF_FMA(R, z, 2.0 / 3.0);
    R = R * z;
    double hfsq = 0.5 * f * f;
    double y = ef * 0x1.62e42feep-1 + (f - (hfsq - (s * (hfsq + R) + ef * 0x1.a39ef35793c76p-33)));
    y = x == INFINITY ? x : y;
    y = x == 0.0 ? -INFINITY : y;
    y = x < 0.0 ? NAN : y;
    return x != x ? x : y;
}
"""

# The parity of y comes from the low bit of y + 1.5 * 2^52 (exact for |y| < 2^24; larger floats are even).
_POW = """\
PF_MATH float pf_pow_f32(float x, float y)
{
    double xd = (double)x, yd = (double)y;
    double r = pf_exp_f64(yd * pf_log_f64(fabs(xd)));
    double t = yd + 0x1.8p52;
    double whole = t - 0x1.8p52;
    double big = fabs(yd) >= 0x1p24 ? 1.0 : 0.0;
    double odd = fabs(yd) < 0x1p24 && whole == yd && (pf_as_u64(t) & 1u) ? -1.0 : 1.0;
    r = (pf_as_u64(xd) >> 63) != 0 ? r * odd : r;  /* signbit() does not vectorise */
    r = xd < 0.0 && xd > -INFINITY && whole != yd && big == 0.0 ? NAN : r;
    r = yd == 0.0 || xd == 1.0 || (xd == -1.0 && fabs(yd) == INFINITY) ? 1.0 : r;
    return (float)r;
}
"""

# pf_fmax_lane_* and pf_fmin_lane_*: the same for an accumulator that is never NaN (a lane's copy under
# ``omp simd reduction(max|min:)``, which starts at the operator's identity): one compare and blend, so the
# reduction runs at the load rate (``c_innermost.lane_updates``)
_MINMAX = """\
PF_MATH float pf_fmax_f32(float a, float b) { return a > b || b != b ? a : b; }
PF_MATH float pf_fmin_f32(float a, float b) { return a < b || b != b ? a : b; }
PF_MATH double pf_fmax_f64(double a, double b) { return a > b || b != b ? a : b; }
PF_MATH double pf_fmin_f64(double a, double b) { return a < b || b != b ? a : b; }
PF_MATH float pf_fmax_lane_f32(float acc, float b) { return b > acc ? b : acc; }
PF_MATH float pf_fmin_lane_f32(float acc, float b) { return b < acc ? b : acc; }
PF_MATH double pf_fmax_lane_f64(double acc, double b) { return b > acc ? b : acc; }
PF_MATH double pf_fmin_lane_f64(double acc, double b) { return b < acc ? b : acc; }
"""

# name -> (C text, the names it needs first). A text defines every function listed with it.
_PARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bits": (_BITS, ()),
    "expm1_poly": (_EXPM1_POLY, ("bits",)),
    "exp": (_EXP, ("bits", "expm1_poly")),
    "tanh": (_TANH, ("bits", "expm1_poly")),
    "log": (_LOG, ("bits",)),
    "pow": (_POW, ("exp", "log")),
    "minmax": (_MINMAX, ("bits",)),
}

UNARY = {
    "f32": {"exp": "pf_exp_f32", "log": "pf_log_f32", "tanh": "pf_tanh_f32", "sqrt": "sqrtf", "abs": "fabsf"},
    "f64": {"exp": "pf_exp_f64", "log": "pf_log_f64", "tanh": "pf_tanh_f64", "sqrt": "sqrt", "abs": "fabs"},
}
"""Per float dtype, the C function printed for each unary intrinsic (sqrt and fabs are single instructions)."""

BINARY = {
    "f32": {"max": "pf_fmax_f32", "min": "pf_fmin_f32", "pow": "pf_pow_f32"},
    "f64": {"max": "pf_fmax_f64", "min": "pf_fmin_f64", "pow": "pow"},
}
"""Per float dtype, the C function printed for each binary intrinsic (f64 ``pow`` is libm's)."""

_PART_OF = {"exp": "exp", "log": "log", "tanh": "tanh", "pow": "pow", "fmax": "minmax", "fmin": "minmax",
            "fmax_lane": "minmax", "fmin_lane": "minmax"}


def part_of(function: str) -> str | None:
    """The part of the math library that defines the C function ``function`` (``None``: libm or a builtin)."""
    if not function.startswith("pf_"):
        return None
    return _PART_OF.get(function[3:].rsplit("_", 1)[0])


def math_source(parts: Iterable[str]) -> str:
    """C text defining the named parts and what they depend on, each once, dependencies first."""
    out: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        text, deps = _PARTS[name]
        for dep in deps:
            add(dep)
        out.append(text)

    for name in sorted(parts):
        add(name)
    return "".join(out)


def all_parts() -> tuple[str, ...]:
    """Every part, for tests that exercise the whole library."""
    return tuple(_PARTS)
