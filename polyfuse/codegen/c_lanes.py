"""Explicit SIMD bodies on C: an innermost loop whose statements call ``exp`` runs its whole vectors through
an AVX-512 version of it, written out by the printer; a loop that reduces into a scalar (a row's max, min
or sum) runs four vector accumulators.

Why ``exp``: :mod:`polyfuse.codegen.c_math`'s functions are scalar C that GCC vectorises, which keeps them
portable but spells ``2^k`` and the special cases in integer operations (about 27 vector instructions per
``exp`` of 16 floats). AVX-512 has an instruction for the scaling step (``vscalefps``: ``p * 2^k`` with
one rounding, overflow to infinity and gradual underflow included) and a NaN-preserving clamp
(``vmaxps``/``vminps`` with the input as the second operand), which the vectoriser never emits from
scalar code: the same algorithm takes about 15. Measured on the 2-core Emerald Rapids, 2 threads, paired
rounds against the same program built with ``-DPF_EXPLICIT_SIMD=0``: softmax 0.85 of the time at
64 x 4096 (in cache), 0.81 at 4096 x 1024, 0.93 at 8192 x 4096 (memory-bound); exp(x + 1) at 1024 x 1024
0.77. ``tanh`` gained nothing this way (its scalar form already scales by an integer shift, and its
division dominates): gelu(x + b) + r with an explicit ``tanh`` ran 1.09x slower, so it is not here.

``exp``'s results are the scalar function's bit for bit: the same clamp, the same ``k``, ``r`` and
polynomial in the same order, and ``vscalefps`` scales exactly as the scalar code's two exact power-of-two
factors do (one rounding, at the end). The vector and the scalar loop may therefore share a loop's elements freely.

Why four accumulators: under ``#pragma omp simd reduction(...)`` GCC keeps one vector of partial results,
so each vector add or max waits for the previous one (4 cycles): a row's max in L1 ran at 1.36 ns per 16
floats, 0.54 with four independent vectors (:data:`UNROLL`). Against the previous printer (one vector),
paired rounds with a 256 MiB copy in each round, 2 threads: softmax 0.96 of the time at 8192 x 4096 and
0.94-0.96 at 4096 x 1024, layernorm 0.93-0.94, rmsnorm 0.94 (4096 x 1024). A maximum or minimum is the
same whatever the order, so those stay bit for bit; sums are reassociated (``reassociate=True`` only).

Which loops (:func:`lane_body`): innermost, unit step, a bound the printer can strip (``upper_bound``),
carrying no dependence through arrays (:func:`~polyfuse.codegen.c_openmp.simd_safe` on the dependences
of non-local arrays), every access walking memory contiguously along the loop or not moving at all,
local scalars either written before they are read in each iteration (per-iteration temporaries, one
vector each), summed into (``s += e``: a vector of partial sums) or, given the loop's ``omp simd``
clauses, a running maximum or minimum (``m = max(m, e)``: a vector of them), every value that changes
along the loop an f32 built from ``+ - * /``, negation and ``exp``, and at least one ``exp`` or one
reduction among them (elsewhere GCC's own vectorisation is as good). A loop without ``exp`` is unrolled
over :data:`UNROLL` copies of its body, each with its own accumulators (``<name>_vsum1``, ...), folded
pairwise after the loop. Anything else keeps the scalar loop.

How: the loop is printed twice under ``#if PF_EXPLICIT_SIMD`` (GCC with AVX-512): whole 16-float vectors
from the first iteration on, then the scalar loop over what is left; without AVX-512, under another
compiler, or with ``-DPF_EXPLICIT_SIMD=0`` (``$POLYFUSE_CFLAGS``), only the scalar loop is compiled, as
before. Partial sums are folded into their scalar lane by lane, the reassociation ``omp simd reduction``
already makes (only under ``reassociate=True``). A next-row prefetching loop (``c_prefetch.py``) takes
the same vector body for its cache-line groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from polyfuse.codegen.ast import StatementCall, block_children, loop_schedule, statement_call
from polyfuse.codegen.c_expressions import paren, strip_parens
from polyfuse.codegen.c_openmp import simd_safe, statement_moves
from polyfuse.codegen.c_stream import upper_bound
from polyfuse.ir.expr import Binary, Const, Expr, Read, ScalarArg, Unary
from polyfuse.schedule.deps import dependences_of, union_of

LANES = 16
"""f32 lanes of one AVX-512 register: the width of every explicit vector."""

GUARD = "PF_EXPLICIT_SIMD"
"""The macro under which the explicit vector loops compile (:data:`LANE_HELPERS`)."""

LANE_FUNCTIONS = {"exp": "pf_vexp_f32"}
"""The vector function printed for each unary intrinsic, per 16 floats."""

UNROLL = 4
"""Independent vector accumulators of a reducing loop without ``exp`` (module docstring): one vector add or
max has a latency of 4 cycles, so a single accumulator holds the loop to one vector per 4 cycles, a
quarter of the two loads per cycle it could issue. (``exp``'s own latency hides one accumulator's.)"""

_EXTREMUM = {"max": "PF_VMAXLANE_f32", "min": "PF_VMINLANE_f32"}
IDENTITY = {"+": "0", "max": "-INFINITY", "min": "INFINITY"}
"""The starting value of each partial result of a reduction, per operator (here and in ``c_prefetch.py``)."""

LANE_HELPERS = """\
#if !defined(PF_EXPLICIT_SIMD)  /* -DPF_EXPLICIT_SIMD=0 keeps the scalar loops only */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define PF_EXPLICIT_SIMD 1
#else
#define PF_EXPLICIT_SIMD 0
#endif
#endif
#if PF_EXPLICIT_SIMD
/* explicit vectors of 16 floats (codegen/c_lanes.py): c_math's exp with AVX-512's scaling and
   NaN-preserving clamp; bit for bit the scalar function's results */
#define PF_VMAXNAN_f32(lo, x) __builtin_ia32_maxps512_mask((lo), (x), (x), (unsigned short)-1, 4)  /* x if NaN */
#define PF_VMINNAN_f32(hi, x) __builtin_ia32_minps512_mask((hi), (x), (x), (unsigned short)-1, 4)
#define PF_VSCALEF_f32(p, k) __builtin_ia32_scalefps512_mask((p), (k), (p), (unsigned short)-1, 4)  /* p * 2^k */
/* a running maximum (minimum) per lane: b > acc ? b : acc (b < acc ? b : acc), pf_fmax_lane_f32's choice */
#define PF_VMAXLANE_f32(acc, b) __builtin_ia32_maxps512_mask((b), (acc), (acc), (unsigned short)-1, 4)
#define PF_VMINLANE_f32(acc, b) __builtin_ia32_minps512_mask((b), (acc), (acc), (unsigned short)-1, 4)
static inline pf_vf32 pf_vexp_f32(pf_vf32 x)
{
    const pf_vf32 shift = pf_vset_f32(0x1.8p23f);
    pf_vf32 xc = PF_VMINNAN_f32(pf_vset_f32(104.0f), PF_VMAXNAN_f32(pf_vset_f32(-104.0f), x));
    pf_vf32 t = PF_VFMA_f32(xc, pf_vset_f32(0x1.715476p+0f), shift);
    pf_vf32 kf = t - shift;
    pf_vf32 r = PF_VFMA_f32(-kf, pf_vset_f32(0x1.7f7d1cp-20f), PF_VFMA_f32(-kf, pf_vset_f32(0x1.62e4p-1f), xc));
    pf_vf32 q = pf_vset_f32(0x1.6a22cep-10f);
    q = PF_VFMA_f32(q, r, pf_vset_f32(0x1.123abap-7f));
    q = PF_VFMA_f32(q, r, pf_vset_f32(0x1.5558f6p-5f));
    q = PF_VFMA_f32(q, r, pf_vset_f32(0x1.55549p-3f));
    q = PF_VFMA_f32(q, r, pf_vset_f32(0x1.fffffcp-2f));
    pf_vf32 p = 1.0f + PF_VFMA_f32(r * r, q, r);
    return PF_VSCALEF_f32(p, kf);
}
#endif
"""

_INFIX = {"+": "+", "-": "-", "*": "*", "/": "/"}
_UPDATES = {"+=": "+", "-=": "-", "*=": "*", "/=": "/"}


@dataclass(frozen=True)
class LaneBody:
    """One innermost loop's body as explicit vector code: ``lines(indent)`` for the iteration whose first
    lane is the loop iterator's value, ``sums`` the local scalars summed into (each needs a vector of
    partial sums, ``<name>_vsum``, declared before the loop and folded after it), ``extrema`` the
    ``(max|min, scalar)`` running maxima and minima (a vector ``<name>_vmax`` or ``<name>_vmin`` each).
    ``copies`` are the bodies of the further iterations of a loop unrolled with independent accumulators
    (copy ``k`` of 1, 2, ... names its accumulators with the suffix ``k``)."""

    statements: tuple[str, ...]
    sums: tuple[str, ...]
    extrema: tuple[tuple[str, str], ...] = ()
    copies: tuple[tuple[str, ...], ...] = ()

    @property
    def unroll(self) -> int:
        """Vectors per iteration of the vector loop (one accumulator per reduced scalar each)."""
        return 1 + len(self.copies)

    def lines(self, pad: str, copy: int = 0) -> list[str]:
        return [pad + s for s in (self.copies[copy - 1] if copy else self.statements)]


def lane_body(printer, node: isl.AstNode, reductions: Sequence[tuple[str, str]] = ()) -> LaneBody | None:
    """The explicit vector body of the innermost loop ``node`` (module docstring), or ``None`` where the
    loop keeps its scalar form. ``printer`` is the C printer (``program``, ``sched``, ``local_scalars``,
    ``_index``, ``_value``); ``reductions`` the loop's ``omp simd`` clauses (``(operator, scalar)``, from
    :func:`~polyfuse.codegen.c_openmp.simd_clauses`): with them, running maxima and minima become vectors
    too, and a loop that only reduces (no ``exp``) is unrolled over :data:`UNROLL` accumulators."""
    body = node.for_get_body()
    nodes = list(block_children(body)) if body.get_type() == isl.ast_node_type.block else [body]
    if not nodes or any(n.get_type() != isl.ast_node_type.user for n in nodes):
        return None
    inc = node.for_get_inc()
    if inc.get_type() != isl.ast_expr_type.int or inc.get_val().to_python() != 1 or upper_bound(printer, node) is None:
        return None
    schedule = loop_schedule(node)
    if schedule is None:
        return None
    calls = [statement_call(n) for n in nodes]
    local = printer.local_scalars
    extrema = tuple((op, name) for op, name in reductions if op in _EXTREMUM)
    sums = _sums(calls, local)
    calls_exp = any(isinstance(n, Unary) and n.op in LANE_FUNCTIONS for c in calls for n in c.statement.value.walk())
    if not (calls_exp or sums or extrema):
        return None  # (elsewhere GCC's own vectorisation is as good)
    if not printer.sched.reassociate and sums:
        return None  # (partial sums per lane reassociate the sum)
    stmts = [c.statement for c in calls]
    deps = getattr(printer, "_lane_deps", None)
    if deps is None:  # (once per printer: the dependences through arrays, local scalars left out)
        non_local = [n for n in printer.program.arrays if n not in local]
        deps = printer._lane_deps = union_of(dependences_of(printer.program), arrays=non_local,
                                             space=printer.program.context.get_space())
    if not simd_safe(schedule, deps, stmts):
        return None
    bodies = [_Builder(printer, schedule, {name: op for op, name in extrema}, copy).build(calls)
              for copy in range(1 if calls_exp else UNROLL)]  # (exp's latency hides one accumulator's)
    if any(b is None for b in bodies):
        return None
    first = bodies[0]
    return LaneBody(first.statements, first.sums, extrema, tuple(b.statements for b in bodies[1:]))


class _Builder:
    """Turns the statements of one loop body into vector statements (``None`` at the first unsupported one)."""

    def __init__(self, printer, schedule: isl.UnionMap, extrema: dict[str, str] | None = None, copy: int = 0) -> None:
        self.printer = printer
        self.schedule = schedule
        self.extrema = extrema or {}  # running max/min scalar -> its operator
        self.suffix = str(copy) if copy else ""  # (the accumulators of copy k of an unrolled body)
        self.vectors: dict[str, str] = {}  # per-iteration local scalar -> its vector variable
        self.written: set[str] = set()  # arrays written so far in the body
        self.body_locals: frozenset[str] = frozenset()  # local scalars the body writes

    def build(self, calls: Sequence[StatementCall]) -> LaneBody | None:
        local = self.printer.local_scalars
        arrays = self.printer.program.arrays
        sums = _sums(calls, local)
        self.body_locals = frozenset(c.statement.write.array for c in calls if c.statement.write.array in local)
        out: list[str] = []
        for call in calls:
            st = call.statement
            moves = statement_moves(self.schedule, st)
            target = st.write.array
            if arrays[target].dtype.name != "f32":
                return None
            if target in sums:
                value = self._value(st.value, call, moves)
                if value is None:
                    return None
                acc = f"{target}_vsum{self.suffix}"
                out.append(f"{acc} = {acc} {st.op[0]} {paren(value[0])};  /* {st.name} */")
                continue
            if target in self.extrema:  # m = max(m, e) or max(e, m)
                v = st.value
                other = next((side for side, own in ((v.rhs, v.lhs), (v.lhs, v.rhs))
                              if isinstance(own, Read) and st.accesses[own.access].array == target), None)
                value = None if other is None else self._value(other, call, moves)
                if value is None:
                    return None
                op = self.extrema[target]
                acc = f"{target}_v{op}{self.suffix}"
                out.append(f"{acc} = {_EXTREMUM[op]}({acc}, {strip_parens(_lane(value))});  /* {st.name} */")
                continue
            if target in local:  # a per-iteration temporary: written before any read in the iteration
                value = self._value(st.value, call, moves) if st.op == "=" else None
                if value is None:
                    return None
                name = self.vectors.get(target)
                if name is None:
                    name = self.vectors[target] = f"{target}_v"
                    out.append(f"pf_vf32 {name} = {strip_parens(value[0])};  /* {st.name} */")
                else:
                    out.append(f"{name} = {strip_parens(value[0])};  /* {st.name} */")
                continue
            move = moves[st.target]
            if move is None or move[-1:] != [1] or any(move[:-1]):
                return None  # (an output element that does not move with the lane)
            value = self._value(st.value, call, moves)
            if value is None:
                return None
            address = "&" + self.printer._index(call.write)
            if st.op == "=":
                out.append(f"pf_vstore_f32({address}, {strip_parens(value[0])});  /* {st.name} */")
            elif st.op in _UPDATES:
                out.append(f"pf_vstore_f32({address}, pf_vload_f32({address}) {_UPDATES[st.op]} {paren(value[0])});  /* {st.name} */")
            else:
                return None
            self.written.add(target)
        return LaneBody(tuple(out), tuple(sums))

    def _value(self, e: Expr, call: StatementCall, moves) -> tuple[str, bool] | None:
        """``e`` printed for the vector body: (C text, whether it changes from lane to lane: then the text
        is a 16-float vector, else a scalar), or ``None`` where it cannot be vectorised."""
        if e.dtype is None or e.dtype.name != "f32":
            return None  # (f32 throughout: no conversions in the vector body)
        if isinstance(e, (Const, ScalarArg)):
            return self.printer._value(e, call), False
        if isinstance(e, Read):
            acc = call.statement.accesses[e.access]
            if acc.array in self.printer.local_scalars:
                if acc.array in self.vectors:
                    return self.vectors[acc.array], True
                return None if acc.array in self.body_locals else (self.printer._value(e, call), False)
            m = moves[e.access]
            if m is None or any(m[:-1]) or m[-1:] not in ([], [0], [1]):
                return None
            if m[-1:] == [1]:
                return f"pf_vload_f32(&{self.printer._index(call.accesses[e.access])})", True
            return (None if acc.array in self.written else (self.printer._value(e, call), False))
        if isinstance(e, Binary) and e.op in _INFIX:
            lhs, rhs = self._value(e.lhs, call, moves), self._value(e.rhs, call, moves)
            if lhs is None or rhs is None:
                return None
            if not (lhs[1] or rhs[1]):
                return self.printer._value(e, call), False
            return f"({_lane(lhs)} {_INFIX[e.op]} {_lane(rhs)})", True
        if isinstance(e, Unary) and (e.op == "neg" or e.op in LANE_FUNCTIONS):
            operand = self._value(e.operand, call, moves)
            if operand is None:
                return None
            if not operand[1]:
                return self.printer._value(e, call), False
            if e.op == "neg":
                return f"(-{operand[0]})", True
            return f"{LANE_FUNCTIONS[e.op]}({strip_parens(operand[0])})", True
        return None


def _lane(value: tuple[str, bool]) -> str:
    """A vector operand: a lane-invariant scalar broadcast."""
    text, varies = value
    return text if varies else f"pf_vset_f32({strip_parens(text)})"


def _sums(calls: Sequence[StatementCall], local: frozenset[str]) -> tuple[str, ...]:
    """The local scalars the body only sums into (``s += e``, ``s -= e``, ``e`` not reading ``s``, and no
    other statement of the body touching ``s``)."""
    out = []
    for name in dict.fromkeys(c.statement.write.array for c in calls if c.statement.write.array in local):
        touching = [c.statement for c in calls if any(a.array == name for a in c.statement.accesses)]
        if all(st.write.array == name and st.op in ("+=", "-=")
               and not any(a.array == name for k, a in enumerate(st.accesses) if k != st.target) for st in touching):
            out.append(name)
    return tuple(out)


def loop_lines(printer, node: isl.AstNode, depth: int, indent: str, lanes: LaneBody, pragma: Sequence[str],
               scalar_body: Sequence[str]) -> list[str]:
    """The innermost loop ``node`` as whole vectors (under :data:`GUARD`), then its scalar loop (with
    ``pragma`` above it and ``scalar_body``, printed at ``depth + 1``) from where they stopped."""
    it = printer._index(node.for_get_iterator())
    op, ub = upper_bound(printer, node)
    init = printer._index(node.for_get_init())
    start = f"{it}_lanes"
    pad, one, two, three = (indent * (depth + k) for k in range(4))
    lines = [f"{pad}{{  /* whole vectors of {LANES} floats, then the rest (codegen/c_lanes.py) */",
             f"{one}int64_t {start} = {init};",
             f"#if {GUARD}",
             f"{one}{{"]
    n = lanes.unroll
    suffixes = [str(k) if k else "" for k in range(n)]
    accumulators = [(f"{name}_vsum", "0.0f", None, f"{name} += {name}_vsum[pf_lane];") for name in lanes.sums]
    accumulators += [(f"{name}_v{o}", IDENTITY[o], _EXTREMUM[o], f"{name} = pf_f{o}_lane_f32({name}, {name}_v{o}[pf_lane]);")
                     for o, name in lanes.extrema]
    lines += [f"{two}pf_vf32 {acc}{k} = pf_vset_f32({identity});" for acc, identity, _, _ in accumulators for k in suffixes]
    lines.append(f"{two}for (; {start} + {LANES * n - 1} {op} {ub}; {start} += {LANES * n}) {{")
    if n == 1:
        lines += [f"{three}const int64_t {it} = {start};", *lanes.lines(three)]
    else:  # (each copy in a block of its own, for its own iterator)
        for k in range(n):
            lines += [f"{three}{{", f"{three}{indent}const int64_t {it} = {start} + {k * LANES};",
                      *lanes.lines(three + indent, k), f"{three}}}"]
    lines.append(f"{two}}}")
    for acc, _, combine, fold in accumulators:
        parts = [acc + k for k in suffixes]
        while len(parts) > 1:  # (pairwise: v0 with v1, v2 with v3, then the two results)
            parts = [(f"{combine}({a}, {b})" if combine else f"({a} + {b})") if b else a
                     for a, b in zip(parts[::2], parts[1::2] + [""] * (len(parts) % 2))]
        if n > 1:
            lines.append(f"{two}{acc} = {strip_parens(parts[0])};")
        lines.append(f"{two}for (int pf_lane = 0; pf_lane < {LANES}; pf_lane += 1) {fold}")
    lines += [f"{one}}}",
              "#endif",
              *(indent + line for line in pragma),
              f"{one}for (int64_t {it} = {start}; {it} {op} {ub}; {it} += 1) {{",
              *(indent + line for line in scalar_body),
              f"{one}}}",
              f"{pad}}}"]
    return lines
