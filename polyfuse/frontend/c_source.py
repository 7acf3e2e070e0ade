"""C source for the SCoP frontend: preprocessing, parsing, and locating nodes in the user's file.

The text goes through the system preprocessor (``cc -E``) with line markers, so that every node
pycparser builds carries the file and line of the *original* source. System headers are replaced by tiny
stand-ins (``-nostdinc`` plus generated ``math.h``, ``stdio.h``, ... holding only what pycparser needs to
parse: prototypes and typedefs), and a prelude gives PolyBench's macros their C99 meaning
(``POLYBENCH_2D(A, N, M, n, m)`` declares ``A[n][m]``; ``_PB_N`` is ``n``), so PolyBench kernels read as
written. Values given in ``defines`` become ``-D NAME=VALUE``, and an unguarded ``#define NAME ...`` of
the same name in the main file is blanked (line kept) so that the caller's value wins.

Errors of the preprocessor and the parser become :class:`SourceError` at the user's ``file:line``.
"""

from __future__ import annotations

import atexit
import linecache
import os
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pycparser import c_ast, c_generator, c_parser
from pycparser.c_parser import ParseError

from polyfuse.errors import PolyfuseWarning, SourceError, user_stacklevel

TEXT_NAME = "<string>"
ASSUME_FUNCTION = "__polyfuse_assume__"
ASSUME_NAME = "<assume>"

_MATH = "\n".join(
    f"{t} {f}{s}({', '.join([t] * n)});"
    for f, n in (("sqrt", 1), ("exp", 1), ("log", 1), ("tanh", 1), ("fabs", 1), ("pow", 2), ("fmax", 2), ("fmin", 2),
                 ("sin", 1), ("cos", 1), ("floor", 1), ("ceil", 1))
    for t, s in (("double", ""), ("float", "f"))
)
_HEADERS = {
    "math.h": _MATH + "\nint abs(int);\n#define M_PI 3.14159265358979323846\n",
    "stdio.h": "typedef struct _polyfuse_FILE FILE;\nextern FILE *stdin, *stdout, *stderr;\n"
               "int printf(const char *, ...);\nint fprintf(FILE *, const char *, ...);\nint sprintf(char *, const char *, ...);\n"
               "int puts(const char *);\n",
    "stdlib.h": "typedef unsigned long size_t;\nvoid *malloc(size_t);\nvoid *calloc(size_t, size_t);\nvoid free(void *);\n"
                "void exit(int);\nint atoi(const char *);\nint rand(void);\n#define NULL ((void *)0)\n#define RAND_MAX 2147483647\n",
    "string.h": "typedef unsigned long size_t;\nvoid *memset(void *, int, size_t);\nvoid *memcpy(void *, const void *, size_t);\n",
    "stddef.h": "typedef unsigned long size_t;\ntypedef long ptrdiff_t;\n#define NULL ((void *)0)\n",
    "stdint.h": "typedef int int32_t;\ntypedef long int64_t;\ntypedef unsigned int uint32_t;\ntypedef unsigned long uint64_t;\n",
    "stdbool.h": "#define bool _Bool\n#define true 1\n#define false 0\n",
    "assert.h": "#define assert(x) ((void)0)\n",
    "float.h": "#define FLT_MAX 3.402823466e+38F\n#define DBL_MAX 1.7976931348623158e+308\n",
    "limits.h": "#define INT_MAX 2147483647\n#define INT_MIN (-2147483647 - 1)\n",
    "time.h": "typedef long time_t;\ntime_t time(time_t *);\n",
    "sys/time.h": "struct timeval { long tv_sec; long tv_usec; };\nint gettimeofday(struct timeval *, void *);\n",
    "unistd.h": "",
    "omp.h": "int omp_get_thread_num(void);\nint omp_get_num_threads(void);\n",
    # PolyBench's own header: its macros live in the prelude, so the file itself has nothing to add.
    "polybench.h": "",
}
# Always included first: GNU spellings pycparser does not know, and PolyBench's macros in their C99 form
# (array parameters sized by the function's int parameters, loop bounds that are those parameters).
_PRELUDE = """\
#define __attribute__(x)
#define __restrict restrict
#define __restrict__ restrict
#define __inline inline
#define __inline__ inline
#define __extension__
#define __asm__(x)
#ifndef DATA_TYPE
#define DATA_TYPE double
#endif
#ifndef SCALAR_VAL
#define SCALAR_VAL(x) x
#endif
#ifndef SQRT_FUN
#define SQRT_FUN(x) sqrt(x)
#endif
#ifndef EXP_FUN
#define EXP_FUN(x) exp(x)
#endif
#ifndef POW_FUN
#define POW_FUN(x, y) pow(x, y)
#endif
#ifdef POLYBENCH_USE_SCALAR_LB
#define POLYBENCH_LOOP_BOUND(x, y) x
#else
#define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#define POLYBENCH_1D(var, d1, ds1) var[ds1]
#define POLYBENCH_2D(var, d1, d2, ds1, ds2) var[ds1][ds2]
#define POLYBENCH_3D(var, d1, d2, d3, ds1, ds2, ds3) var[ds1][ds2][ds3]
#define POLYBENCH_4D(var, d1, d2, d3, d4, ds1, ds2, ds3, ds4) var[ds1][ds2][ds3][ds4]
#define POLYBENCH_5D(var, d1, d2, d3, d4, d5, ds1, ds2, ds3, ds4, ds5) var[ds1][ds2][ds3][ds4][ds5]
#define POLYBENCH_1D_ARRAY_DECL(var, type, d1, ds1) type var[d1]
#define POLYBENCH_2D_ARRAY_DECL(var, type, d1, d2, ds1, ds2) type var[d1][d2]
#define POLYBENCH_3D_ARRAY_DECL(var, type, d1, d2, d3, ds1, ds2, ds3) type var[d1][d2][d3]
#define POLYBENCH_4D_ARRAY_DECL(var, type, d1, d2, d3, d4, ds1, ds2, ds3, ds4) type var[d1][d2][d3][d4]
#define POLYBENCH_5D_ARRAY_DECL(var, type, d1, d2, d3, d4, d5, ds1, ds2, ds3, ds4, ds5) type var[d1][d2][d3][d4][d5]
#define POLYBENCH_ARRAY(x) x
#define POLYBENCH_FREE_ARRAY(x) ((void)0)
#define POLYBENCH_DUMP_TARGET stderr
#define POLYBENCH_DUMP_START
#define POLYBENCH_DUMP_FINISH
#define POLYBENCH_DUMP_BEGIN(s)
#define POLYBENCH_DUMP_END(s)
#define polybench_start_instruments
#define polybench_stop_instruments
#define polybench_print_instruments
#define polybench_prevent_dce(x) x
"""


@dataclass
class CUnit:
    """A parsed translation unit and what is needed to point at its nodes in the user's text."""

    ast: c_ast.FileAST
    filename: str
    lines: dict[str, list[str]]  # original text of the main file (and the assume= text), by file name
    expanded: dict[tuple[str, int], str] = field(default_factory=dict)  # preprocessed text of each source line

    def source_line(self, filename: str, line: int) -> str | None:
        """The user's text of ``line`` in ``filename`` (a header is read from disk)."""
        lines = self.lines.get(filename)
        if lines is not None:
            return lines[line - 1] if 0 < line <= len(lines) else None
        return linecache.getline(filename, line) or None

    def column(self, node: c_ast.Node, text: str | None = None) -> int | None:
        """The 0-based column of ``node`` in the user's line: the parser's column where macro expansion left
        the line unchanged up to it, else where ``text`` is found in the line, else None."""
        coord = node.coord
        if coord is None or not coord.line:
            return None
        original = self.source_line(coord.file, coord.line)
        expanded = self.expanded.get((coord.file, coord.line))
        col = (coord.column or 1) - 1
        if original is not None and expanded is not None and expanded[:col] == original[:col] and col < len(original):
            return col
        if original is not None and text:
            pattern = r"\s*".join(re.escape(ch) for ch in text if not ch.isspace())
            m = re.search(pattern, original)
            if m:
                return m.start()
        return None

    def segment(self, node: c_ast.Node) -> str:
        """The user's text of a statement node when it sits on one unexpanded line, else regenerated C."""
        coord = node.coord
        if coord is not None and coord.line:
            original = self.source_line(coord.file, coord.line)
            col = self.column(node)
            if original is not None and col is not None and self.expanded.get((coord.file, coord.line)) == original:
                rest = original[col:]
                end = rest.find(";")
                if end > 0:
                    return " ".join(rest[:end].split())
        return node_text(node)

    def error(self, node: c_ast.Node | None, message: str, hint: str | None = None) -> SourceError:
        """A SourceError at ``node``: ``file:line:col``, the user's line and a caret under the construct."""
        coord = node.coord if node is not None else None
        if coord is None or not coord.line:
            return SourceError(message, filename=self.filename, hint=hint)
        return SourceError(message, filename=coord.file or self.filename, line=coord.line,
                           col=self.column(node, node_text(node)), source_line=self.source_line(coord.file, coord.line), hint=hint)


def node_text(node: c_ast.Node) -> str:
    """C text of ``node`` regenerated from the tree (macros appear expanded)."""
    return " ".join(c_generator.CGenerator().visit(node).split())


def is_text(source: str) -> bool:
    """Whether ``from_c``'s argument is C text rather than a path: text has a newline or a brace."""
    return "\n" in source or "{" in source


def read_c(source: str, defines: Mapping[str, object] | None = None, assume: str | None = None,
           include_dirs: Sequence[str | Path] = ()) -> CUnit:
    """Preprocess and parse a C file (a path) or C text into a :class:`CUnit`.

    ``include_dirs`` are searched for ``#include`` files after the file's own folder (``-I``); polyfuse's
    stand-ins for system headers and ``polybench.h`` still come first.

    With ``assume`` (a C condition on the sizes) a function ``__polyfuse_assume__`` holding ``if (assume);``
    is parsed along with the file, positioned in a pseudo-file ``<assume>``, so the condition goes through
    the same macro expansion as the kernel.
    """
    if is_text(source):
        filename, text, folder = TEXT_NAME, source, Path.cwd()
    else:
        path = Path(source)
        if not path.is_file():
            raise SourceError(f"{source}: no such C file" if not path.exists() else f"{source}: not a file")
        filename, folder = source, path.resolve().parent
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise SourceError(f"{source}: cannot read the file ({e.__class__.__name__})") from None
    defines = dict(defines or {})
    for name in defines:
        if not re.fullmatch(r"[A-Za-z_]\w*", str(name)):
            raise SourceError(f"defines: {name!r} is not a macro name", hint="defines maps macro names to values, e.g. {'N': 400}")
    lines = {filename: text.splitlines()}
    body = _without_defines(text, set(defines))
    if assume is not None:
        if "\n" in assume:
            raise SourceError(f"assume={assume!r} must be a single line", hint='e.g. assume="n >= 2 && m >= n"')
        lines[ASSUME_NAME] = [assume]
        # The condition sits alone on line 1 of the pseudo-file, so columns in it are the user's columns.
        body += f'\nvoid {ASSUME_FUNCTION}(void) {{ if (\n#line 1 "{ASSUME_NAME}"\n{assume}\n) ; }}\n'
    for d in include_dirs:
        if not Path(d).is_dir():
            raise SourceError(f"include_dirs: {d} is not a folder")
    expanded_text = _preprocess(body, filename, folder, defines, tuple(str(d) for d in include_dirs))
    unit = CUnit(ast=_parse(expanded_text, filename, lines), filename=filename, lines=lines)
    unit.expanded = _expanded_lines(expanded_text)
    return unit


def _without_defines(text: str, names: set[str]) -> str:
    """``text`` with each ``#define NAME`` of a name in ``names`` blanked, line count kept."""
    if not names:
        return text
    out = text.splitlines()
    k = 0
    while k < len(out):
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", out[k])
        if m and m.group(1) in names:
            while out[k].rstrip().endswith("\\") and k + 1 < len(out):
                out[k] = ""
                k += 1
            out[k] = ""
        k += 1
    return "\n".join(out) + "\n"


def _compiler() -> str:
    for cc in ("cc", "gcc", "clang"):
        found = shutil.which(cc)
        if found:
            return found
    raise SourceError("reading C needs a C preprocessor: no cc, gcc or clang on PATH")


_STAND_INS: dict[int, Path] = {}  # process id -> its folder of stand-in headers
_STAND_INS_LOCK = threading.Lock()


def _stand_ins() -> Path:
    """A folder holding the stand-in headers and the prelude, written once per process and removed when
    it exits (a forked child makes its own, and never removes its parent's): every ``from_c`` used to
    write the 16 files afresh, a few milliseconds of a kernel's compile time."""
    with _STAND_INS_LOCK:
        root = _STAND_INS.get(os.getpid())
        if root is not None and root.is_dir():
            return root
        root = Path(tempfile.mkdtemp(prefix="polyfuse-c-"))
        for name, content in _HEADERS.items():
            header = root / name
            header.parent.mkdir(parents=True, exist_ok=True)
            header.write_text(content)
        (root / "polyfuse_prelude.h").write_text(_PRELUDE)
        _STAND_INS[os.getpid()] = root
        atexit.register(_remove_stand_ins, os.getpid(), root)
        return root


def _remove_stand_ins(pid: int, root: Path) -> None:
    if os.getpid() == pid:
        shutil.rmtree(root, ignore_errors=True)


def _preprocess(text: str, filename: str, folder: Path, defines: dict[str, object], include_dirs: tuple[str, ...] = ()) -> str:
    """``cc -E`` of ``text`` with line markers naming ``filename``; stand-in headers shadow system ones."""
    root = _stand_ins()
    # The copy lives beside the stand-ins, so even `#include "polybench.h"` finds ours first (a name of
    # its own: several threads may read C at once).
    fd, name = tempfile.mkstemp(prefix="polyfuse_input_", suffix=".c", dir=root)
    src = Path(name)
    try:
        quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
        with os.fdopen(fd, "w") as f:
            f.write(f'#line 1 "{quoted}"\n{text}')
        cmd = [_compiler(), "-E", "-nostdinc", "-w", "-I", str(root), "-I", str(folder), *(f"-I{d}" for d in include_dirs),
               "-include", str(root / "polyfuse_prelude.h"), *(f"-D{k}={v}" for k, v in defines.items()), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SourceError(f"{filename}: the C preprocessor failed to run ({e.__class__.__name__})") from None
    finally:
        src.unlink(missing_ok=True)
    if done.returncode != 0:
        raise _preprocessor_error(done.stderr, filename)
    return done.stdout


def _preprocessor_error(stderr: str, filename: str) -> SourceError:
    for line in stderr.splitlines():
        m = re.match(r"(.*?):(\d+):(?:(\d+):)?\s*(?:fatal )?error:\s*(.*)", line)
        if m:
            file, lineno = m.group(1), int(m.group(2))
            col = int(m.group(3)) - 1 if m.group(3) else None
            hint = ("system headers are not read: polyfuse provides stand-ins for the usual ones (math.h, stdio.h, ...); "
                    "for your own headers give their folder: include_dirs= in pf.from_c, -I DIR on the command line"
                    if "No such file" in m.group(4) else None)
            source_line = linecache.getline(file, lineno) or None
            return SourceError(f"C preprocessor: {m.group(4)}", filename=file, line=lineno, col=col, source_line=source_line, hint=hint)
    first = stderr.strip().splitlines()[0] if stderr.strip() else "unknown failure"
    return SourceError(f"C preprocessor: {first}", filename=filename)


class _Parser(c_parser.CParser):
    """pycparser's parser, with a position on every syntax error (some name only the file)."""

    def _parse_error(self, msg: str, coord: object) -> None:  # type: ignore[override]
        if isinstance(coord, str) or coord is None:
            try:
                tok = self._peek()
            except Exception:  # noqa: BLE001 - the lexer state is best effort here
                tok = None
            if tok is not None:
                coord = self._tok_coord(tok)
                msg = f"{msg} before: {tok.value}"
        super()._parse_error(msg, coord)


def _parse(text: str, filename: str, lines: dict[str, list[str]]) -> c_ast.FileAST:
    try:
        return _Parser().parse(text, filename)
    except ParseError as e:
        m = re.match(r"(.*?):(\d+)(?::(\d+))?:\s*(.*)", str(e), re.S)
        if not m:
            raise SourceError(f"C syntax error: {e}", filename=filename) from None
        file, line = m.group(1) or filename, int(m.group(2))
        col = int(m.group(3)) - 1 if m.group(3) else None
        reason = m.group(4).strip()
        before = re.match(r"(.*?)\s*before:\s*(.*)", reason)
        reason = f"{before.group(1) or 'syntax error'} before `{before.group(2)}`" if before else reason
        if file == ASSUME_NAME and line > 1:  # the parser stopped after the condition: point at its end
            line, col = 1, len(lines[ASSUME_NAME][0])
            reason = "the condition ends before its expression is complete"  # (not the `)` polyfuse put after it)
        src_lines = lines.get(file)
        source_line = (src_lines[line - 1] if src_lines and 0 < line <= len(src_lines) else linecache.getline(file, line)) or None
        raise SourceError(f"C syntax error: {reason}", filename=file, line=line, col=col, source_line=source_line) from None


def _expanded_lines(text: str) -> dict[tuple[str, int], str]:
    """Each original (file, line) -> its text after preprocessing, read off the line markers."""
    out: dict[tuple[str, int], str] = {}
    file, line = "", 0
    for raw in text.splitlines():
        m = re.match(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"', raw)
        if m:
            line, file = int(m.group(1)), m.group(2).replace('\\"', '"').replace("\\\\", "\\")
            continue
        out.setdefault((file, line), raw)
        line += 1
    return out


# ----- functions and the SCoP region ------------------------------------------------------------------
def functions_in(unit: CUnit) -> list[c_ast.FuncDef]:
    """Function definitions of the user's file (not of headers, not the assume= holder)."""
    return [e for e in unit.ast.ext if isinstance(e, c_ast.FuncDef) and e.decl.name != ASSUME_FUNCTION
            and (e.coord is None or e.coord.file == unit.filename)]


def assume_condition(unit: CUnit) -> c_ast.Node | None:
    """The condition of ``assume=``, when one was given."""
    for e in unit.ast.ext:
        if isinstance(e, c_ast.FuncDef) and e.decl.name == ASSUME_FUNCTION:
            return e.body.block_items[0].cond
    return None


def scop_pragmas(node: c_ast.Node) -> list[tuple[c_ast.Compound, int, c_ast.Pragma]]:
    """Every ``#pragma scop`` / ``endscop`` under ``node``: (the block holding it, its index, the pragma)."""
    out: list[tuple[c_ast.Compound, int, c_ast.Pragma]] = []

    def visit(n: c_ast.Node) -> None:
        if isinstance(n, c_ast.Compound):
            for k, item in enumerate(n.block_items or []):
                if isinstance(item, c_ast.Pragma) and item.string.split()[:1] in (["scop"], ["endscop"]):
                    out.append((n, k, item))
        for _, child in n.children():
            visit(child)

    visit(node)
    return out


def has_scop(fdef: c_ast.FuncDef) -> bool:
    return any(p.string.split()[0] == "scop" for _, _, p in scop_pragmas(fdef.body))


def scop_region(unit: CUnit, fdef: c_ast.FuncDef) -> list[c_ast.Node]:
    """The statements between ``#pragma scop`` and ``#pragma endscop`` of ``fdef`` (its whole body when it
    has no pragma); both pragmas must be in the same block, once."""
    found = scop_pragmas(fdef.body)
    if not found:
        warnings.warn(f"{unit.filename}: function `{fdef.decl.name}` has no `#pragma scop`: its whole body is read as the "
                      "region to optimize (mark the region with #pragma scop ... #pragma endscop)", PolyfuseWarning,
                      stacklevel=user_stacklevel())
        return list(fdef.body.block_items or [])
    starts = [f for f in found if f[2].string.split()[0] == "scop"]
    ends = [f for f in found if f[2].string.split()[0] == "endscop"]
    if len(starts) > 1:
        raise unit.error(starts[1][2], f"function `{fdef.decl.name}` has more than one `#pragma scop`",
                         hint="put the code to optimize in one region, or in separate functions")
    if not starts:
        raise unit.error(ends[0][2], "`#pragma endscop` without a `#pragma scop` before it")
    block, first, start = starts[0]
    end = next((f for f in ends if f[0] is block and f[1] > first), None)
    if end is None:
        raise unit.error(start, "`#pragma scop` has no matching `#pragma endscop` in the same block",
                         hint="close the region with #pragma endscop before the end of its block")
    return list(block.block_items[first + 1 : end[1]])
