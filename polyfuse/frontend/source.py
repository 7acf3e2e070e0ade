"""The source of a ``@pf.program`` function: its syntax tree, its namespaces, and error locations.

:class:`FunctionSource` answers "where is this node in the user's file" (for :class:`SourceError`, with
``file:line:col``, the line and a caret) and "what does this name mean outside the function" (globals,
closure variables, and for annotations of nested functions the enclosing function's locals). The
function is never called.
"""

from __future__ import annotations

import ast
import inspect
import linecache
from collections.abc import Callable
from typing import Any

import numpy as np

from polyfuse.errors import SourceError
from polyfuse.frontend.affine import Binding, NameKind
from polyfuse.types import ArrayType, Param, SizeExpr

NOT_A_FUNCTION = "@pf.program applies to a function definition (a `def` statement)"


class FunctionSource:
    """The parsed source of one function and the namespaces its names resolve in."""

    def __init__(self, fn: Callable, name: str, namespace: dict[str, Any] | None = None) -> None:
        try:
            self.filename: str = inspect.getsourcefile(fn) or inspect.getfile(fn)
            raw_lines, first_line = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            raise SourceError(f"cannot read the source of {name!r}: @pf.program needs a function defined in a file") from None
        self.first_line = max(first_line, 1)
        first = raw_lines[0]
        indent = first[: len(first) - len(first.lstrip())]
        self.col_shift = len(indent)
        # Lines that do not start with the indentation are continuations inside strings: kept as they are.
        self.text = "".join(line[len(indent):] if line.startswith(indent) else line for line in raw_lines)
        try:
            tree = ast.parse(self.text)
        except SyntaxError:
            raise SourceError(NOT_A_FUNCTION, filename=self.filename, line=self.first_line) from None
        if not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
            raise self.error(tree.body[0] if tree.body else tree, NOT_A_FUNCTION)
        self.fdef: ast.FunctionDef = tree.body[0]
        closure = _closure_vars(fn)
        module = getattr(fn, "__globals__", {})
        self.env: dict[str, Any] = {**module, **closure}
        # Annotations are evaluated where the function is defined: a nested function's annotations see
        # the enclosing function's locals even when its body does not mention them.
        nested = "<locals>" in getattr(fn, "__qualname__", "")
        self.annotation_env: dict[str, Any] = {**module, **(namespace if nested and namespace else {}), **closure}
        self.annotations: dict[str, Any] = dict(getattr(fn, "__annotations__", None) or {})
        self.assigned_names = {t.id for n in ast.walk(self.fdef) for t in _assigned_targets(n) if isinstance(t, ast.Name)}

    def error(self, node: ast.AST, message: str, hint: str | None = None, origin: tuple[int, int] | None = None) -> SourceError:
        """A SourceError at ``node``; with an ``origin`` (file line, column) ``node`` is positioned in a
        piece of text that starts there (the ``assume=`` string) instead of in the function."""
        if origin is not None:
            line = origin[0] + getattr(node, "lineno", 1) - 1
            col = origin[1] + getattr(node, "col_offset", 0)
        else:
            line = self.line_of(node)
            col = getattr(node, "col_offset", 0) + self.col_shift
        return SourceError(message, filename=self.filename, line=line, col=col,
                           source_line=linecache.getline(self.filename, line) or None, hint=hint)

    def line_of(self, node: ast.AST) -> int:
        """The file line where ``node`` starts."""
        return self.first_line + getattr(node, "lineno", 1) - 1

    def segment(self, node: ast.AST) -> str:
        """The source text of ``node`` on one line (whitespace runs collapsed)."""
        return " ".join((ast.get_source_segment(self.text, node) or ast.unparse(node)).split())

    def else_keyword(self, node: ast.For | ast.While | ast.If) -> ast.AST:
        """A position-only node at the ``else`` keyword of ``node`` (its else block if none is found)."""
        lines = self.text.splitlines()
        for lineno in range(node.body[-1].end_lineno or node.lineno, node.orelse[0].lineno + 1):
            stripped = lines[lineno - 1].lstrip()
            if stripped.startswith("else") and stripped[4:].lstrip().startswith(":"):
                return ast.Pass(lineno=lineno, col_offset=len(lines[lineno - 1]) - len(stripped))
        return node.orelse[0]

    def literal_origin(self, node: ast.AST, value: str) -> tuple[int, int] | None:
        """File position of the first character inside the one-line string literal ``node`` holding exactly
        ``value`` (so that errors can point into it), else None."""
        if isinstance(node, ast.Constant) and node.lineno == node.end_lineno:
            text = ast.get_source_segment(self.text, node) or ""
            if len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0] and text[1:-1] == value:
                return (self.line_of(node), node.col_offset + self.col_shift + 1)
        return None

    def evaluate(self, text: str, node: ast.AST, env: dict[str, Any], what: str, hint: str | None = None) -> Any:
        """Evaluate the Python expression ``text`` (an annotation, a shape) in ``env``; failures are
        reported at ``node``."""
        try:
            return eval(compile(text.strip(), "<annotation>", "eval"), dict(env))  # noqa: S307 - the user's own code
        except Exception as e:  # noqa: BLE001 - any failure is the user's expression, reported at it
            reason = "invalid syntax" if isinstance(e, SyntaxError) else (str(e) or type(e).__name__)
            raise self.error(node, f"cannot evaluate `{text.strip()}` ({what}): {reason}", hint=hint) from None


def binding_of(value: Any) -> Binding:
    """The meaning of a Python object that a name outside the function refers to."""
    if isinstance(value, Param):
        return Binding(NameKind.PARAM, value.name)
    if isinstance(value, SizeExpr):
        return Binding(NameKind.SIZE_EXPR, value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return Binding(NameKind.INT, int(value))
    if isinstance(value, (float, np.floating)):
        return Binding(NameKind.FLOAT, float(value))
    return Binding(NameKind.OTHER, value)


def params_in(value: Any) -> list[str]:
    """The size params a value mentions (a Param, a size expression, an annotation, a shape tuple)."""
    if isinstance(value, Param):
        return [value.name]
    if isinstance(value, SizeExpr):
        return [n for n, _ in value.terms]
    if isinstance(value, ArrayType):
        return [p for d in value.shape for p in params_in(d)]
    if isinstance(value, (tuple, list)):
        return [p for d in value for p in params_in(d)]
    return []


def without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` without a leading docstring."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _closure_vars(fn: Callable) -> dict[str, Any]:
    """The closure variables of ``fn`` (empty cells are skipped)."""
    env: dict[str, Any] = {}
    code = getattr(fn, "__code__", None)
    for var, cell in zip(code.co_freevars if code else (), getattr(fn, "__closure__", None) or ()):
        try:
            env[var] = cell.cell_contents
        except ValueError:
            pass
    return env


def _assigned_targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []
