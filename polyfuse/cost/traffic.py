"""The memory-traffic model: bytes each kernel of a schedule moves to and from global memory.

For a schedule at concrete sizes, the traffic of array ``X`` in kernel ``K`` is

    bytes(K, X) = itemsize(X) * sum over tiles t of K of ( |R_X(t)| + |W_X(t)| )

with the tiles, the read footprint ``R_X(t)`` (elements whose incoming value some read in ``t`` needs:
uncovered reads) and the write footprint ``W_X(t)`` defined in ``footprint.py``. Contracted arrays (no
global buffer) move 0 bytes. This models the *promoted* schedule: what a tile reuses is staged once per
tile (shared memory or registers on CUDA, the cache on C), so only the first touch of an element in a tile
goes to global memory, and every written element is written back once per tile.

``compulsory_bytes`` is the floor no schedule can beat: every element of an input (or inout) array whose
incoming value is read, read once, plus every element of an output (or inout) array written, written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from polyfuse.cost.footprint import compulsory_counts, fixed_params, kernel_regions, missing_params, region_counts
from polyfuse.errors import PolyfuseError
from polyfuse.ir.program import Program
from polyfuse.schedule.deps import dependences_of


@dataclass(frozen=True)
class ArrayTraffic:
    """Bytes of one array read from and written to global memory."""

    array: str
    read_bytes: int = 0
    write_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    def __add__(self, other: ArrayTraffic) -> ArrayTraffic:
        return ArrayTraffic(self.array, self.read_bytes + other.read_bytes, self.write_bytes + other.write_bytes)


@dataclass(frozen=True)
class KernelTraffic:
    """Bytes one kernel moves, per array, and the number of tiles they were counted over."""

    name: str
    statements: tuple[str, ...]
    tiles: int
    tile_sizes: tuple[int, ...]
    per_array: Mapping[str, ArrayTraffic] = field(default_factory=dict)

    @property
    def read_bytes(self) -> int:
        return sum(a.read_bytes for a in self.per_array.values())

    @property
    def write_bytes(self) -> int:
        return sum(a.write_bytes for a in self.per_array.values())

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclass(frozen=True)
class TrafficReport:
    """The modelled traffic of a schedule at ``params``: ``per_kernel`` (name -> :class:`KernelTraffic`),
    ``per_array`` (name -> :class:`ArrayTraffic` summed over kernels), their total, and the compulsory
    traffic (``compulsory_per_array`` per array)."""

    program: str
    params: Mapping[str, int]
    total_bytes: int
    compulsory_bytes: int
    per_kernel: Mapping[str, KernelTraffic]
    per_array: Mapping[str, ArrayTraffic]
    compulsory_per_array: Mapping[str, ArrayTraffic]
    contracted: frozenset[str] = frozenset()

    @property
    def ratio(self) -> float:
        """Modelled over compulsory traffic (1.0 is the floor)."""
        return self.total_bytes / self.compulsory_bytes if self.compulsory_bytes else float("inf")


def itemsize(prog: Program, array: str) -> int:
    return int(np.dtype(prog.arrays[array].dtype.numpy).itemsize)


def array_bytes(prog: Program, array: str, sizes: Mapping[str, int], from_dim: int = 0) -> int | None:
    """Bytes of ``array`` at ``sizes``, or of one slice of it along its first ``from_dim`` dimensions
    (``from_dim=1``: a row of a matrix); ``None`` when a size is missing."""
    try:
        shape = prog.arrays[array].concrete_shape(sizes)
    except KeyError:
        return None
    return int(np.prod(shape[from_dim:], dtype=np.int64)) * itemsize(prog, array)


def program_traffic(
    prog: Program, tree, kernels, contracted: frozenset[str], params: Mapping[str, int]
) -> TrafficReport:
    """The report for a schedule tree and its kernels (what :func:`traffic` computes for a Schedule)."""
    missing = missing_params(prog, params)
    if missing:
        raise PolyfuseError(
            f"the traffic model needs concrete sizes; give params for {', '.join(missing)} "
            f"(pf.schedule(..., params={{...}}) or sched.traffic(params={{...}}))"
        )
    fixed = fixed_params(prog, params)
    if fixed.is_empty():
        raise PolyfuseError(f"the sizes {dict(params)} violate the assumptions of {prog.name}: {prog.context}")
    deps = dependences_of(prog)
    per_kernel: dict[str, KernelTraffic] = {}
    per_array: dict[str, ArrayTraffic] = {}
    for region in kernel_regions(tree, kernels):
        counts, tiles = region_counts(prog, region.domain, region.tile_map, fixed, deps, frozenset(contracted),
                                     tile_dims=region.tile_dims)
        arrays = {}
        for name, c in counts.items():
            size = itemsize(prog, name)
            at = ArrayTraffic(name, c.read * size, c.write * size)
            arrays[name] = at
            per_array[name] = per_array[name] + at if name in per_array else at
        k = region.kernel
        per_kernel[k.name] = KernelTraffic(k.name, k.statements, tiles, tuple(getattr(k, "tile_sizes", ())),
                                           MappingProxyType(arrays))
    compulsory = {
        name: ArrayTraffic(name, c.read * itemsize(prog, name), c.write * itemsize(prog, name))
        for name, c in compulsory_counts(prog, fixed, deps).items()
    }
    return TrafficReport(
        program=prog.name,
        params=MappingProxyType(dict(params)),
        total_bytes=sum(a.bytes for a in per_array.values()),
        compulsory_bytes=sum(a.bytes for a in compulsory.values()),
        per_kernel=MappingProxyType(per_kernel),
        per_array=MappingProxyType(per_array),
        compulsory_per_array=MappingProxyType(compulsory),
        contracted=frozenset(contracted),
    )


def traffic(sched, params: Mapping[str, int] | None = None) -> TrafficReport:
    """The :class:`TrafficReport` of ``sched`` (a :class:`~polyfuse.schedule.model.Schedule`) at its own
    sizes, overridden or completed by ``params``."""
    sizes = {**dict(sched.params), **dict(params or {})}
    on_chip = sched.contracted | {rb.buffer for rb in sched.row_buffers}  # (a row buffer stays in L1, as a scalar does)
    return program_traffic(sched.program, sched.tree, sched.kernels, on_chip, sizes)


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n} B ({n / scale:.2f} {unit})"
    return f"{n} B"


def format_traffic(report: TrafficReport) -> str:
    """The report as text: totals, then each kernel with its arrays, then the compulsory traffic."""
    sizes = ", ".join(f"{k}={v}" for k, v in report.params.items())
    lines = [
        f"traffic of {report.program} at {sizes or 'no sizes'}: {_bytes(report.total_bytes)} modelled, "
        f"{_bytes(report.compulsory_bytes)} compulsory (x{report.ratio:.3f})"
    ]
    for k in report.per_kernel.values():
        tile = "x".join(map(str, k.tile_sizes)) if k.tile_sizes else "untiled"
        lines.append(f"  {k.name} ({', '.join(k.statements)}; {k.tiles} tile(s) of {tile}): "
                     f"read {_bytes(k.read_bytes)}, write {_bytes(k.write_bytes)}")
        for a in k.per_array.values():
            lines.append(f"    {a.array}: read {a.read_bytes} B, write {a.write_bytes} B")
    if report.contracted:
        lines.append(f"  contracted (0 B): {', '.join(sorted(report.contracted))}")
    comp = ", ".join(f"{a.array} r{a.read_bytes}/w{a.write_bytes}" for a in report.compulsory_per_array.values())
    lines.append(f"  compulsory: {comp or 'none'}")
    return "\n".join(lines)
