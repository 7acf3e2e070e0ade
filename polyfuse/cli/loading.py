"""Resolve a ``FILE[::NAME]`` argument to the :class:`~polyfuse.ir.program.Program` it names.

* ``kernels.py::gemm`` imports ``kernels.py`` by path (under a module name of its own, so two files with
  the same stem never collide) and returns its ``pf.Program`` named ``gemm``.
* ``kernels.py`` alone returns the one Program the file defines; with none or several it is an error that
  lists the names.
* ``kernel.c::kernel_gemm`` reads the SCoP of a C function through the C frontend
  (``polyfuse.frontend.scop_c``) when that module is present; ``-D NAME=VALUE`` and ``--assume COND`` go
  to it as ``defines=`` and ``assume=`` (and are an error for a ``.py`` file).

Every failure is a :class:`LoadError` (a :class:`~polyfuse.errors.PolyfuseError`) whose first line says
what went wrong at which ``file:line`` of the user's code; errors polyfuse itself raises while reading the
user's programs (a :class:`~polyfuse.errors.SourceError`) pass through unchanged.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from polyfuse.errors import PolyfuseError
from polyfuse.ir.program import Program

SEPARATOR = "::"
C_FRONTEND = "polyfuse.frontend.scop_c"
TARGET_HELP = "a .py file and the name of a @pf.program in it (or a .c file and a function holding a SCoP)"


class LoadError(PolyfuseError):
    """A ``FILE[::NAME]`` that names no program: missing file, import failure, unknown or ambiguous name."""


def split_target(target: str) -> tuple[Path, str | None]:
    """``"dir/k.py::gemm"`` -> ``(Path("dir/k.py"), "gemm")``; the name is None when absent."""
    path, sep, name = target.rpartition(SEPARATOR)
    if not sep:
        return Path(target), None
    if not name:
        raise LoadError(f"{target}: empty program name after {SEPARATOR!r}")
    return Path(path), name


def load(args: Namespace) -> Program:
    """The Program of a parsed command line: ``args.target`` with ``args.defines`` and ``args.assume``."""
    return load_program(args.target, dict(getattr(args, "defines", None) or ()), getattr(args, "assume", None),
                        tuple(getattr(args, "include_dirs", None) or ()))


def load_program(target: str, defines: Mapping[str, object] | None = None, assume: str | None = None,
                 include_dirs: tuple[str, ...] = ()) -> Program:
    """The Program that ``FILE[::NAME]`` names; ``defines``, ``assume`` and ``include_dirs`` apply to C files only."""
    path, name = split_target(target)
    if not path.is_file():
        what = "is not a file" if path.exists() else "no such file"
        raise LoadError(f"{path}: {what}")
    if path.suffix == ".c":
        return _load_c(path, name, defines, assume, include_dirs)
    if path.suffix != ".py":
        raise LoadError(f"{path}: expected a .py file (or a .c file with a SCoP)")
    if defines or assume or include_dirs:
        given = [o for o, v in (("-D", defines), ("--assume", assume), ("-I", include_dirs)) if v]
        verb = "applies" if len(given) == 1 else "apply"
        raise LoadError(
            f"{path}: {' and '.join(given)} {verb} to C files only (a .py program states its sizes and assumptions itself)"
        )
    return pick_program(import_file(path), path, name)


def import_file(path: Path) -> ModuleType:
    """Import the Python file at ``path`` as a fresh module; errors in it become a :class:`LoadError`.

    The file's folder is on ``sys.path`` while it runs, as it would be for ``python FILE``, so it can
    import its neighbours.
    """
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module_name = f"_polyfuse_user_{digest}_{_identifier(resolved.stem)}"
    # Loaded under the path as the user spelled it, so messages that name the file read as they typed it.
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise LoadError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    folder = str(resolved.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(module_name, None)
        where = f"{_display(e.filename, path)}:{e.lineno}" if e.lineno else _display(e.filename, path)
        raise LoadError(f"{where}: {type(e).__name__}: {e.msg}") from None
    except PolyfuseError:
        sys.modules.pop(module_name, None)
        raise
    except Exception as e:  # anything the user's module raises while it runs
        sys.modules.pop(module_name, None)
        raise LoadError(f"{_user_frame(e, resolved, path)}: {type(e).__name__}: {e}") from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def programs_in(module: ModuleType) -> dict[str, Program]:
    """Every module-level name bound to a Program, in definition order."""
    return {k: v for k, v in vars(module).items() if isinstance(v, Program) and not k.startswith("_")}


def pick_program(module: ModuleType, path: Path, name: str | None) -> Program:
    """The Program ``name`` of ``module``, or its only one when ``name`` is None."""
    found = programs_in(module)
    if name is not None:
        value = getattr(module, name, None)
        if isinstance(value, Program):
            return value
        listing = _listing(found)
        if value is None:
            raise LoadError(f"{path}: no program named {name!r}; {listing}")
        hint = " (missing @pf.program?)" if callable(value) else ""
        raise LoadError(f"{path}: {name!r} is a {type(value).__name__}, not a pf.Program{hint}; {listing}")
    own = _defined_here(found, path)
    if len(own) == 1:
        return next(iter(own.values()))
    if not own:
        raise LoadError(f"{path}: defines no @pf.program")
    raise LoadError(f"{path}: defines {len(own)} programs; choose one with {path}::NAME, NAME one of: {', '.join(own)}")


def _load_c(path: Path, name: str | None, defines: Mapping[str, object] | None, assume: str | None,
            include_dirs: tuple[str, ...] = ()) -> Program:
    # The C frontend is an optional part of an installation: its absence is a one-line user error.
    if importlib.util.find_spec(C_FRONTEND) is None:
        raise LoadError(f"{path}: C files need the C frontend ({C_FRONTEND}), which this polyfuse does not have yet")
    frontend = importlib.import_module(C_FRONTEND)
    return frontend.from_c(str(path), function=name, defines=dict(defines or {}) or None, assume=assume,
                           include_dirs=include_dirs)


def _defined_here(found: dict[str, Program], path: Path) -> dict[str, Program]:
    """The programs written in ``path`` itself, each under its first name; all of ``found`` when none is.

    A file that only imports programs (or builds them with ``pf.Graph``) still offers those.
    """
    own = {k: p for k, p in found.items() if _same_file(p.filename, path)} or found
    out: dict[str, Program] = {}
    for k, prog in own.items():
        if all(prog is not p for p in out.values()):
            out[k] = prog
    return out


def _same_file(filename: str, path: Path) -> bool:
    try:
        return os.path.samefile(filename, path)
    except OSError:
        return False


def _listing(found: dict[str, Program]) -> str:
    return f"programs in it: {', '.join(found)}" if found else "it defines no @pf.program"


def _user_frame(error: BaseException, resolved: Path, path: Path) -> str:
    """``file:line`` of the innermost traceback frame in the user's file (the file itself if none)."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if _same_file(frame.filename, resolved):
            line = frame.lineno
    return f"{path}:{line}" if line else str(path)


def _display(filename: str | None, path: Path) -> str:
    """The user's spelling of the path when ``filename`` is that file, else ``filename``."""
    if filename is None or _same_file(filename, path):
        return str(path)
    return filename


def _identifier(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)
