"""Hypothesis strategies for random affine programs, generated as DSL *source text*.

A generated program is valid by construction, so the frontend must accept it: every access stays inside
its array for every size the program's ``assume=`` allows, every temporary is written in full before it is
read, and integer arithmetic stays far from overflow. How:

* sizes are ``N`` and ``M`` (``assume="N >= 2 and M >= 2"``), plus ``T`` for time loops;
* every array axis has extent ``X + 3`` or ``2 * X + 3`` for a size ``X``;
* each loop iterator has an upper bound ``a * X + b`` (triangular loops inherit the bound of the loop they
  depend on); a subscript is chosen only among the forms (``i + c``, ``i - 1``, ``X - 1 - i``, ``i % 3``,
  ``i // 2``, ``i + j``, ``2 * i + c``, ``t % 2``, constants) whose value range, checked numerically at the
  extreme iterator values for several sizes, lies in the axis;
* a temporary (``pf.empty``) is first filled by a nest covering its whole extent; local scalar
  accumulators follow the ``acc = init; for ...: acc += ...; X[...] = acc`` pattern;
* an i32 assignment's value is reduced ``% 1009`` and an i32 update adds ``% 7`` of its value, with no
  multiplication of two data values, so no sum or product can overflow; floats use only operations that
  stay finite and continuous (no division by data, no ``%`` or ``//`` of floats, no data-dependent where).

The result is a :class:`FuzzProgram` (module source plus the name of the ``@pf.program`` in it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

SIZE_NAMES = ("N", "M")
PAD = 3  # every axis is a * X + PAD
PROGRAM_NAME = "fuzzed"
FLOAT_TYPES = ("f32", "f64")
XS = (2, 3, 4, 7, 40)  # sizes at which subscript ranges are checked (assume: X >= 2)


@dataclass(frozen=True)
class FuzzProgram:
    """A generated program: ``source`` is a whole module defining ``@pf.program def {name}``."""

    source: str
    name: str = PROGRAM_NAME
    params: tuple[str, ...] = SIZE_NAMES
    has_time: bool = False
    statements: int = 0

    def __repr__(self) -> str:  # hypothesis prints the falsifying example with this
        return f"FuzzProgram(source='''\n{self.source}''', has_time={self.has_time})"


@dataclass(frozen=True)
class Extent:
    """``a * X + b``: an array axis, or the exclusive upper bound of a loop iterator."""

    size: str
    a: int
    b: int

    def text(self) -> str:
        lead = self.size if self.a == 1 else f"{self.a} * {self.size}"
        return lead if self.b == 0 else f"{lead} + {self.b}" if self.b > 0 else f"{lead} - {-self.b}"

    def at(self, x: int) -> int:
        return self.a * x + self.b


@dataclass(frozen=True)
class Iterator:
    name: str
    bound: Extent | None  # None: the time loop (0 <= t < T, unbounded in T)
    lo: int = 0


@dataclass
class ArrayDecl:
    name: str
    shape: tuple[Extent, ...]
    dtype: str
    temp: bool = False
    writable: bool = True
    ready: bool = True  # a temporary becomes readable once its filling nest is emitted


@dataclass
class Gen:
    draw: object
    dtype: str
    arrays: list[ArrayDecl] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    scalar: str | None = None
    n_statements: int = 0
    n_locals: int = 0
    n_iters: int = 0
    uses_time: bool = False

    # ----- helpers ------------------------------------------------------------------------------
    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def chance(self, p: float) -> bool:
        return self.draw(st.integers(0, 99)) < int(p * 100)

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * (depth + 1) + text)

    def fresh_iter(self) -> str:
        names = "ijklpqrsuvw"
        name = names[self.n_iters % len(names)] + ("" if self.n_iters < len(names) else str(self.n_iters // len(names)))
        self.n_iters += 1
        return name

    # ----- subscripts ---------------------------------------------------------------------------
    def subscripts(self, axis: Extent, its: list[Iterator]) -> list[str]:
        """Every subscript form that stays in ``0 <= s < axis`` for the iterators in scope."""
        out = [str(c) for c in range(PAD)]
        for it in its:
            if it.bound is None:
                out.append(f"{it.name} % 2")
                continue
            out.append(f"{it.name} % 3")
            forms = [(it.name, lambda v: v)] + [(f"{it.name} + {c}", lambda v, c=c: v + c) for c in (1, 2)]
            forms.append((f"{it.name} // 2", lambda v: v // 2))
            forms.append((f"2 * {it.name} + 1", lambda v: 2 * v + 1))
            if it.lo >= 1:
                forms.append((f"{it.name} - 1", lambda v: v - 1))
            for text, f in forms:
                if self._fits(axis, [(it, f)]):
                    out.append(text)
            b = it.bound
            if b.size == axis.size and b.a == 1 and b.b <= 0:
                out.append(f"{b.size} - 1 - {it.name}")
            for jt in its:
                if jt.name < it.name and jt.bound is not None and jt.bound.size == it.bound.size:
                    if self._fits2(axis, it, jt):
                        out.append(f"{it.name} + {jt.name}")
        return out

    def _fits(self, axis: Extent, parts) -> bool:
        (it, f), = parts
        if it.bound.size != axis.size:
            return False
        return all(0 <= f(v) < axis.at(x) for x in XS for v in (it.lo, it.bound.at(x) - 1) if v >= it.lo)

    def _fits2(self, axis: Extent, it: Iterator, jt: Iterator) -> bool:
        if it.bound.size != axis.size:
            return False
        return all(0 <= it.lo + jt.lo and it.bound.at(x) + jt.bound.at(x) - 2 < axis.at(x) for x in XS)

    def access(self, arr: ArrayDecl, its: list[Iterator]) -> str:
        subs = []
        for ax in arr.shape:
            forms = self.subscripts(ax, its)
            with_iters = forms[PAD:]
            subs.append(self.pick(with_iters if with_iters and not self.chance(0.15) else forms))
        return f"{arr.name}[{', '.join(subs)}]"

    # ----- values -------------------------------------------------------------------------------
    def leaf(self, its: list[Iterator], is_int: bool, locals_: list[str]) -> str:
        kinds = ["read"] * 4 + ["const"]
        if locals_:
            kinds += ["local"] * 2
        if self.scalar and not is_int:
            kinds.append("scalar")
        if is_int and its:
            kinds.append("iter")
        kind = self.pick(kinds)
        if kind == "read":
            pool = [a for a in self.arrays if a.ready and (a.dtype == "i32" if is_int else True)]
            if pool:
                return self.access(self.pick(pool), its)
            kind = "const"
        if kind == "local":
            return self.pick(locals_)
        if kind == "scalar":
            return self.scalar
        if kind == "iter":
            return self.pick([it.name for it in its])
        return self.pick(["1", "2", "3"]) if is_int else self.pick(["0.5", "1.5", "2.0", "0.25"])

    def expr(self, its: list[Iterator], is_int: bool, depth: int, locals_: list[str]) -> str:
        if depth == 0 or self.chance(0.35):
            return self.leaf(its, is_int, locals_)
        a = self.expr(its, is_int, depth - 1, locals_)
        if is_int:
            op = self.pick(["+", "-", "*2", "max", "min", "abs", "%", "//", "where"])
        else:
            op = self.pick(["+", "-", "*", "max", "min", "tanh", "sqrt", "half", "abs", "exp"])
        if op in ("+", "-", "*", "max", "min", "where"):
            b = self.expr(its, is_int, depth - 1, locals_)
            if op == "max":
                return f"{'max' if is_int else 'pf.max'}({a}, {b})"
            if op == "min":
                return f"{'min' if is_int else 'pf.min'}({a}, {b})"
            if op == "where":
                return f"pf.where({a} > {b}, {a}, {b})"
            return f"({a} {op} {b})"
        return {
            "*2": f"({a} * {self.pick(['2', '3'])})", "abs": f"abs({a})", "%": f"({a} % {self.pick(['3', '5'])})",
            "//": f"({a} // {self.pick(['2', '3'])})", "tanh": f"pf.tanh({a})", "sqrt": f"pf.sqrt(pf.abs({a}) + 1.0)",
            "half": f"({a} / 2.0)", "exp": f"pf.exp(pf.tanh({a}))",
        }[op]

    def value(self, its: list[Iterator], is_int: bool, op: str, locals_: list[str] = ()) -> str:
        e = self.expr(its, is_int, 2, list(locals_))
        if is_int:
            return f"({e}) % 1009" if op == "=" else f"({e}) % 7"
        return f"pf.tanh({e})" if op == "*=" else e

    # ----- statements ---------------------------------------------------------------------------
    def statement(self, depth: int, its: list[Iterator]) -> None:
        targets = [a for a in self.arrays if a.writable and a.ready]
        arr = self.pick(targets)
        is_int = arr.dtype == "i32"
        op = self.pick(["=", "=", "+=", "-="] + ([] if is_int else ["*="]))
        self.emit(depth, f"{self.access(arr, its)} {op} {self.value(its, is_int, op)}")
        self.n_statements += 1

    def guarded_statement(self, depth: int, its: list[Iterator]) -> None:
        spatial = [it for it in its if it.bound is not None]
        if spatial and self.chance(0.12):
            it = self.pick(spatial)
            cond = self.pick([f"{it.name} % 2 == 0", f"{it.name} >= 1", f"{it.name} <= {it.bound.size} - 2"]
                             + [f"{it.name} <= {jt.name}" for jt in spatial if jt is not it])
            self.emit(depth, f"if {cond}:")
            self.statement(depth + 1, its)
            if self.chance(0.3):
                self.emit(depth, "else:")
                self.statement(depth + 1, its)
        else:
            self.statement(depth, its)

    def loop(self, depth: int, its: list[Iterator], outer: Iterator | None) -> Iterator:
        """Emit a ``for`` header; rectangular, shifted or triangular (after ``outer``)."""
        name = self.fresh_iter()
        x = self.pick(SIZE_NAMES)
        shapes = ["rect", "rect", "from1"]
        if outer is not None and outer.bound is not None:
            shapes += ["tri_lo", "tri_hi"]
        shape = self.pick(shapes)
        if shape == "rect":
            self.emit(depth, f"for {name} in range({x}):")
            return Iterator(name, Extent(x, 1, 0))
        if shape == "from1":
            self.emit(depth, f"for {name} in range(1, {x}):")
            return Iterator(name, Extent(x, 1, 0), lo=1)
        ob = outer.bound
        if shape == "tri_lo":  # 0 <= name <= outer
            self.emit(depth, f"for {name} in range({outer.name} + 1):")
            return Iterator(name, ob)
        self.emit(depth, f"for {name} in range({outer.name}, {ob.text()}):")  # outer <= name < bound
        return Iterator(name, ob)

    def nest(self, depth: int, its: list[Iterator], levels: int, budget: int) -> None:
        """A loop nest of ``levels`` loops; statements at the innermost level and sometimes around it."""
        outer = next((it for it in reversed(its) if it.bound is not None), None)
        it = self.loop(depth, its, outer)
        inner = its + [it]
        if levels > 1:
            if budget > 1 and self.chance(0.25):
                self.guarded_statement(depth + 1, inner)
                budget -= 1
            self.nest(depth + 1, inner, levels - 1, budget)
        else:
            for _ in range(self.draw(st.integers(1, max(1, min(budget, 2))))):
                self.guarded_statement(depth + 1, inner)

    def accumulator(self, depth: int, its: list[Iterator]) -> None:
        """``acc = init; for j ...: acc += value; X[...] = acc`` inside one loop (3 statements)."""
        targets = [a for a in self.arrays if a.writable and a.ready]
        arr = self.pick(targets)
        is_int = arr.dtype == "i32"
        acc = f"acc{self.n_locals}"
        self.n_locals += 1
        outer = self.loop(depth, its, None)
        inner_its = its + [outer]
        self.emit(depth + 1, f"{acc} = {self.pick(['0', '1']) if is_int else self.pick(['0.0', '1.0'])}")
        jt = self.loop(depth + 1, inner_its, outer)
        self.emit(depth + 2, f"{acc} += {self.value(inner_its + [jt], is_int, '+=')}")
        self.emit(depth + 1, f"{self.access(arr, inner_its)} = {self.value(inner_its, is_int, '=', [acc])}")
        self.n_statements += 3

    def contraction(self, depth: int, its: list[Iterator]) -> int:
        """``C[i, j] (= init;) for k: C[i, j] += f(R[i, k] or R[k, i], L[k, j] or L[j, k])`` over rectangular
        loops (the register micro-tiles' shape, C and CUDA); 0 statements when no arrays fit (then the
        caller emits something else), else 1 or 2. Floats only: the product of two data values."""
        if self.dtype == "i32":
            return 0
        ready = [a for a in self.arrays if a.ready and len(a.shape) == 2 and a.dtype == self.dtype]
        targets = [a for a in ready if a.writable]
        if not targets or self.chance(0.3):  # (a matrix of its own: the arguments so far may have no 2-D one)
            targets = [self.matrix("C", self.pick(SIZE_NAMES), self.pick(SIZE_NAMES), True)]
        c = self.pick(targets)
        xi, xj, xk = c.shape[0].size, c.shape[1].size, self.pick(SIZE_NAMES)
        names = [self.fresh_iter() for _ in range(3)]
        i, j, k = names

        def operand(size: str) -> list[str]:  # reads moving with ``size``'s iterator and k
            it = {xi: i, xj: j}.get(size)
            out = []
            for a in ready:
                if (a.shape[0].size, a.shape[1].size) == (size, xk):
                    out.append(f"{a.name}[{it}, {k}]")
                if (a.shape[0].size, a.shape[1].size) == (xk, size):
                    out.append(f"{a.name}[{k}, {it}]")
            return out

        rows = [r for r in operand(xi) if f"[{i}," in r or f", {i}]" in r]
        lanes = [r for r in operand(xj) if f"[{j}," in r or f", {j}]" in r]
        if xi == xj:  # (the same size: the operands above name i; give the lane ones j)
            lanes = [r.replace(f"[{i},", f"[{j},").replace(f", {i}]", f", {j}]") for r in rows]
        if not rows or self.chance(0.5):  # an input of its own, k contiguous or not
            rows = [f"{self.matrix('R', xi, xk).name}[{i}, {k}]"] if self.chance(0.7) else [f"{self.matrix('R', xk, xi).name}[{k}, {i}]"]
        if not lanes or self.chance(0.5):
            lanes = [f"{self.matrix('L', xk, xj).name}[{k}, {j}]"] if self.chance(0.7) else [f"{self.matrix('L', xj, xk).name}[{j}, {k}]"]
        r, l = self.pick(rows), self.pick(lanes)
        forms = [f"{r} * {l}", f"({r} + 1.0) * {l}", f"{r} * {l} - {l}"] + ([f"alpha * {r} * {l}"] if self.scalar else [])
        starts = {n: self.pick(["", "1, "]) for n in names}
        self.emit(depth, f"for {i} in range({starts[i]}{xi}):")
        self.emit(depth + 1, f"for {j} in range({starts[j]}{xj}):")
        count = 1
        if self.chance(0.5):
            ij = its + [Iterator(i, Extent(xi, 1, 0)), Iterator(j, Extent(xj, 1, 0))]
            self.emit(depth + 2, f"{c.name}[{i}, {j}] {self.pick(['=', '*='])} {self.value(ij, False, '=')}")
            count = 2
        self.emit(depth + 2, f"for {k} in range({starts[k]}{xk}):")
        self.emit(depth + 3, f"{c.name}[{i}, {j}] += {self.pick(forms)}")
        self.n_statements += count
        return count

    def matrix(self, prefix: str, rows: str, cols: str, writable: bool = False) -> ArrayDecl:
        """A new 2-D argument of the program's type, ``rows + 3`` by ``cols + 3``."""
        arr = ArrayDecl(f"{prefix}{len(self.arrays)}", (Extent(rows, 1, PAD), Extent(cols, 1, PAD)), self.dtype, writable=writable)
        self.arrays.append(arr)
        return arr

    def fill(self, depth: int, arr: ArrayDecl, its: list[Iterator]) -> None:
        """A nest writing every element of the temporary ``arr``."""
        inner = list(its)
        for k, ax in enumerate(arr.shape):
            name = self.fresh_iter()
            self.emit(depth + k, f"for {name} in range({ax.text()}):")
            inner.append(Iterator(name, ax))
        value = self.value(inner, arr.dtype == "i32", "=")
        self.emit(depth + len(arr.shape), f"{arr.name}[{', '.join(it.name for it in inner[len(its):])}] = {value}")
        arr.ready = True
        self.n_statements += 1

    def body(self, depth: int, its: list[Iterator], budget: int, max_levels: int) -> None:
        while budget > 0:
            pending = [a for a in self.arrays if a.temp and not a.ready]
            choice = self.pick(["nest"] * 3 + (["acc"] if budget >= 3 and max_levels >= 2 else []) + (["fill"] if pending else [])
                               + (["contraction"] if budget >= 2 and max_levels >= 3 else []))
            if choice == "contraction" and self.contraction(depth, its):
                budget -= 2
                continue
            if choice == "fill":
                self.fill(depth, pending[0], its)
                budget -= 1
            elif choice == "acc":
                self.accumulator(depth, its)
                budget -= 3
            else:
                before = self.n_statements
                self.nest(depth, its, self.draw(st.integers(1, max_levels)), budget)
                budget -= self.n_statements - before


@st.composite
def programs(draw, max_statements: int = 6) -> FuzzProgram:
    """A random valid affine program (see the module docstring)."""
    dtype = draw(st.sampled_from(["f32", "f64", "f32", "f64", "i32"]))
    g = Gen(draw, dtype)
    is_int = dtype == "i32"

    def shape(rank: int) -> tuple[Extent, ...]:
        return tuple(Extent(draw(st.sampled_from(SIZE_NAMES)), draw(st.sampled_from([1, 1, 1, 2])), PAD) for _ in range(rank))

    for k in range(draw(st.integers(1, 4))):
        rank = draw(st.sampled_from([1, 2, 2, 3])) if k else draw(st.integers(1, 2))
        g.arrays.append(ArrayDecl(f"A{k}", shape(rank), dtype))
    if not is_int and draw(st.booleans()) and draw(st.booleans()):
        g.arrays.append(ArrayDecl(f"I{len(g.arrays)}", shape(draw(st.integers(1, 2))), "i32", writable=False))
    if not is_int and draw(st.integers(0, 3)) == 0:
        g.scalar = "alpha"
    n_temps = draw(st.integers(0, 2))
    for k in range(n_temps):
        g.arrays.append(ArrayDecl(f"B{k}", shape(draw(st.integers(1, 2))), dtype, temp=True, ready=False))
    n = draw(st.integers(1, max_statements))
    time_loop = draw(st.integers(0, 3)) == 0
    if time_loop:
        g.uses_time = True
        g.emit(0, "for t in range(T):")
        g.body(1, [Iterator("t", None)], n, 2)
    else:
        g.body(0, [], n, 3)

    args = [f"{a.name}: pf.{a.dtype}[{', '.join(e.text() for e in a.shape)}]" for a in g.arrays if not a.temp]
    if g.scalar:
        args.append(f"{g.scalar}: pf.{dtype}")
    sizes = SIZE_NAMES + (("T",) if g.uses_time else ())
    header = [
        "import polyfuse as pf",
        "",
        f"{', '.join(sizes)}, = pf.params({' '.join(sizes)!r})",
        "",
        "",
        '@pf.program(assume="N >= 2 and M >= 2")',
        f"def {PROGRAM_NAME}({', '.join(args)}):",
    ]
    temps = [f"    {a.name} = pf.empty(({', '.join(e.text() for e in a.shape)},), pf.{a.dtype})" for a in g.arrays if a.temp and a.ready]
    source = "\n".join(header + temps + g.lines) + "\n"
    return FuzzProgram(source, PROGRAM_NAME, sizes, g.uses_time, g.n_statements)


@st.composite
def run_settings(draw) -> dict:
    """Concrete sizes and a data seed for one run of a program."""
    return {"N": draw(st.integers(2, 6)), "M": draw(st.integers(2, 6)), "T": draw(st.integers(0, 3)), "seed": draw(st.integers(0, 2**16))}
