"""The C back end's runtime: compile C99 + OpenMP with the system compiler, load it with ctypes, call it.

All use of the C compiler and of ctypes is here. Shared libraries go through the compile cache
(:mod:`polyfuse.runtime.cache`), so a program compiled once is loaded from disk by later processes.
The compiler is ``$CC`` when set, else ``cc``; the flags are ``-O3 -march=native -falign-loops=32 -fopenmp
-shared -fPIC -std=c99 -fno-math-errno -fno-trapping-math -pipe``, minus ``-march=native`` or ``-falign-loops=32``
where the compiler rejects it (probed once per process), plus the words of ``$POLYFUSE_CFLAGS`` when set
(e.g. ``-g``; the compile cache keys on them).

``-falign-loops=32``: every loop starts on a 32-byte boundary (GCC's default for ``-march=native`` on the
Zen 3/4 development machines is 16). Without it the speed of a loop nest depended on where the code
happened to land: PolyBench nussinov MEDIUM on one thread ran in 12.0 ms or 8.8 ms with the same machine
code for its kernel, shifted by 16 bytes because the library around it (the team wrapper) had grown;
with it both layouts run in 8.8 ms (the kernel's hot loops no longer straddle a 32-byte fetch block).

The last two let GCC vectorise loops that call the math functions of :mod:`polyfuse.codegen.c_math` or
``sqrt``, and loops with selects: ``-fno-math-errno`` because nothing reads ``errno``, and
``-fno-trapping-math`` because nothing reads the floating-point exception flags (with trapping math GCC
will not if-convert a float comparison, so every select stays a branch). Neither changes a computed value:
NaN, infinities and signed zeros keep their IEEE semantics, unlike ``-ffast-math``. ``-pipe`` passes the
assembly to the assembler through a pipe rather than a file: about 2 % less compile time (the median over
the 30 PolyBench kernels' libraries, 2-core EPYC), the same library.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from polyfuse.codegen.code import Argument, Code
from polyfuse.errors import CodegenError, RuntimeUnavailable
from polyfuse.runtime import placement, team
from polyfuse.runtime.cache import cache_dir, cache_key, cached_artifact

BASE_FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=c99", "-fno-math-errno", "-fno-trapping-math", "-pipe")
NATIVE_FLAG = "-march=native"
LOOP_ALIGN_FLAG = "-falign-loops=32"
OPTIONAL_FLAGS = (NATIVE_FLAG, LOOP_ALIGN_FLAG)  # used where the compiler accepts them
LINK_FLAGS = ("-lm",)
LIBRARY_SUFFIX = ".so"

_CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32, "i8": ctypes.c_int8, "i16": ctypes.c_int16,
           "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64}


def compiler() -> str:
    """Absolute path of the C compiler; :class:`RuntimeUnavailable` when there is none."""
    name = os.environ.get("CC", "cc")
    path = shutil.which(name)
    if path is None:
        raise RuntimeUnavailable(f"no C compiler found (looked for {name!r}; set CC to choose one)")
    return path


def available() -> bool:
    """Whether a C compiler is present."""
    try:
        compiler()
    except RuntimeUnavailable:
        return False
    return True


@lru_cache(maxsize=None)
def compiler_identity(cc: str) -> str:
    """The compiler's path and version banner: part of every cache key."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError as e:
        raise RuntimeUnavailable(f"cannot run the C compiler {cc}: {e}") from None
    return f"{cc}\n{out.splitlines()[0] if out else ''}"


EXTRA_FLAGS_VARIABLE = "POLYFUSE_CFLAGS"


def compiler_flags(cc: str) -> tuple[str, ...]:
    """The flags used with ``cc``: the base set, with the optional flags the compiler accepts, then
    the words of ``$POLYFUSE_CFLAGS`` (read at each compilation; part of the compile-cache key)."""
    return (*_probed_flags(cc), *shlex.split(os.environ.get(EXTRA_FLAGS_VARIABLE, "")))


@lru_cache(maxsize=None)
def _probed_flags(cc: str) -> tuple[str, ...]:
    """The base flags with each optional flag the compiler accepts (both probed at once first: one run of
    the compiler where it takes both, as GCC and clang do)."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.c"
        src.write_text("int polyfuse_probe(void) { return 0; }\n")

        def accepts(*flags: str) -> bool:
            cmd = [cc, *flags, *BASE_FLAGS, str(src), "-o", str(Path(d) / "probe.so")]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=120).returncode == 0

        taken = OPTIONAL_FLAGS if accepts(*OPTIONAL_FLAGS) else tuple(f for f in OPTIONAL_FLAGS if accepts(f))
    return (BASE_FLAGS[0], *taken, *BASE_FLAGS[1:])


def build_shared_library(source: str, output: Path, cc: str, flags: Sequence[str]) -> None:
    """Run the compiler once: ``source`` to the shared library ``output``. Raises CodegenError on failure."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "polyfuse_kernel.c"
        src.write_text(source)
        cmd = [cc, *flags, str(src), "-o", str(output), *LINK_FLAGS]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise CodegenError(f"the C compiler failed ({' '.join(cmd[:1] + list(flags))}):\n{proc.stderr.strip()}")


def library_key(source: str) -> str:
    """The compile-cache key of ``source``: its text, the compiler's identity and the flags."""
    cc = compiler()
    return cache_key(source, compiler_identity(cc), " ".join(compiler_flags(cc) + LINK_FLAGS))


def library_path(source: str) -> Path:
    """Where the compile cache keeps the library built from ``source`` (it may not exist yet)."""
    return cache_dir() / f"{library_key(source)}{LIBRARY_SUFFIX}"


def load_library(source: str) -> ctypes.CDLL:
    """The shared library compiled from ``source``, from the compile cache when it is there."""
    cc = compiler()
    flags = compiler_flags(cc)
    return cached_artifact(
        library_key(source),
        LIBRARY_SUFFIX,
        build=lambda out: build_shared_library(source, out, cc, flags),
        load=lambda path: ctypes.CDLL(str(path)),
    )


class CFunction:
    """The entry point of a compiled :class:`Code`, callable with its arguments in signature order.

    Sizes are passed as ``int64``, scalars as their C type, and arrays as the address of their first element
    (the caller guarantees C-contiguous buffers of the right dtype; :func:`polyfuse.runtime.args.bind`
    checks user arrays).
    """

    def __init__(self, code: Code) -> None:
        if code.target != "c":
            raise CodegenError(f"the C runtime cannot run code for target {code.target!r}")
        self.code = code
        self.library = load_library(code.text + team_wrapper(code))
        self.function = getattr(self.library, code.entry)
        self.function.restype = None
        self.function.argtypes = [_ctype(a) for a in code.signature]
        self.in_team = getattr(self.library, f"{code.entry}{team.TEAM_SUFFIX}")
        self.in_team.restype = None
        self.in_team.argtypes = [ctypes.c_int, *self.function.argtypes]
        self._convert: list[Callable[[Any], Any]] = [_converter(a) for a in code.signature]
        self.team = placement.default_team()  # OpenMP's default team size for this process
        # Code with no parallel region never starts a team, so its calls skip OpenMP's runtime altogether
        # (the thread count read and set around a call, the workers' placement): on a call after an idle
        # pause those few foreign calls run from cold caches (PolyBench jacobi-1d MEDIUM, one thread).
        self.parallel = uses_openmp(code.text)
        team.link(self.library, code.entry, placement.openmp())

    def __call__(self, *values: Any) -> None:
        self.call_in_team(values, 0)

    def bound(self, values: Sequence[Any], threads: int | None = None) -> Callable[[], None]:
        """A call of this function with ``values`` converted once: calling it costs one ctypes call, the
        Python work of :meth:`__call__` done ahead (``threads`` as in :meth:`call_in_team`; None: OpenMP's
        count). Code with a parallel region is called through the team wrapper either way, for its
        cold-call policy."""
        self._check_count(values)
        converted = [t(conv(v)) for t, conv, v in zip(self.function.argtypes, self._convert, values)]
        if not self.parallel:
            return functools.partial(self.function, *converted)
        placement.place_workers(threads or self.team)
        return functools.partial(self.in_team, ctypes.c_int(threads or 0), *converted)

    def _check_count(self, values: Sequence[Any]) -> None:
        if len(values) != len(self._convert):
            raise TypeError(f"{self.code.entry} takes {len(self._convert)} arguments, got {len(values)}")

    def call_in_team(self, values: Sequence[Any], threads: int) -> None:
        """Call with ``values`` and OpenMP's thread count set to ``threads`` for this call only (the count is
        an OpenMP per-thread setting of the calling thread; it is put back afterwards; 0: OpenMP's count).
        Code with a parallel region goes through the team wrapper, for its cold-call policy."""
        self._check_count(values)
        if not self.parallel:
            self.function(*(conv(v) for conv, v in zip(self._convert, values)))
            return
        placement.place_workers(threads or self.team)
        self.in_team(threads, *(conv(v) for conv, v in zip(self._convert, values)))


def uses_openmp(text: str) -> bool:
    """Whether C ``text`` starts an OpenMP team (a parallel region) or calls OpenMP's runtime (``omp_*``);
    ``omp simd`` alone needs neither."""
    return "#pragma omp parallel" in text or re.search(r"\bomp_\w+\s*\(", text) is not None


def team_wrapper(code: Code) -> str:
    """C for ``<entry>_in_team(threads, ...)`` and its cold-call policy (:mod:`polyfuse.runtime.team`)."""
    return team.wrapper_source(code, [(_c_type(a), a.name) for a in code.signature])


def _c_type(arg: Argument) -> str:
    if arg.kind == "size":
        return "int64_t"
    if arg.kind == "array":
        return "void *"
    assert arg.dtype is not None
    return arg.dtype.c_name


def _ctype(arg: Argument) -> Any:
    if arg.kind == "size":
        return ctypes.c_int64
    if arg.kind == "array":
        return ctypes.c_void_p
    assert arg.dtype is not None
    return _CTYPES[arg.dtype.name]


def _converter(arg: Argument) -> Callable[[Any], Any]:
    if arg.kind == "size":
        return int
    if arg.kind == "array":
        return _pointer
    assert arg.dtype is not None
    return float if arg.dtype.is_float else int


def _pointer(a: np.ndarray | int) -> int:
    """The address of ``a``'s first element; an int is already an address (checked by the caller)."""
    if type(a) is int:
        return a
    if not a.flags.c_contiguous:
        raise ValueError("arrays passed to compiled code must be C-contiguous")
    return a.ctypes.data
