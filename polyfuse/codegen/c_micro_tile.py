"""The register tile printed for a contraction's point loops (``codegen/c_micro.py`` reads the loops and
decides that they have the tile's shape; this module prints the tile).

Lanes outermost in strips of ``NR`` vectors (the lane operand's ``k x NR`` panel packed once per strip),
row groups of ``MR`` inside, the rows left one at a time; the lanes left after the strips one vector at a
time, then (AVX-512) one vector masked to the lanes left or (elsewhere) half a vector and single lanes.
Each accumulator is loaded (or set to the folded initialisation) before the ``k`` loop and stored once
after it, so every element sums its terms in the source order of ``k``. Triangular shapes: lanes whose
bounds move with the row (:meth:`RegisterTile.triangle_lines`), reductions whose range does
(:meth:`RegisterTile._row_ranges`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from polyfuse.codegen.c_expressions import literal
from polyfuse.ir.expr import Binary, Cast, Const, Expr, Read, ScalarArg, Unary
from polyfuse.schedule.tiling.accesses import Coefficients, stride_along
from polyfuse.schedule.tiling.microtile import MicroTile

if TYPE_CHECKING:
    from polyfuse.codegen.c_micro import Loop

INDENT = "    "


def row_shifted(text: str, row: str, r: int | str) -> str:
    """The C expression ``text`` (a bound printed for the tile's first row ``row``) for row ``row + r``
    (``r`` a number or the name of a C variable)."""
    return re.sub(rf"\b{re.escape(row)}\b", f"({row} + {r})", text) if r else text


class RegisterTile:
    """Prints the register tile of one contraction statement (``printer``: the C printer; ``loop_of``: each
    statement iterator's C value; ``rows``/``lane``/``red``: the tile's point loops, ``inner``: further
    reduction loops inside it)."""

    def __init__(self, printer, stmt, coeffs: Sequence[Coefficients], loop_of, info: MicroTile,
                 rows: Loop | None, lane: Loop, red: Loop, fma: bool, inner: tuple[Loop, ...] = ()) -> None:
        self.p = printer
        self.stmt = stmt
        self.coeffs = coeffs
        self.loop_of = loop_of
        self.info = info
        self.rows, self.lane, self.red = rows, lane, red
        self.inner = inner  # further reduction loops inside the tile, around the k loop
        self.fma = fma
        self.t = printer.program.arrays[stmt.write.array].dtype
        self.ctype = self.t.c_name
        self.vtype = f"pf_v{self.t.name}"
        self.vl = f"PF_VL_{self.t.name}"
        self.w = "v"  # the width of the current strip's vectors: "v" full, "h" half, "m" full and masked (m_)
        self.mr = info.mr
        self.nr = info.nr
        self.packed: dict[int, str] = {}  # vector operands packed for the current lane strip
        self.gathered: dict[int, tuple[str, str]] = {}  # strided lane operands gathered for the current strip

    def lines(self, d: int) -> list[str]:
        if self.rows is not None and self.rows.name in self.lane.ids:
            return self.triangle_lines(d)
        return self.rectangle_lines(d)

    def triangle_lines(self, d: int) -> list[str]:
        """The lanes' bounds move with the row (syrk's ``j <= i``, covariance's ``j >= i``): row groups
        outermost; in each, the lanes every row of the group has (``lo..hi``: the largest first lane, the
        smallest last one) run as register tiles of ``MR`` rows, and each row's own lanes outside them one
        at a time; the rows left over after the groups run alone. Nothing is packed: each tile's panel
        differs. Each element still sums its ``k`` terms in order."""
        i, j = self.rows.name, f"{self.lane.name}_"
        self.packed = {}
        mr = self.mr

        def at(text: str, r: int) -> str:
            return row_shifted(text, i, r)

        lo, hi = f"{j}lo", f"{j}hi"
        common_lo = _fold("polyfuse_max", [at(self.lane.init, r) for r in range(mr)])
        common_hi = _fold("polyfuse_min", [at(self.lane.last, r) for r in range(mr)])
        out = [_pad(d, f"int64_t {i} = {self.rows.init};"),
               _pad(d, f"for (; {i} + {mr - 1} <= {self.rows.last}; {i} += {mr}) {{"),
               _pad(d + 1, f"const int64_t {lo} = {common_lo}, {hi} = {common_hi};")]
        # each row's lanes before lo and after hi, one row at a time (a loop over the group's rows, not
        # MR copies: scalar edges, and MR copies of them cost gcc more time than the tiles themselves)
        row = f"({i} + r_)"
        first, last = row_shifted(self.lane.init, i, "r_"), row_shifted(self.lane.last, i, "r_")
        out.append(_pad(d + 1, f"for (int64_t r_ = 0; r_ < {mr}; r_ += 1) {{"))
        for start, stop in ((first, f"polyfuse_min({last}, {lo} - 1)"), (f"polyfuse_max(polyfuse_max({first}, {lo}), {hi} + 1)", last)):
            out += [_pad(d + 2, f"for (int64_t {j} = {start}; {j} <= {stop}; {j} += 1) {{"),
                    *self._tile(d + 3, 1, 0, row, j),
                    _pad(d + 2, "}")]
        out.append(_pad(d + 1, "}"))
        out += [_pad(d + 1, f"int64_t {j} = {lo};"), *self._strips(d + 1, mr, i, j, hi), _pad(d, "}"),
                _pad(d, f"for (; {i} <= {self.rows.last}; {i} += 1) {{"),
                _pad(d + 1, f"int64_t {j} = {self.lane.init};"), *self._strips(d + 1, 1, i, j, self.lane.last), _pad(d, "}")]
        return [_pad(d - 1, "{"), *out, _pad(d - 1, "}")]

    def _strips(self, d: int, n_rows: int, i: str, j: str, last: str) -> list[str]:
        """Lanes ``j..last`` of ``n_rows`` rows from ``i``: ``NR`` vectors at a time, then the rest
        (:meth:`_tails`)."""
        def body(d: int, n_vec: int) -> list[str]:
            return self._tile(d, n_rows, n_vec, i, j)

        return self._strip(d, j, last, f"{self.nr} * {self.vl}", self.nr, body) + self._tails(d, j, last, body)

    def _strip(self, d: int, j: str, last: str, width: str, n_vec: int, body: Callable[[int, int], list[str]],
               w: str = "v") -> list[str]:
        """Strips of ``width`` lanes from ``j`` while whole ones fit before ``last``, each printed by
        ``body(depth, n_vec)`` with vectors of width ``w`` (a strided lane operand gathered first)."""
        self.w = w
        out = [_pad(d, f"for (; {j} + {width} - 1 <= {last}; {j} += {width}) {{"),
               *(self._gather(d + 1, j, width) if n_vec else []),
               *body(d + 1, n_vec),
               _pad(d, "}")]
        self.gathered = {}
        self.w = "v"
        return out

    def _tails(self, d: int, j: str, last: str, body: Callable[[int, int], list[str]]) -> list[str]:
        """The lanes ``j..last`` left after the widest strips, each strip printed by ``body(depth, vectors)``.
        First one whole vector at a time; then, with AVX-512 (``PF_MASKED_TAILS``), the fewer lanes left
        as one vector masked to them, and elsewhere half a vector, then one lane at a time. Two tile shapes
        become one: gcc compiled PolyBench's gemm and syr2k in 0.49 and 1.23 s instead of 0.54 and 1.63.
        (Masked strips for the whole vectors too would save more, but a masked load is never folded into
        the multiply-add: symm MEDIUM took 1.07 times as long.)"""
        out = [*self._strip(d, j, last, self.vl, 1, body), _pad(d, "#if PF_MASKED_TAILS")]
        self.w = "m"
        out += [_pad(d, f"if ({j} <= {last}) {{"),
                _pad(d + 1, f"const unsigned m_ = PF_LANE_MASK(({last}) - {j} + 1);"),
                *self._gather(d + 1, j, self.vl, last),
                *body(d + 1, 1),
                _pad(d, "}"),
                _pad(d, "#else")]
        self.gathered = {}
        self.w = "v"
        out += self._strip(d, j, last, f"PF_HL_{self.t.name}", 1, body, "h") + self._strip(d, j, last, "1", 0, body)
        return [*out, _pad(d, "#endif")]

    def rectangle_lines(self, d: int) -> list[str]:
        """Lanes outermost (a ``k x NR`` panel of the lane operand stays in L1 while the row groups pass),
        then row groups of ``MR``, then the remainders: one full vector of lanes at a time, then the fewer
        lanes left (one masked vector with AVX-512, else half a vector and single lanes: :meth:`_tails`);
        the rows left after the groups one at a time (no ``MR / 2``-row tile: the same run time, A/B at
        PolyBench MEDIUM, and a sixth less C for gcc to optimise: gemm 0.26 -> 0.22 s)."""
        i, j = (self.rows.name if self.rows is not None else ""), f"{self.lane.name}_"
        width = f"{self.nr} * {self.vl}"
        out = [_pad(d, f"int64_t {j} = {self.lane.init};"),
                _pad(d, f"for (; {j} + {width} - 1 <= {self.lane.last}; {j} += {width}) {{")]
        out += self._pack(d + 1, j)
        out += self._gather(d + 1, j, width)
        out += self._rows(d + 1, i, j, self.nr)
        out.append(_pad(d, "}"))
        self.packed = {}
        self.gathered = {}
        out += self._tails(d, j, self.lane.last, lambda d, n_vec: self._rows(d, i, j, n_vec))
        return [_pad(d - 1, "{"), *out, _pad(d - 1, "}")]

    def _pack(self, d: int, j: str) -> list[str]:
        """Copy the ``k x NR`` panel of each vector operand (contiguous along the lane, the same for every
        row) into a contiguous, aligned local buffer once per lane strip: the row groups then read it
        from L1 without the cache-set conflicts of a power-of-two row stride (operand packing)."""
        self.packed = {}
        if not self.info.k_tile or self.inner or self.rows is None or self.triangular_reduction:  # (one row reads each panel once)
            return []
        k, lo = self.red.name, self.red.init
        lines: list[str] = []
        strided = set(self._strided())  # (gathered instead: a contiguous copy of them is never read)
        for n in range(len(self.stmt.accesses)):
            row_dep, lane_dep = (True, True) if n == self.stmt.target else self._depends(n)
            if row_dep or not lane_dep or n in strided:
                continue
            name = f"pack{n}"
            self.packed[n] = name
            env = dict(self.loop_of)
            lines.append(_pad(d, f"{self.vtype} {name}[{self.info.k_tile} * {self.nr}];"))
            lines.append(_pad(d, f"for (int64_t {k} = {lo}; {k} <= {self.red.last}; {k} += 1) {{"))
            for v in range(self.nr):
                env[self.info.lane] = f"({j} + {v} * {self.vl})" if v else j
                lines.append(_pad(d + 1, f"{name}[({k} - {lo}) * {self.nr} + {v}] = pf_vload_{self.t.name}(&{self._access(n, env)});"))
            lines.append(_pad(d, "}"))
        return lines

    def _strided(self) -> list[int]:
        """The reads that move with the lane but not contiguously (syrk's ``A[j][k]``): vector strips read
        them from a panel gathered per strip (:meth:`_gather`)."""
        lane = self._dim(self.info.lane)
        return [n for n, coeffs in enumerate(self.coeffs) if n != self.stmt.target and stride_along(coeffs, lane) == "other"]

    def _gather(self, d: int, j: str, width: str, last: str | None = None) -> list[str]:
        """Copy the ``k x width`` panel of each strided lane operand, lane by lane (each lane's ``k`` run is
        contiguous in memory), into an aligned local buffer for the strip starting at lane ``j``. With
        ``last`` (a masked strip) the lanes past ``last`` repeat the last one: their memory may not exist,
        and their results are never stored."""
        self.gathered = {}
        k, lo = self.red.name, self.red.init
        lines: list[str] = []
        for n in self._strided():
            name = f"gather{n}"
            self.gathered[n] = (name, f"({width})")
            env = dict(self.loop_of)
            env[self.info.lane] = f"({j} + l_)" if last is None else f"({j} + polyfuse_min(l_, ({last}) - {j}))"
            lines += [_pad(d, f"{self.ctype} {name}[{self.info.k_tile} * ({width})] __attribute__((aligned(64)));"),
                      _pad(d, f"for (int64_t l_ = 0; l_ < ({width}); l_ += 1) {{"),
                      _pad(d + 1, f"for (int64_t {k} = {lo}; {k} <= {self.red.last}; {k} += 1) {{"),
                      _pad(d + 2, f"{name}[({k} - {lo}) * ({width}) + l_] = {self._access(n, env)};"),
                      _pad(d + 1, "}"), _pad(d, "}")]
        return lines

    def _rows(self, d: int, i: str, j: str, n_vec: int) -> list[str]:
        if self.rows is None:  # a row-less tile: the one row of this launch
            return self._tile(d + 1, 1, n_vec, "", j)
        out = [_pad(d, f"int64_t {i} = {self.rows.init};")]
        for n_rows in sorted({self.mr, 1}, reverse=True):
            out += [_pad(d, f"for (; {i} + {n_rows - 1} <= {self.rows.last}; {i} += {n_rows}) {{"),
                    *self._tile(d + 1, n_rows, n_vec, i, j),
                    _pad(d, "}")]
        return out

    def _window_inside(self) -> bool:
        """Whether the further reductions (a convolution's window) run inside the k loop instead of around
        it: only where ``reassociate`` lets each element sum its terms in another order. A 3x3 convolution's
        ``(kh, kw)`` inside its channel loop walks the input row by row and the weights contiguously, where
        ``c`` innermost jumps a whole input plane and nine weights per step (64 -> 64 channels at 56²,
        2-core Zen 5: 5.7 % less time)."""
        return self.fma and bool(self.inner)

    # ----- one register tile: n_rows x n_vec vectors (n_vec == 0: one scalar lane) ------------------
    def _tile(self, d: int, n_rows: int, n_vec: int, row: str, j: str) -> list[str]:
        vec = n_vec > 0
        lanes = range(n_vec) if vec else range(1)
        k = self.red.name
        t = f"pf_{self._wv}{self.t.name}" if vec else self.ctype
        target = self.coeffs[self.stmt.target]

        def at(r: int, v: int) -> dict[str, str]:
            env = {it: name for it, name in self.loop_of.items()}
            if self.info.rows is not None:
                env[self.info.rows] = f"({row} + {r})" if r else row
            env[self.info.lane] = f"({j} + {v} * {self.vl})" if vec and v else j
            return env

        def address(acc: int, r: int, v: int) -> str:
            return "&" + self._access(acc, at(r, v))

        acc_name = lambda r, v: f"acc_{r}_{v}"  # noqa: E731
        loads = []
        for r in range(n_rows):
            for v in lanes:
                load = self._load(address(self.stmt.target, r, v)) if vec else self._access(self.stmt.target, at(r, v))
                loads.append((acc_name(r, v), load))
        lines = self._start(d, t, vec, loads)
        # the loops of the reductions: further ones (a window), outermost first, around the k loop; with
        # reassociation allowed, the k loop around them instead (each step's window walks the operands by
        # the smallest strides: see _window_inside)
        headers: list[tuple[str, ...]] = []
        for lp in self.inner:
            headers.append(("{", f"const int64_t {lp.name} = {lp.init};") if lp.degenerate else
                           (f"for (int64_t {lp.name} = {lp.init}; {lp.name} <= {lp.last}; {lp.name} += 1) {{",))
        def body(d: int, groups: Sequence[int]) -> list[str]:
            # operands: those not depending on the row first (loaded once per k), then row by row the
            # row's own operands followed by its updates, so that few operands are live at once (no spills)
            shared: dict[tuple[int, int, int], str] = {}
            out: list[str] = []
            reads = [n for n in range(len(self.stmt.accesses)) if n != self.stmt.target]
            for r_group in [None, *groups]:
                for n in reads:
                    row_dep, lane_dep = self._depends(n)
                    if (r_group is None) == row_dep:
                        continue
                    r = 0 if r_group is None else r_group
                    for v in (lanes if lane_dep else [0]):
                        name = f"op{n}_{r}_{v}"
                        shared[(n, r, v)] = name
                        if vec and n in self.gathered:
                            name_g, width = self.gathered[n]
                            value = f"pf_{self._wv}load_{self.t.name}(&{name_g}[({k} - {self.red.init}) * {width} + {v} * {self.vl}])"
                        elif vec and n in self.packed:
                            value = f"{self.packed[n]}[({k} - {self.red.init}) * {self.nr} + {v}]"
                        elif vec and lane_dep:
                            value = self._load(address(n, r, v))
                        elif vec:
                            value = f"pf_{self._wv}set_{self.t.name}({self._access(n, at(r, v))})"
                        else:
                            value = self._access(n, at(r, v))
                        out.append(_pad(d, f"{t} {name} = {value};"))
                if r_group is not None:
                    for v in lanes:
                        out.append(_pad(d, f"{acc_name(r_group, v)} = {self._update(acc_name(r_group, v), r_group, v, shared, vec)};"))
            return out

        if self.triangular_reduction and n_rows > 1:
            lines += self._row_ranges(d, n_rows, row, body)
        else:
            k_loop = (f"for (int64_t {k} = {self.red.init}; {k} <= {self.red.last}; {k} += 1) {{",)
            headers = [k_loop, *headers] if self._window_inside() else [*headers, k_loop]
            for n, header in enumerate(headers):
                lines.append(_pad(d + n, header[0]))
                lines += [_pad(d + n + 1, extra) for extra in header[1:]]
            lines += body(d + len(headers), range(n_rows))
            for n in reversed(range(len(headers))):
                lines.append(_pad(d + n, "}"))
        for r in range(n_rows):
            for v in lanes:
                if vec:
                    lines.append(_pad(d, self._store(address(self.stmt.target, r, v), acc_name(r, v)) + ";"))
                else:
                    lines.append(_pad(d, f"{self._access(self.stmt.target, at(r, v))} = {acc_name(r, v)};"))
        del target
        return [_pad(d - 1, "{"), *lines, _pad(d - 1, "}")]

    @property
    def _wv(self) -> str:
        """The current strip's vector type: ``v`` full, ``h`` half (a masked strip's is a full one)."""
        return "v" if self.w == "m" else self.w

    def _load(self, address: str) -> str:
        mask = ", m_" if self.w == "m" else ""
        return f"pf_{self.w}load_{self.t.name}({address}{mask})"

    def _store(self, address: str, value: str) -> str:
        mask = ", m_" if self.w == "m" else ""
        return f"pf_{self.w}store_{self.t.name}({address}, {value}{mask})"

    def _start(self, d: int, t: str, vec: bool, loads: list[tuple[str, str]]) -> list[str]:
        """The accumulators' declarations and first values: loaded from the updated array, or, in the call
        holding every element's first term where an initialisation to a constant was folded into the tile
        (``MicroTile.start``), that constant (the initialisation itself is not printed: ``codegen/c.py``)."""
        if self.info.start is None:
            return [_pad(d, f"{t} {name} = {load};") for name, load in loads]
        value = literal(self.info.start, self.t)
        value = f"pf_{self._wv}set_{self.t.name}({value})" if vec else value
        if self.red.init.strip("()") == str(self.info.first):  # (every call is the first)
            return [_pad(d, f"{t} {name} = {value};") for name, _ in loads]
        return [_pad(d, f"{t} {', '.join(name for name, _ in loads)};"),
                _pad(d, f"if ({self.red.init} == {self.info.first}) {{"),
                *[_pad(d + 1, f"{name} = {value};") for name, _ in loads],
                _pad(d, "} else {"),
                *[_pad(d + 1, f"{name} = {load};") for name, load in loads],
                _pad(d, "}")]

    @property
    def triangular_reduction(self) -> bool:
        """Whether the reduction's bounds move with the row (symm's ``C[k][j] += ... A[i][k]`` for
        ``i > k``): each row of a tile then sums over its own range of ``k`` (:meth:`_row_ranges`)."""
        return self.rows is not None and self.rows.name in self.red.ids

    def _row_ranges(self, d: int, n_rows: int, row: str, body: Callable[[int, Sequence[int]], list[str]]) -> list[str]:
        """The ``k`` loops of a tile whose rows have ranges of their own: the range every row has (``klo ..
        khi``: the largest first ``k``, the smallest last one) with the whole tile, and around it each row's
        own ``k`` before and after, one row at a time. Each element still sums its terms in order of
        ``k``: its ``k`` before ``klo``, then ``klo .. khi``, then those after."""
        k = self.red.name

        def at(text: str, r: int) -> str:
            return row_shifted(text, row, r)

        first = [at(self.red.init, r) for r in range(n_rows)]
        last = [at(self.red.last, r) for r in range(n_rows)]
        lo, hi = f"{k}_lo", f"{k}_hi"
        out = [_pad(d, f"const int64_t {lo} = {_fold('polyfuse_max', first)};"),
               _pad(d, f"const int64_t {hi} = polyfuse_max({_fold('polyfuse_min', last)}, {lo} - 1);")]  # (empty: klo - 1)
        for r in range(n_rows):
            out += [_pad(d, f"for (int64_t {k} = {first[r]}; {k} <= polyfuse_min({last[r]}, {lo} - 1); {k} += 1) {{"),
                    *body(d + 1, [r]), _pad(d, "}")]
        out += [_pad(d, f"for (int64_t {k} = {lo}; {k} <= {hi}; {k} += 1) {{"), *body(d + 1, range(n_rows)), _pad(d, "}")]
        for r in range(n_rows):
            out += [_pad(d, f"for (int64_t {k} = polyfuse_max({first[r]}, {hi} + 1); {k} <= {last[r]}; {k} += 1) {{"),
                    *body(d + 1, [r]), _pad(d, "}")]
        return out

    def _update(self, acc: str, r: int, v: int, shared, vec: bool) -> str:
        value = self.stmt.value
        if self.fma and isinstance(value, Binary) and value.op == "*":
            kind = self._wv.upper() if vec else "S"
            return f"PF_{kind}FMA_{self.t.name}({self._value(value.lhs, r, v, shared, vec)}, {self._value(value.rhs, r, v, shared, vec)}, {acc})"
        return f"{acc} + {self._value(value, r, v, shared, vec)}"

    def _value(self, e: Expr, r: int, v: int, shared, vec: bool) -> str:
        if isinstance(e, Read):
            row_dep, lane_dep = self._depends(e.access)
            return shared[(e.access, r if row_dep else 0, v if lane_dep else 0)]
        if isinstance(e, Const):
            text = repr(float(e.value)) + ("f" if self.t.name == "f32" else "")
            return f"pf_{self._wv}set_{self.t.name}({text})" if vec else text
        if isinstance(e, ScalarArg):
            return f"pf_{self._wv}set_{self.t.name}({e.name})" if vec else e.name
        if isinstance(e, Unary):
            return f"(-{self._value(e.operand, r, v, shared, vec)})"
        if isinstance(e, Cast):
            return self._value(e.operand, r, v, shared, vec)
        assert isinstance(e, Binary)
        return f"({self._value(e.lhs, r, v, shared, vec)} {e.op} {self._value(e.rhs, r, v, shared, vec)})"

    def _depends(self, n: int) -> tuple[bool, bool]:
        """Whether access ``n`` moves with the row, and with the lane."""
        lane = self._dim(self.info.lane)
        moves_with_row = self.info.rows is not None and any(c[0][self._dim(self.info.rows)] for c in self.coeffs[n])
        return moves_with_row, any(c[0][lane] for c in self.coeffs[n])

    def _dim(self, iterator: str) -> int:
        return self.stmt.iterators.index(iterator)

    def _access(self, n: int, env: dict[str, str]) -> str:
        acc = self.stmt.accesses[n]
        names = self.stmt.iterators
        indices = []
        for its, params, const in self.coeffs[n]:
            terms = [(env[names[d]] if c == 1 else f"{c} * {env[names[d]]}") for d, c in enumerate(its) if c]
            terms += [(p if c == 1 else f"{c} * {p}") for p, c in params.items()]
            if const or not terms:
                terms.append(str(const))
            indices.append(" + ".join(terms).replace("+ -", "- "))
        return self.p.dialect.access(acc.array, indices)


def _fold(fn: str, terms: Sequence[str]) -> str:
    """``fn(fn(a, b), c)...`` of C expressions (one term: itself)."""
    out = terms[0]
    for t in terms[1:]:
        out = out if t == out else f"{fn}({out}, {t})"
    return out


def _pad(d: int, text: str) -> str:
    return INDENT * d + text
