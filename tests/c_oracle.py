"""gcc as the oracle of the C frontend: the original C function, compiled by gcc and called through ctypes.

A C kernel means what gcc makes of it, so the C frontend's tests compare three runs of one function on the
same inputs: :class:`GccKernel` (the source as written, compiled with ``gcc -O1``, no polyfuse code
involved in the computation), ``pf.reference(pf.from_c(...))`` and ``pf.compile(..., target="c")``
(:func:`check_against_gcc`). Integers must agree exactly, floats within a tolerance (gcc and polyfuse's C
may contract ``a * b + c`` differently).

The source is parsed (with polyfuse's preprocessor front end, which only supplies the function's
signature) to learn the parameters: ``int``/``long`` ones are sizes, taken from the shapes of the arrays
whose extents name them or given by keyword; floating-point ones are scalars; arrays are passed as
pointers to C-contiguous copies. A small wrapper with external linkage is appended to the source so that
``static`` kernels (PolyBench's ``static void kernel_*``) can be called. ``#include <polybench.h>``
finds the test header in ``tests/c_include``, written after the distribution's conventions.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pycparser import c_ast, c_generator

import polyfuse as pf
from polyfuse.frontend.c_source import _without_defines, functions_in, read_c

INCLUDE = Path(__file__).resolve().parent / "c_include"
GCC_FLAGS = ("-std=gnu99", "-O1", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math", "-w")
ENTRY = "pf_oracle_entry"
_BUILD = Path(tempfile.mkdtemp(prefix="polyfuse-gcc-oracle-"))

# The C types a test kernel's parameters use, as numpy types (gcc on x86-64: char signed, long 64-bit).
_NUMPY = {
    ("double",): np.float64, ("float",): np.float32, ("int",): np.int32, ("signed", "int"): np.int32,
    ("char",): np.int8, ("signed", "char"): np.int8, ("unsigned", "char"): np.uint8,
    ("short",): np.int16, ("short", "int"): np.int16, ("long",): np.int64, ("long", "int"): np.int64,
    ("long", "long"): np.int64, ("unsigned", "int"): np.uint32, ("unsigned",): np.uint32,
    ("unsigned", "short"): np.uint16, ("unsigned", "long"): np.uint64, ("unsigned", "long", "int"): np.uint64,
    ("unsigned", "long", "long"): np.uint64,
}
_CTYPE = {np.float64: ctypes.c_double, np.float32: ctypes.c_float, np.int32: ctypes.c_int32, np.int8: ctypes.c_int8,
          np.uint8: ctypes.c_uint8, np.int16: ctypes.c_int16, np.int64: ctypes.c_int64, np.uint32: ctypes.c_uint32,
          np.uint16: ctypes.c_uint16, np.uint64: ctypes.c_uint64}


class Param:
    """One parameter of the C function: ``kind`` is ``size`` (an integer), ``scalar`` or ``array``."""

    def __init__(self, decl: c_ast.Decl, typedefs: Mapping[str, tuple[str, ...]]) -> None:
        self.name = decl.name
        self.dims: list[c_ast.Node | None] = []
        t = decl.type
        while isinstance(t, (c_ast.ArrayDecl, c_ast.PtrDecl)):
            self.dims.append(t.dim if isinstance(t, c_ast.ArrayDecl) else None)
            t = t.type
        names = tuple(t.type.names)
        while names in {(k,) for k in typedefs}:
            names = typedefs[names[0]]
        self.numpy = _NUMPY[names]
        if self.dims:
            self.kind = "array"
        else:
            self.kind = "scalar" if np.issubdtype(self.numpy, np.floating) else "size"


class GccKernel:
    """``function`` of a C file (a path) or C text, compiled by gcc: call it with the arguments by C name;
    it returns every array argument after the call (copies; the arrays given are not modified)."""

    def __init__(self, source: str | Path, function: str, defines: Mapping[str, object] | None = None) -> None:
        is_path = isinstance(source, Path) or "\n" not in str(source)
        text = Path(source).read_text() if is_path else str(source)
        folder = Path(source).resolve().parent if is_path else Path.cwd()  # for the kernel's own headers
        self.defines = {k: str(v) for k, v in (defines or {}).items()}
        unit = read_c(str(Path(source).resolve()) if is_path else text, self.defines)
        typedefs = {e.name: tuple(e.type.type.names) for e in unit.ast.ext
                    if isinstance(e, c_ast.Typedef) and isinstance(getattr(e.type, "type", None), c_ast.IdentifierType)}
        fdef = next(f for f in functions_in(unit) if f.decl.name == function)
        args = fdef.decl.type.args.params if fdef.decl.type.args is not None else []
        self.params = [Param(p, typedefs) for p in args if isinstance(p, c_ast.Decl)]
        wrapper = self._wrapper(fdef)
        body = _without_defines(text, set(self.defines)) + "\n" + wrapper
        key = hashlib.sha256((body + repr(sorted(self.defines.items())) + str(folder)).encode()).hexdigest()[:16]
        src, lib = _BUILD / f"k{key}.c", _BUILD / f"k{key}.so"
        if not lib.exists():
            src.write_text(body)
            cmd = ["gcc", *GCC_FLAGS, "-I", str(INCLUDE), "-I", str(folder), *(f"-D{k}={v}" for k, v in self.defines.items()), str(src), "-o", str(lib), "-lm"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"gcc failed on {function}:\n{done.stderr}")
        self.function = getattr(ctypes.CDLL(str(lib)), ENTRY)
        self.function.restype = None
        self.function.argtypes = [ctypes.c_void_p if p.kind == "array" else _CTYPE[p.numpy] for p in self.params]

    def _wrapper(self, fdef: c_ast.FuncDef) -> str:
        """``void pf_oracle_entry(<the same parameters>) { function(<their names>); }``."""
        gen = c_generator.CGenerator()
        params = ", ".join(gen.visit(p) for p in fdef.decl.type.args.params) if fdef.decl.type.args else "void"
        names = ", ".join(p.name for p in self.params)
        return f"void {ENTRY}({params}) {{ {fdef.decl.name}({names}); }}\n"

    def sizes(self, arrays: Mapping[str, np.ndarray], given: Mapping[str, int]) -> dict[str, int]:
        """Each size parameter: given by keyword, else from the extent of an array dimension ``n`` or ``n + c``."""
        out = {k: int(v) for k, v in given.items()}
        for p in self.params:
            if p.kind != "array" or p.name not in arrays:
                continue
            for k, d in enumerate(p.dims):
                extent = int(np.shape(arrays[p.name])[k])
                if isinstance(d, c_ast.ID) and d.name not in out:
                    out[d.name] = extent
                elif (isinstance(d, c_ast.BinaryOp) and d.op in "+-" and isinstance(d.left, c_ast.ID) and isinstance(d.right, c_ast.Constant)
                      and d.left.name not in out):  # n + 4
                    out[d.left.name] = extent - int(d.right.value) if d.op == "+" else extent + int(d.right.value)
        return out

    def __call__(self, **args: Any) -> dict[str, np.ndarray]:
        arrays = {p.name: np.array(args[p.name], dtype=p.numpy, order="C", copy=True) for p in self.params if p.kind == "array"}
        sizes = self.sizes(arrays, {p.name: args[p.name] for p in self.params if p.kind == "size" and p.name in args})
        call = []
        for p in self.params:
            if p.kind == "array":
                call.append(arrays[p.name].ctypes.data)
            elif p.kind == "size":
                call.append(sizes[p.name])
            else:
                call.append(args[p.name])
        self.function(*call)
        return arrays


def assert_same(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], what: str, rtol: float = 1e-9, atol: float = 1e-9) -> None:
    """Every array of ``want`` equal in ``got``: integers exactly, floats within the tolerance."""
    for name, w in want.items():
        g = got[name]
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: {name}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: {name}")


def check_against_gcc(source: str | Path, function: str, args: Mapping[str, Any], defines: Mapping[str, object] | None = None,
                      extra: Mapping[str, Any] | None = None, compile_c: bool = True, rtol: float = 1e-9, atol: float = 1e-9,
                      program: pf.Program | None = None, threads: int | None = None, **from_c: Any) -> dict[str, np.ndarray]:
    """Run ``function`` through gcc, ``pf.reference`` and (``compile_c``) ``pf.compile(target="c",
    threads=threads)`` on copies of ``args`` (by C name; sizes no array determines by keyword) and assert
    they agree. ``extra`` holds arguments only the polyfuse program has (a scalar it captured). Returns
    gcc's arrays."""
    gcc = GccKernel(source, function, defines)
    want = gcc(**args)
    prog = program if program is not None else pf.from_c(str(source), function=function, defines=defines, **from_c)
    sizes = gcc.sizes(want, {})

    def fresh() -> dict[str, Any]:
        out = {k: (np.array(v, dtype=want[k].dtype if k in want else None, copy=True) if isinstance(v, np.ndarray) else v)
               for k, v in {**args, **(extra or {})}.items() if k in prog.arguments or k in prog.params}
        out.update({p: sizes[p] for p in prog.params if p in sizes and p not in out})
        return out

    ref_args = fresh()
    pf.reference(prog)(**ref_args)
    assert_same(ref_args, {k: v for k, v in want.items() if k in ref_args}, f"{function}: reference vs gcc", rtol, atol)
    if compile_c:
        c_args = fresh()
        pf.compile(prog, target="c", threads=threads)(**c_args)
        assert_same(c_args, {k: v for k, v in want.items() if k in c_args}, f"{function}: compiled C vs gcc", rtol, atol)
    return want
