"""Random C kernels for the C-emitting fuzz mode: valid C whose meaning hinges on C's own rules.

:func:`c_program` draws, from a seed, one function ``void fuzzed(int n, ...)`` over 1-d arrays of extent
``n + 4``: ``double``/``int``/``char``/``unsigned char``/``short`` inputs (``F0 I0 C0 U0 H0``, never written)
and outputs (``F1 I1 C1 S1``), loops over ``i`` and ``j`` (from at least 0 to at most ``n``) whose bounds may hold truncating divisions, affine
``if``s with ``%`` of possibly negative values, and assignments (``=``, compound, ``++``, chained) whose
values mix integer ``/ % >> & ?:``, casts, char promotion and int-to-double conversions. Everything is
defined behaviour for every ``n >= 1``:

* every subscript form in :data:`SUBSCRIPTS` stays in ``[0, n + 4)`` for ``0 <= k < n`` (checked by
  :func:`check_tables` in C semantics for n up to 60); loop bounds stay in ``[0, n]``;
* integer values stay far from overflow: an assigned int value is reduced ``% 1009``, an update adds a
  value reduced ``% 7``; a divisor is a non-zero constant or ``(x | 1)`` of a small value;
* ``(int)`` casts of floats only read the input ``F0`` (no rounding difference can flip a truncation), so
  integers must agree exactly with gcc; floats use ``+ - *``, division by constants, and ``sqrt(fabs(.))``.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

import numpy as np

PAD = 4
# (text with k for the iterator) -> valid for 0 <= k < n, n >= 1, extent n + PAD
SUBSCRIPTS = ("k", "k + 3", "n - 1 - k", "k / 2", "(k - 1) / 2", "(k - 5) / 2 + 2", "(k - 4) % 3 + 2", "(k + 7) % 5",
              "(n - k) / 3", "-k / 2 + n", "(9 - k) / -4 + 3", "(1 - k) % 2 + 1")
LOWER = ("0", "(n - 7) / 3 + 2", "(5 - n) % 3 + 2")
UPPER = ("n", "(n + 1) / 2", "n - (n + 2) / 3")
CONDITIONS = ("(k - 3) % 2 == -1", "(k - 4) / 3 == -1", "(k - 6) % 4 != 0", "k / 2 * 2 == k", "(k - n) / 2 < -1")
INPUTS = {"F0": "double", "I0": "int", "C0": "signed char", "U0": "unsigned char", "H0": "short"}
OUTPUTS = {"F1": "double", "I1": "int", "C1": "signed char", "S1": "short"}
NUMPY = {"double": np.float64, "int": np.int32, "signed char": np.int8, "unsigned char": np.uint8, "short": np.int16}


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def c_eval(text: str, k: int, n: int) -> int:
    """An integer expression of ``k`` and ``n`` (``+ - * / %``, comparisons) evaluated with C's truncation."""
    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return {"k": k, "n": n}[node.id]
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand)
        if isinstance(node, ast.Compare):
            a, b = ev(node.left), ev(node.comparators[0])
            return int({ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b}[type(node.ops[0])])
        a, b = ev(node.left), ev(node.right)
        if isinstance(node.op, ast.Div):
            return c_div(a, b)
        if isinstance(node.op, ast.Mod):
            return a - b * c_div(a, b)
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]

    return ev(ast.parse(text, mode="eval"))


def check_tables(max_n: int = 60) -> None:
    """Every subscript form inside the arrays, lower bounds at least 0, upper bounds within ``[0, n]``, for
    1 <= n <= max_n."""
    for n in range(1, max_n + 1):
        for s in SUBSCRIPTS:
            for k in range(n):
                assert 0 <= c_eval(s, k, n) < n + PAD, (s, k, n)
        for b in LOWER:
            assert c_eval(b, 0, n) >= 0, (b, n)
        for b in UPPER:
            assert 0 <= c_eval(b, 0, n) <= n, (b, n)


@dataclass(frozen=True)
class CFuzzProgram:
    """A generated kernel: its C ``source``, the function name, and ``n``-independent argument types."""

    source: str
    seed: int
    name: str = "fuzzed"


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def sub(self, array: str, its: list[str]) -> str:
        return f"{array}[{self.r.choice(SUBSCRIPTS).replace('k', self.r.choice(its))}]"

    def int_value(self, its: list[str], depth: int) -> str:
        r = self.r
        if depth == 0 or r.random() < 0.3:
            kind = r.randrange(6)
            if kind == 0:
                return str(r.randint(-9, 9))
            if kind == 1:
                return r.choice(its + ["n"])
            if kind == 2:
                return f"(int) {self.sub('F0', its)}"
            return self.sub(r.choice(["I0", "C0", "U0", "H0", "I1", "C1", "S1"]), its)
        a, b = self.int_value(its, depth - 1), self.int_value(its, depth - 1)
        op = r.randrange(9)
        if op < 3:
            return f"({a} {'+-'[op % 2]} {b})"
        if op == 3:
            return f"({a} * {r.randint(-4, 4)})"
        if op == 4:
            return f"({a} {r.choice('/%')} {r.choice([2, 3, -3, 7])})"
        if op == 5:
            return f"({a} {r.choice('/%')} ({b} | 1))"
        if op == 6:
            return f"({a} > {b} ? {a} : {b})"
        if op == 7:
            return f"(({a} & 15) + ({b} >> 1))"
        return f"(-({a}))"

    def float_value(self, its: list[str], depth: int, inputs_only: bool = False) -> str:
        r = self.r
        if depth == 0 or r.random() < 0.3:
            kind = r.randrange(5)
            if kind == 0:
                return r.choice(["0.5", "-1.25", "3.0", "2"])
            if kind == 1:
                return f"{self.sub('I0', its)} / {r.choice([2, -3, 4])}"
            if kind == 2 and not inputs_only:
                return f"(double) {self.int_value(its, 1)}"
            return self.sub("F0" if inputs_only else r.choice(["F0", "F1"]), its)
        a, b = self.float_value(its, depth - 1, inputs_only), self.float_value(its, depth - 1, inputs_only)
        op = r.randrange(5)
        if op < 3:
            return f"({a} {'+-*'[op]} {b})"
        if op == 3:
            return f"({a} / {r.choice(['3.0', '-2.0', '7'])})"
        return f"sqrt(fabs({a}))"

    def assignment(self, its: list[str]) -> str:
        r = self.r
        target = r.choice(list(OUTPUTS))
        lhs = self.sub(target, its)
        if target == "F1":
            op = r.choice(["=", "+=", "-=", "*=", "/="])
            value = self.float_value(its, 2)
            if op in ("*=", "/="):
                value = r.choice(["0.5", "-1.5", "2"])
            return f"{lhs} {op} {value};"
        kind = r.randrange(6)
        if kind == 0:
            return f"{lhs}{r.choice(['++', '--'])};"
        if kind == 1:
            return f"{lhs} {r.choice(['+=', '-='])} ({self.int_value(its, 2)}) % 7;"
        if kind == 2:
            return f"{lhs} {r.choice(['/=', '%='])} {r.choice([2, 3, -5])};"
        if kind == 3:  # chained through another integer output (a double's conversion to char could overflow)
            other = self.sub(r.choice([t for t in ("I1", "C1", "S1") if t != target]), its)
            return f"{lhs} = {other} = ({self.int_value(its, 2)}) % 1009;"
        if kind == 4 and target != "C1":  # int or short += double: the double reads only the input F0, so
            # rounding cannot differ, and the sum stays inside the target's range
            return f"{lhs} += {self.float_value(its, 1, inputs_only=True)};"
        return f"{lhs} = ({self.int_value(its, 2)}) % 1009;"

    def nest(self) -> list[str]:
        r = self.r
        lines = [f"  for (i = {r.choice(LOWER)}; i < {r.choice(UPPER)}; i++) {{"]
        its = ["i"]
        pad = "    "
        if r.random() < 0.4:
            lines.append(f"    for (j = {r.choice(LOWER)}; j < {r.choice(UPPER)}; j++) {{")
            its.append("j")
            pad = "      "
        for _ in range(r.randint(1, 3)):
            stmt = self.assignment(its)
            if r.random() < 0.3:
                stmt = f"if ({r.choice(CONDITIONS).replace('k', r.choice(its))}) {stmt}"
            lines.append(pad + stmt)
        if len(its) == 2:
            lines.append("    }")
        lines.append("  }")
        return lines


def c_program(seed: int) -> CFuzzProgram:
    """The kernel of ``seed``: 1 to 3 loop nests (see the module docstring)."""
    g = _Gen(seed)
    params = ", ".join(f"{t} {a}[n + {PAD}]" for a, t in {**INPUTS, **OUTPUTS}.items())
    body = [line for _ in range(g.r.randint(1, 3)) for line in g.nest()]
    src = "#include <math.h>\n" f"void fuzzed(int n, {params})\n{{\n  int i, j;\n#pragma scop\n" + "\n".join(body) + "\n#pragma endscop\n}\n"
    return CFuzzProgram(src, seed)


def c_arguments(n: int, seed: int) -> dict[str, np.ndarray]:
    """Inputs for a kernel at size ``n``: small values of both signs (the outputs start as noise too)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in {**INPUTS, **OUTPUTS}.items():
        if t == "double":
            out[name] = rng.uniform(-20, 20, n + PAD)
        else:
            info = np.iinfo(NUMPY[t])
            out[name] = rng.integers(max(info.min, -100), min(info.max, 100) + 1, n + PAD).astype(NUMPY[t])
    return out
