"""What the cost model needs to know about the machine it runs on: the data cache sizes, and the number
and width of the vector registers.

Read from ``os.sysconf`` (glibc reports the CPU's caches there), else from Linux's sysfs, else typical
values of a current x86 core. The C micro-tile pass (``schedule/tiling/microtile.py``) sizes its cache tiles
from them, so a generated kernel fits the machine that compiled it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

FALLBACK = (32 * 1024, 512 * 1024)
"""L1d and L2 bytes when neither sysconf nor sysfs tells."""
LAST_LEVEL_FALLBACK = 32 * 1024 * 1024
"""Last-level cache bytes when neither sysconf nor sysfs tells (a current server's L3 slice)."""


@functools.cache
def cache_sizes() -> tuple[int, int]:
    """(L1 data cache bytes, L2 cache bytes) of one core."""
    l1 = _sysconf("SC_LEVEL1_DCACHE_SIZE") or _sysfs(1, "Data") or FALLBACK[0]
    l2 = _sysconf("SC_LEVEL2_CACHE_SIZE") or _sysfs(2, "Unified") or FALLBACK[1]
    return l1, l2


@functools.cache
def last_level_cache() -> int:
    """Bytes of the largest cache the cores share (L3 on current x86; L2 where there is no L3). The C
    printer streams an output around the caches only when a kernel's data would not fit in it anyway
    (``codegen/c_stream.py``)."""
    return (_sysconf("SC_LEVEL3_CACHE_SIZE") or _sysfs(3, "Unified") or _sysconf("SC_LEVEL2_CACHE_SIZE")
            or _sysfs(2, "Unified") or LAST_LEVEL_FALLBACK)


STREAMING_L2_MULTIPLE = 16
"""The streaming threshold is at most this many times one core's L2, or :data:`LAST_LEVEL_FALLBACK` where
that is more (see :func:`streaming_threshold`)."""


@functools.cache
def streaming_threshold() -> int:
    """Bytes of data from which a kernel stores its outputs around the caches (``codegen/c_stream.py``):
    the last-level cache, but at most :data:`STREAMING_L2_MULTIPLE` times one core's L2, or 32 MiB
    (:data:`LAST_LEVEL_FALLBACK`) where that is more. A virtual machine sees its host's whole L3 (300 MiB
    on the 2-CPU Emerald Rapids guests) and shares it with the host's other tenants; there, streamed
    exp(x + 1) and layernorm ran at 0.64-0.89 and 0.80 of their time with 32 and 128 MiB of data, but at
    1.13 (layernorm) with 8 MiB, which the L3 still held. The cap is 32 MiB there; on the Zen 4 machines
    (32 MiB of L3, 1 MiB of L2), where streaming was measured from 32 MiB, the threshold stays 32 MiB."""
    return min(last_level_cache(), max(STREAMING_L2_MULTIPLE * cache_sizes()[1], LAST_LEVEL_FALLBACK))


def streaming_stores() -> bool:
    """Whether the CPU has non-temporal vector stores the C prelude can use (``sse2``: every x86-64)."""
    return "sse2" in _cpu_flags()


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The fields of ``/proc/cpuinfo``'s first processor, by name (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # (the first processor's block ends)
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags."""
    return frozenset(_cpuinfo().get("flags", "").split())


def vector_registers() -> int:
    """How many SIMD registers the C compiler may use with ``-march=native`` here: 32 with AVX-512, else 16
    (AVX2/SSE on x86-64, and a conservative count elsewhere). Read from ``/proc/cpuinfo``'s flags."""
    return 32 if "avx512f" in _cpu_flags() else 16


def full_width_vector_units() -> bool:
    """Whether the cores run 512-bit vector instructions at full width (two 512-bit multiply-add pipes)
    rather than as two 256-bit halves: Intel's AVX-512 cores, and AMD's server Zen 5 (EPYC 9005: family 26,
    models below 0x20). Zen 4 (family 25) splits them; so do some Zen 5 parts, and family 26's other models
    keep the narrower tile until measured. The C micro-kernel takes a wider register tile where this holds
    (``tiling/tile_shapes.py``: ``register_rows``, ``lane_vectors``, ``reduction_tile``). Measured on a
    2-core EPYC (family 26, model 2), f32, 2 threads, paired rounds against the 8 x 2 tile: matmul 1024³
    0.93, 2048³ 0.89, the MLP 0.89 of the time; conv2d 3x3 0.99 and attention 1.02 (unchanged)."""
    if "avx512f" not in _cpu_flags():
        return False
    vendor, family, model = _cpu_identity()
    return vendor == "GenuineIntel" or (vendor == "AuthenticAMD" and family == 26 and model < 0x20)


def _cpu_identity() -> tuple[str, int, int]:
    """``vendor_id``, ``cpu family`` and ``model`` (empty and -1 where unknown)."""
    fields = _cpuinfo()

    def number(key: str) -> int:
        try:
            return int(fields.get(key, ""))
        except ValueError:
            return -1

    return fields.get("vendor_id", ""), number("cpu family"), number("model")


def vector_bytes() -> int:
    """Bytes of the widest SIMD register ``-march=native`` gives the C compiler here: the ``PF_VBYTES`` that
    the C prelude (``codegen/c_micro.py``) picks from the same features (64 with AVX-512, 32 with AVX,
    else 16)."""
    flags = _cpu_flags()
    return 64 if "avx512f" in flags else 32 if "avx" in flags else 16


def _sysconf(name: str) -> int:
    try:
        value = os.sysconf(name)
    except (ValueError, OSError):
        return 0
    return value if value and value > 0 else 0


def _sysfs(level: int, kind: str) -> int:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(base.glob("index*")):
            if (index / "level").read_text().strip() == str(level) and (index / "type").read_text().strip() == kind:
                return _parse_size((index / "size").read_text().strip())
    except OSError:
        return 0
    return 0


def _parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text) if text.isdigit() else 0
