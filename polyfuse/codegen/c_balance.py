"""How the C printer deals a parallel loop's iterations to the threads: the ``schedule`` clause of each
``omp for``.

Why not always ``schedule(static)``: a static schedule gives each thread a fixed share, so the loop ends when
the slowest thread ends. On the shared machines users run on (a cloud VM whose virtual cores the host also
runs other guests on, a laptop with background work, hybrid cores), one thread routinely runs slower for a
while, and the other threads then wait at the loop's barrier. Dealing the iterations out as the threads
ask for them (``schedule(dynamic, chunk)``) lets the faster threads take over the rest. Measured on the
2-core Emerald Rapids KVM guest, 2 threads, paired with the static schedule: matmul 2048³ 0.93-0.97
of its time, the MLP 0.95, softmax 8192 x 4096 0.93. A triangular loop gains most (its static shares are
unequal even on a quiet machine): PolyBench covariance and correlation 0.64-0.78 at MEDIUM and LARGE.

Why not always dynamic: a static schedule gives a thread the same iterations in every kernel of the
program, so data one kernel leaves in a core's private cache is there for the next kernel that reads it
(a stencil's time steps, PolyBench at MEDIUM sizes); dynamic dealing would move it between cores, and
each dynamic loop costs the team a shared work-share record, paid at every launch. So only a kernel
launched once per call (under no host loop: the printer decides, ``c.py``) may be dealt out dynamically
(gramschmidt's and doitgen's micro-tiles, launched once per column or row under a host loop, ran 1.16-1.22x
slower dynamically at MEDIUM), and only where the affinity buys nothing:

* the loop holds a register micro-tile (a contraction): each iteration is a tile whose reuse is inside the
  tile (packed panels, accumulators in registers), long enough that asking for it costs nothing; chunk 1;
* the kernel touches more bytes than the cache holds (``c_stream.cache_limits``, the test that streaming
  stores use): its data comes from memory whichever core reads it. Each thread then asks for
  :data:`CHUNKS` -th of the loop at a time, when its trip count is known at compile time (a few thousand
  rows of softmax cost a few microseconds each: one request per row would cost more than it balances);
  a loop whose bounds are symbolic stays static.

Neither changes any result: no parallel loop the printer emits reduces across threads (each iteration
writes its own elements; reductions are per-thread scalars inside an iteration), so which thread runs an
iteration does not matter for the values, only for the time.
"""

from __future__ import annotations

import math

import islpy as isl

from polyfuse.codegen.ast import constant_range
from polyfuse.codegen.c_openmp import holds_mark
from polyfuse.schedule.tiling.microtile import MICROTILE_MARK

CHUNKS = 64
"""A memory-bound loop with a known trip count is dealt in this many pieces (rounded up): for 2 threads,
32 requests each, and a thread that falls behind leaves at most 1/64 of the work to wait for."""

TILE_MARKS = frozenset({MICROTILE_MARK})
"""A loop holding one of these is a contraction's tile loop (not a ``jam`` mark's recurrences run in step:
adi's sweeps revisit the same rows every time step, where the static schedule's affinity pays)."""


def schedule_clause(loop: isl.AstNode, collapsed: bool, memory_bound: bool) -> str:
    """The ``schedule(...)`` clause of the OpenMP loop ``loop`` (with the loop right inside it when
    ``collapsed``); ``memory_bound``: its kernel's data exceeds the cache (see the module docstring)."""
    if holds_mark(loop, TILE_MARKS):
        return "schedule(dynamic)"
    if memory_bound:
        trips = trip_count(loop)
        if trips is not None and collapsed:
            inner = trip_count(loop.for_get_body())
            trips = None if inner is None else trips * inner
        if trips is not None and trips >= 2 * CHUNKS:
            return f"schedule(dynamic, {math.ceil(trips / CHUNKS)})"
    return "schedule(static)"


def trip_count(loop: isl.AstNode) -> int | None:
    """The iterations of the ``for`` node ``loop`` when its start, step and bound are integers (the sizes
    were given at compile time), else None."""
    bounds = constant_range(loop)
    if bounds is None or bounds[2] <= 0:
        return None
    first, last, step = bounds
    return max(0, (last - first) // step + 1)
