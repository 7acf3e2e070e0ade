"""``cost/machine.py``: which cores run 512-bit vectors at full width, the switch for the C micro-kernel's
wider register tile (``tiling/tile_shapes.py``)."""

from __future__ import annotations

import pytest

from polyfuse.cost import machine


@pytest.mark.parametrize(("vendor", "family", "model", "avx512", "full"), [
    ("GenuineIntel", 6, 207, True, True),  # Emerald Rapids
    ("GenuineIntel", 6, 207, False, False),  # no AVX-512: no 512-bit vectors at all
    ("AuthenticAMD", 25, 17, True, False),  # Zen 4 (EPYC 9004): two 256-bit halves
    ("AuthenticAMD", 26, 2, True, True),  # Zen 5 (EPYC 9005), measured
    ("AuthenticAMD", 26, 0x24, True, False),  # another family 26 model: not measured, the narrower tile
    ("", -1, -1, True, False),  # no /proc/cpuinfo
])
def test_full_width_vector_units(monkeypatch, vendor, family, model, avx512, full) -> None:
    monkeypatch.setattr(machine, "_cpu_identity", lambda: (vendor, family, model))
    monkeypatch.setattr(machine, "_cpu_flags", lambda: frozenset({"avx2", "avx512f"} if avx512 else {"avx2"}))
    assert machine.full_width_vector_units() is full


def test_cpu_identity_reads_the_first_processor(monkeypatch, tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n\n"
                       "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n")
    real_path = machine.Path
    monkeypatch.setattr(machine, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    machine._cpuinfo.cache_clear()
    try:
        assert machine._cpu_identity() == ("AuthenticAMD", 26, 2)
    finally:
        machine._cpuinfo.cache_clear()
