"""``exe.profile(...)``: time per kernel and per launch, next to each kernel's modelled bytes.

C target: the generated C is rebuilt with a timer around each kernel. The C printer emits every kernel as
a block of its own, ``/* kernel NAME: S0, S1 */`` then ``{`` ... ``}`` at one indentation
(``codegen/c.py``, ``_mark``); :func:`instrument_c` reads that layout and adds
``omp_get_wtime()`` calls around each block, accumulating seconds and launch counts in two global arrays
of the library, read back with ctypes after the call. A kernel inside a host loop (a stencil's time loop)
is counted once per launch. Where the printer opens one OpenMP parallel region around a host loop, every
thread runs the kernel block; thread 0 alone records it, and the barrier that ends the kernel's ``omp for``
makes its time the kernel's. The instrumented library goes through the same on-disk cache as the plain one.

CUDA target: each launch of the host plan is followed by a device synchronisation and timed on the host
(see :mod:`polyfuse.runtime.cuda`), so times include launch overhead; the plain runtime does not
synchronise between launches.

Modelled bytes come from ``sched.traffic()`` (the traffic model at the call's sizes); ``None`` where the
model cannot count a kernel.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from polyfuse.codegen.c import SINGLE_LABEL
from polyfuse.codegen.code import Code
from polyfuse.errors import CodegenError, PolyfuseError
from polyfuse.runtime import cpu

SECONDS = "polyfuse_profile_seconds"
LAUNCHES = "polyfuse_profile_launches"
_KERNEL = re.compile(r"^(?P<pad>[ \t]*)/\* kernel (?P<name>\w+)(?::[^\n]*)? \*/\n(?P=pad)\{\n", re.M)


@dataclass(frozen=True)
class KernelTime:
    """One kernel's share of a profiled call."""

    name: str
    statements: tuple[str, ...]
    launches: int
    seconds: float
    modelled_bytes: int | None

    @property
    def per_launch(self) -> float:
        return self.seconds / self.launches if self.launches else 0.0

    @property
    def gbytes_per_second(self) -> float | None:
        """Modelled bytes over measured time (an effective bandwidth)."""
        if self.modelled_bytes is None or self.seconds <= 0:
            return None
        return self.modelled_bytes / self.seconds / 1e9


@dataclass(frozen=True)
class Profile:
    """A profiled call: its total time and each kernel's, in kernel order. ``str()`` is a table."""

    program: str
    target: str
    sizes: dict[str, int]
    seconds: float
    kernels: tuple[KernelTime, ...]

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.sizes.items()) or "no sizes"
        lines = [f"profile of {self.program} at {at} (target {self.target}): {_ms(self.seconds)} in all",
                 f"  {'kernel':<10} {'statements':<16} {'launches':>8} {'total':>11} {'per launch':>11} "
                 f"{'modelled':>12} {'GB/s':>7}"]
        for k in self.kernels:
            modelled = f"{k.modelled_bytes} B" if k.modelled_bytes is not None else "?"
            rate = f"{k.gbytes_per_second:.2f}" if k.gbytes_per_second is not None else "?"
            lines.append(f"  {k.name:<10} {'+'.join(k.statements):<16} {k.launches:>8} {_ms(k.seconds):>11} "
                         f"{_ms(k.per_launch):>11} {modelled:>12} {rate:>7}")
        return "\n".join(lines)


def instrument_c(text: str, kernels: Sequence[str]) -> str:
    """``text`` (C from the C printer) with each kernel block timed into the globals :data:`SECONDS` and
    :data:`LAUNCHES`, indexed by the kernel's position in ``kernels``."""
    index = {name: k for k, name in enumerate(kernels)}
    lines = text.split("\n")
    out: list[str] = []
    k = 0
    found: set[str] = set()
    while k < len(lines):
        head = "\n".join(lines[k : k + 2]) + "\n"
        m = _KERNEL.match(head)
        if m is None or m.group("name") not in index:
            out.append(lines[k])
            k += 1
            continue
        pad, name = m.group("pad"), m.group("name")
        close = next((j for j in range(k + 2, len(lines)) if lines[j] == f"{pad}}}"), None)
        if close is None:
            raise CodegenError(f"profile: the block of kernel {name} has no closing brace at its indentation")
        slot = index[name]
        found.add(name)
        out += [lines[k], lines[k + 1], f"{pad}    const double polyfuse_t0 = omp_get_wtime();"]
        out += lines[k + 2 : close]
        counts = "1" if SINGLE_LABEL in lines[k] else "omp_get_thread_num() == 0"  # (omp single: whichever thread runs it)
        out += [f"{pad}    if ({counts}) {{  /* inside a host loop's parallel region: thread 0 counts */",
                f"{pad}        {SECONDS}[{slot}] += omp_get_wtime() - polyfuse_t0;",
                f"{pad}        {LAUNCHES}[{slot}] += 1;", f"{pad}    }}", lines[close]]
        k = close + 1
    missing = [n for n in kernels if n not in found]
    if missing:
        raise CodegenError(f"profile: no block found for kernel(s) {', '.join(missing)} in the generated C")
    n = max(len(kernels), 1)
    header = (f"#include <omp.h>\n#include <stdint.h>\ndouble {SECONDS}[{n}];\nint64_t {LAUNCHES}[{n}];\n")
    return header + "\n".join(out)


class ProfiledC:
    """The instrumented library of a C :class:`Code`: call it like :class:`~polyfuse.runtime.cpu.CFunction`,
    then :meth:`read` the per-kernel seconds and launch counts of that call."""

    def __init__(self, code: Code, kernels: Sequence[str]) -> None:
        self.kernels = tuple(kernels)
        self.function = cpu.CFunction(dataclasses.replace(code, text=instrument_c(code.text, self.kernels)))
        n = max(len(self.kernels), 1)
        self._seconds = (ctypes.c_double * n).in_dll(self.function.library, SECONDS)
        self._launches = (ctypes.c_int64 * n).in_dll(self.function.library, LAUNCHES)

    def __call__(self, *values: Any) -> None:
        for k in range(len(self._seconds)):
            self._seconds[k] = 0.0
            self._launches[k] = 0
        self.function(*values)

    def read(self) -> list[tuple[float, int]]:
        return [(float(self._seconds[k]), int(self._launches[k])) for k in range(len(self.kernels))]


def modelled_bytes(schedule: Any, names: Sequence[str]) -> dict[str, int | None]:
    """Each kernel's modelled global-memory bytes at the schedule's sizes (None where not modelled)."""
    try:
        report = schedule.traffic()
    except PolyfuseError:
        return dict.fromkeys(names)
    return {n: (report.per_kernel[n].total_bytes if n in report.per_kernel else None) for n in names}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"
