"""A data-race check for generated CUDA on the CPU: the emulation of ``test_codegen_cuda`` with every global
array access of barrier-free kernels recorded.

In a kernel with no ``__syncthreads()`` nothing orders two threads of one launch (blocks never, threads of a
block only by barriers), so a global element written by one thread and read or written by another is a race,
whatever order the emulation happens to run them in. The emulation runs such kernels' threads one after
another (a serial order hides races whose updates commute, like nussinov's ``max``); this check instead
records, per launch, which thread wrote and which threads read each element, and reports the first conflict
(kernel, array, element, the two threads) or out-of-bounds index (every array passed is registered with its
size). Kernels with barriers run as in ``test_codegen_cuda`` and are not
checked (their ordering would need the barrier epochs).

How: the array parameters of a checked kernel become ``pf_track<T>``, whose ``operator[]`` returns a
reference proxy that records the access in its conversion (a read) or assignment (a write); the generated
text is otherwise compiled unchanged.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np

from polyfuse.codegen.cuda import PRELUDE
from tests.test_codegen_cuda import EMULATION_PRELUDE, _driver, _has_barrier, emulate

TRACKING = r"""
#include <unordered_map>
#include <string>
#include <stdio.h>
struct pf_owner { long long writer = -1, reader = -1; };  /* reader -2: several threads */
static std::unordered_map<const void*, pf_owner> pf_owners;
static long long pf_thread;  /* linear (block, thread) index of the thread running */
static const char* pf_kernel = "";
static long long pf_races = 0;
static std::string pf_report;
static void pf_conflict(const char* what, const char* array, const void* base, const void* p, size_t size, long long other)
{
  if (pf_races++ == 0) {
    char line[512];
    snprintf(line, sizeof line, "%s: %s of %s[%lld] by thread %lld, touched by thread %lld in the same launch",
             pf_kernel, what, array, (long long) (((const char*) p - (const char*) base) / (long long) size), pf_thread, other);
    pf_report = line;
  }
}
template <typename T> struct pf_ref {
  T* p; const T* base; const char* name;
  void read() const {
    pf_owner& o = pf_owners[p];
    if (o.writer >= 0 && o.writer != pf_thread) pf_conflict("read", name, base, p, sizeof(T), o.writer);
    o.reader = (o.reader == -1 || o.reader == pf_thread) ? pf_thread : -2;
  }
  void write() const {
    pf_owner& o = pf_owners[p];
    if (o.writer >= 0 && o.writer != pf_thread) pf_conflict("write", name, base, p, sizeof(T), o.writer);
    else if (o.reader == -2 || (o.reader >= 0 && o.reader != pf_thread)) pf_conflict("write", name, base, p, sizeof(T), o.reader);
    o.writer = pf_thread;
  }
  operator T() const { read(); return *p; }
  pf_ref& operator=(T v) { write(); *p = v; return *this; }
  pf_ref& operator=(const pf_ref& o) { T v = o; write(); *p = v; return *this; }
  pf_ref& operator+=(T v) { T old = *this; write(); *p = old + v; return *this; }
  pf_ref& operator-=(T v) { T old = *this; write(); *p = old - v; return *this; }
  pf_ref& operator*=(T v) { T old = *this; write(); *p = old * v; return *this; }
  pf_ref& operator/=(T v) { T old = *this; write(); *p = old / v; return *this; }
};
static std::unordered_map<const void*, long long> pf_extents;  /* registered arrays: elements */
static long long pf_extent_of(const void* p) { auto e = pf_extents.find(p); return e == pf_extents.end() ? -1 : e->second; }
template <typename T> struct pf_track {
  T* p; const char* name; long long n;  /* n: elements, -1 if not registered */
  pf_ref<T> operator[](long long i) const {
    if (n >= 0 && (i < 0 || i >= n) && pf_races++ == 0) {
      char line[512];
      snprintf(line, sizeof line, "%s: out-of-bounds access to %s[%lld] (%lld elements) by thread %lld", pf_kernel, name, i, n, pf_thread);
      pf_report = line;
    }
    return pf_ref<T>{p + i, p, name};
  }
};
extern "C" void pf_register(const void* p, long long n) { pf_extents[p] = n; }
extern "C" long long pf_race_count(void) { return pf_races; }
extern "C" void pf_race_reset(void) { pf_races = 0; pf_report.clear(); }
extern "C" const char* pf_race_report(void) { return pf_report.c_str(); }
"""

_PARAM = re.compile(r"(const )?([A-Za-z_][A-Za-z0-9_ ]*?)\* __restrict__ ([A-Za-z_][A-Za-z0-9_]*)")


def _tracked(text: str, kernel: str) -> tuple[str, list[str]]:
    """``text`` with the array parameters of ``kernel`` renamed ``<name>_raw`` and rebound as ``pf_track``
    at the top of its body; the names of those arrays."""
    start = text.find(f" {kernel}(")
    open_brace = text.find("\n{\n", start)
    header = text[start:open_brace]
    arrays = [m.group(3) for m in _PARAM.finditer(header)]
    new_header = _PARAM.sub(lambda m: f"{m.group(1) or ''}{m.group(2)}* __restrict__ {m.group(3)}_raw", header)
    binds = "".join(f'\n  const pf_track<{m.group(1) or ""}{m.group(2)}> {m.group(3)} = {{{m.group(3)}_raw, "{m.group(3)}", pf_extent_of({m.group(3)}_raw)}};'
                    for m in _PARAM.finditer(header))
    return text[:start] + new_header + "\n{" + binds + text[open_brace + 2:], arrays


def _checked_driver(launch, tag: str) -> str:
    """The sequential driver of ``test_codegen_cuda`` with the thread index published and the access log
    cleared at each launch."""
    text = _driver(launch, tag, False)
    text = text.replace("{\n  for (unsigned gz", f'{{\n  pf_owners.clear(); pf_kernel = "{launch.kernel}";\n  long long pf_linear = 0;\n  for (unsigned gz', 1)
    marked = text.replace("    blockDim.x = pf_b[0];", "    pf_thread = pf_linear++;\n    blockDim.x = pf_b[0];", 1)
    assert marked != text and "pf_owners.clear()" in marked, text  # (the driver's text changed: update these anchors)
    return marked


def build_race_checker(variants: list[tuple[str, object]], tmp: Path) -> ctypes.CDLL:
    """One shared library running every variant's kernels on the CPU (kernels renamed ``<tag>_<name>``),
    the barrier-free ones with their global accesses checked; ``pf_race_count()`` and ``pf_race_report()``
    give the conflicts found since it was loaded."""
    src = [EMULATION_PRELUDE, TRACKING, PRELUDE]
    for tag, code in variants:
        text = code.text.replace(PRELUDE, "").replace("__global__ void ", f"__global__ void {tag}_")
        drivers = []
        for la in {la.kernel: la for la in code.launch.launches()}.values():
            if _has_barrier(code.text, la.kernel):
                drivers.append(_driver(la, tag, True))
            else:
                text, _ = _tracked(text, f"{tag}_{la.kernel}")
                drivers.append(_checked_driver(la, tag))
        src.append(text)
        src.extend(drivers)
    (tmp / "races.cpp").write_text("\n".join(src))
    out = subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(tmp / "races.so"), str(tmp / "races.cpp")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    dll = ctypes.CDLL(str(tmp / "races.so"))
    dll.pf_race_count.restype = ctypes.c_longlong
    dll.pf_race_report.restype = ctypes.c_char_p
    return dll


def races(dll: ctypes.CDLL, tag: str, code, values: dict, sizes: dict) -> tuple[int, str]:
    """Run one variant as :func:`tests.test_codegen_cuda.emulate` does (``values`` updated in place, its
    temporaries added); the number of conflicts and out-of-bounds accesses its barrier-free kernels had and
    the first one, described."""
    for a in code.launch.arrays:  # (temporaries allocated here, as emulate would, to register them too)
        if a.name not in values:
            values[a.name] = np.zeros(a.concrete_shape(sizes), a.dtype.numpy)
    for v in values.values():
        if isinstance(v, np.ndarray):
            dll.pf_register(ctypes.c_void_p(v.ctypes.data), ctypes.c_longlong(v.size))
    dll.pf_race_reset()
    emulate(dll, tag, code, values, sizes)
    return dll.pf_race_count(), dll.pf_race_report().decode()
