"""The implementations timed for a row: polyfuse and the peers a user would pick instead.

:func:`implementations` builds them for one :class:`benchmarks.suite.Case`: polyfuse (``pf.compile``,
target C), and for DNN rows numpy, PyTorch eager and ``torch.compile``; for PolyBench rows numpy and the
original C function built by ``gcc -O3 -march=native -fopenmp`` and called through ctypes. A peer whose
package is missing is skipped (and said so); one that fails to build, or whose result differs from the
float64 reference, is reported with the reason and not timed. Every implementation is run once and checked
before any timing; the check's call doubles as the warm-up (``torch.compile`` compiles there).
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import polyfuse as pf
from benchmarks.harness import Impl, build_shared
from benchmarks.suite import Case, polybench_kernel, torch_fn

PEERS = ("numpy", "torch", "torch.compile", "gcc")  # what --peers may name
GCC_FLAGS = ("-O3", "-march=native", "-fopenmp")


def available(peer: str) -> bool:
    """Whether ``peer``'s package (or compiler) is installed here."""
    if peer in ("torch", "torch.compile"):
        return importlib.util.find_spec("torch") is not None
    if peer == "gcc":
        import shutil  # noqa: PLC0415

        return shutil.which("gcc") is not None
    return True


def assert_close(got: np.ndarray, expected: np.ndarray, rtol: float, what: str) -> None:
    """Equal up to rounding. The absolute tolerance scales with the largest expected magnitude: a sum of many
    terms is off by a few ulp of its largest partial sums, so an element that cancels to near zero cannot be
    held to ``rtol`` of itself."""
    got = np.asarray(got)
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * max(1.0, scale), err_msg=what)


class Row:
    """What :func:`implementations` returns: the implementations that passed the check, the reasons of
    those that did not (or were skipped), the arrays and sizes, and the compulsory bytes of one call."""

    def __init__(self, case: Case, sizes: dict[str, int]) -> None:
        self.case = case
        self.sizes = sizes
        self.impls: list[Impl] = []
        self.skipped: dict[str, str] = {}
        self.nbytes = 0
        self.kernels: int | None = None


def _check(row: Row, name: str, build: Callable[[], tuple[Impl, Callable[[], Mapping[str, Any]]]],
           expected: Mapping[str, np.ndarray], rtol: float) -> None:
    """Build ``name``, run it once, compare its outputs; keep it when right, else record why not."""
    try:
        t0 = time.perf_counter()
        impl, outputs = build()
        impl.call()  # the first call: torch.compile compiles here
        impl.setup_s = time.perf_counter() - t0
        got = outputs()
        for out, want in expected.items():
            assert_close(_numpy(got[out]), want, rtol, f"{row.case.name}: {name}: {out}")
    except Exception as err:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        row.skipped[name] = f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]
        return
    row.impls.append(impl)


def _numpy(x: Any) -> np.ndarray:
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def implementations(case: Case, quick: bool, peers: Sequence[str], cache: Path, fusion: str = "smart") -> Row:
    """Every implementation of ``case`` at its (quick or full) sizes, checked against the reference."""
    if case.kernel is not None:
        return _polybench(case, quick, peers, cache, fusion)
    return _dnn(case, quick, peers, fusion)


def _want(row: Row, peers: Sequence[str], peer: str) -> bool:
    if peer not in peers:
        return False
    if not available(peer):
        row.skipped[peer] = "not installed"
        return False
    return True


# ----- DNN rows ---------------------------------------------------------------------------------------------
def _dnn(case: Case, quick: bool, peers: Sequence[str], fusion: str) -> Row:
    w = case.workload
    assert w is not None
    row = Row(case, case.sizes(quick))
    prog = w.program()
    values = w.inputs(prog, row.sizes)
    expected = w.expected(prog, values, row.sizes)
    ins = {k: v for k, v in values.items() if prog.arrays[k].role in ("input", "inout")}
    row.nbytes = w.compulsory_bytes(prog, row.sizes)
    rtol = max(w.rtol, 1e-3)

    def ours() -> tuple[Impl, Callable]:
        exe = pf.compile(prog, target="c", params=row.sizes, fusion=fusion)
        row.kernels = len(exe.schedule.kernels)
        outs = {k: np.zeros_like(v) for k, v in values.items() if k not in ins}
        return Impl("polyfuse", lambda: exe(**ins, **outs)), lambda: outs

    _check(row, "polyfuse", ours, expected, rtol)
    if _want(row, peers, "numpy"):
        result: dict[str, Any] = {}
        _check(row, "numpy", lambda: (Impl("numpy", lambda: result.update(case.numpy(**ins))), lambda: result), expected, rtol)
    for peer in ("torch", "torch.compile"):
        if case.torch is not None and _want(row, peers, peer):
            _check(row, peer, lambda peer=peer: _torch(peer, case.torch, ins), expected, rtol)
    return row


def _torch(peer: str, key: str, ins: Mapping[str, np.ndarray]) -> tuple[Impl, Callable]:
    import torch  # noqa: PLC0415 (optional peer)

    fn = torch_fn(key)
    tensors = {k: torch.from_numpy(v) for k, v in ins.items()}
    if peer == "torch.compile":
        fn = torch.compile(fn, dynamic=False)
    result: dict[str, Any] = {}

    def call() -> None:
        with torch.inference_mode():
            result.update(fn(**tensors))

    return Impl(peer, call), lambda: result


# ----- PolyBench rows --------------------------------------------------------------------------------------
def _polybench(case: Case, quick: bool, peers: Sequence[str], cache: Path, fusion: str) -> Row:
    from tests.kernels import inputs  # noqa: PLC0415 (a source checkout's test data)
    from tests.kernels.numpy_refs import REFS  # noqa: PLC0415

    kernel = polybench_kernel(case, quick)
    row = Row(case, dict(kernel.sizes))
    data = inputs(kernel)
    expected = {k: np.asarray(v) for k, v in REFS[kernel.name](**data).items()}
    rtol = 1e-6
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
    sizes = {p: kernel.sizes[p.upper()] for p in prog.params}
    arrays = {n: v for n, v in data.items() if isinstance(v, np.ndarray)}
    inouts = {n for n in arrays if n in prog.arrays and prog.arrays[n].role in ("inout", "output")}
    row.nbytes = sum(a.nbytes * (2 if n in inouts else 1) for n, a in arrays.items() if n in prog.arrays)

    def fresh() -> tuple[dict[str, Any], Callable[[], None]]:
        args = {n: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for n, v in data.items()}

        def reset() -> None:
            for n in inouts:
                np.copyto(args[n], arrays[n])

        return args, reset

    def ours() -> tuple[Impl, Callable]:
        exe = pf.compile(prog, target="c", params=sizes, fusion=fusion)
        row.kernels = len(exe.schedule.kernels)
        args, reset = fresh()
        call_args = {n: args[n] for n in prog.arguments}
        return Impl("polyfuse", lambda: exe(**call_args, **sizes), reset), lambda: args

    _check(row, "polyfuse", ours, expected, rtol)
    if _want(row, peers, "numpy"):
        result: dict[str, Any] = {}
        _check(row, "numpy", lambda: (Impl("numpy", lambda: result.update(REFS[kernel.name](**data))), lambda: result),
               expected, rtol)
    if _want(row, peers, "gcc"):
        def gcc() -> tuple[Impl, Callable]:
            args, reset = fresh()
            return Impl("gcc", c_function(kernel.path, kernel.function, kernel.defines, args, sizes, cache), reset), lambda: args

        _check(row, "gcc", gcc, expected, rtol)
    return row


def c_signature(source: str, function: str) -> list[tuple[str, str]]:
    """``(kind, name)`` of each parameter of ``function`` in a PolyBench-style source: ``int`` sizes,
    ``DATA_TYPE`` scalars, and ``POLYBENCH_nD(name, ...)`` arrays."""
    m = re.search(rf"\b{re.escape(function)}\s*\((.*?)\)\s*\{{", source, re.S)
    if m is None:
        raise ValueError(f"no definition of {function} found")
    params, depth, cur = [], 0, ""
    for ch in m.group(1):
        if ch == "," and depth == 0:
            params.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    params.append(cur.strip())
    out = []
    for p in params:
        arr = re.search(r"POLYBENCH_\dD\(\s*(\w+)", p)
        if arr:
            out.append(("array", arr.group(1)))
        elif p.startswith("int "):
            out.append(("int", p.split()[-1]))
        else:
            out.append(("scalar", p.split()[-1]))
    return out


def c_function(path: Path, function: str, defines: Mapping[str, str], args: Mapping[str, Any], sizes: Mapping[str, int],
               cache: Path, compiler: str = "gcc", flags: Sequence[str] = GCC_FLAGS, source: str | None = None,
               tag: str = "pb") -> Callable[[], None]:
    """The original C ``function`` built by gcc with ``GCC_FLAGS`` and ``defines``, bound to ``args`` (arrays
    by pointer, scalars as the source's DATA_TYPE) and ``sizes``: a no-argument call. ``compiler``, ``flags``
    and ``source`` (instead of the file's text, e.g. a polyhedral compiler's output) build it otherwise;
    ``tag`` prefixes the library's name in ``cache``."""
    source = path.read_text() if source is None else source
    flags = (*flags, *(f"-D{k}={v}" for k, v in sorted(defines.items())))
    lib = ctypes.CDLL(str(build_shared(source, f"{tag}_{function}", cache, flags, compiler)))
    real = ctypes.c_float if re.search(r"#define\s+DATA_TYPE\s+float\b", source) else ctypes.c_double
    values: list[Any] = []
    types: list[Any] = []
    for kind, name in c_signature(source, function):
        if kind == "int":
            types.append(ctypes.c_int)
            values.append(int(sizes[name]))
        elif kind == "array":
            arr = args[name]
            if not (isinstance(arr, np.ndarray) and arr.flags.c_contiguous):
                raise ValueError(f"{function}: argument {name} is not a C-contiguous array")
            types.append(ctypes.c_void_p)
            values.append(arr.ctypes.data)
        else:
            types.append(real)
            values.append(float(args[name]))
    fn = getattr(lib, function)
    fn.argtypes, fn.restype = types, None
    return lambda: fn(*values)
