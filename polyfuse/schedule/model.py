"""The value the scheduler produces and the code generators consume.

A :class:`Schedule` is the program plus an isl schedule tree that says, for every statement instance,
when and where it runs. The tree follows these conventions, which are the whole contract between
``schedule/`` and ``codegen/``:

* A **mark node named** ``"kernel"`` (its ``isl.Id`` user object is the :class:`Kernel`) sits above the
  subtree of each kernel. Everything above kernel marks is host code: sequences and *host loops* (bands
  that carry dependences around kernel launches, e.g. a stencil's time loop). Every statement lies under
  exactly one kernel mark.
* Inside a kernel, a mark named ``"parallel"`` sits above a band whose first member is parallel
  (coincident and legal to run concurrently): the C backend emits ``#pragma omp parallel for`` on the
  outermost loop printed from it.
* For the CUDA target, a mark named ``"grid"`` sits above the band whose first ``len(kernel.grid)``
  members map to ``blockIdx.x, .y, .z`` (innermost member to ``.x``), and a mark named ``"block"`` above
  the band whose first ``len(kernel.block)`` members map to ``threadIdx`` likewise. Loops below those are
  sequential inside a thread. Each mapped loop runs ``0 <= v < extent`` and the printer guards partial
  tiles.
* **Cooperative rows** (CUDA, ``rows.py``): a kernel may instead be ``kernel`` -> ``grid`` -> row band
  (untiled: one row per block; ``Kernel.block`` is the number of threads) -> sequence of *phases*. A phase
  without marks runs in every thread of the block, except that a statement of it writing memory (not a
  register) runs in thread 0 only. A mark named ``"cyclic"`` sits above a one-member band whose loop the
  block's threads share cyclically, iteration ``j`` on thread ``j mod blockDim.x``: ``for (j = lo +
  (threadIdx.x - lo) mod blockDim.x; j <= hi; j += blockDim.x)`` (a statement whose ``cyclic`` loop isl did
  not print runs in thread 0). A mark named ``"reduce"`` above it carries a tuple of ``rows.RowReduction``
  (a register array and its operator): threads other than 0 start each from the operator's identity, and
  after the loop a block-wide reduction gives every thread the combined value. A mark named ``"sync"``
  above a phase puts a ``__syncthreads()`` before it. Rows staged in shared memory (``row_staging.py``)
  add, in ``Promotion.tree`` only, extension nodes between the phases whose copy loops carry the same
  ``cyclic`` (and ``sync``) marks.
* Arrays in ``contracted`` get no global buffer: each is a per-thread private scalar (C: declared inside the
  parallel loop body; CUDA: a register). The scheduler contracts an array only when every value written is
  read by the same thread before the next write, and nothing reads it after the program.

Sizes (``params``) are concrete when given; grid and block extents are then numbers, otherwise they are
left for the runtime to compute from the isl schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import islpy as isl

from polyfuse.ir.pickling import fields_state, rebuild
from polyfuse.ir.program import Program
from polyfuse.schedule.text import schedule_text

KERNEL_MARK = "kernel"
PARALLEL_MARK = "parallel"
GRID_MARK = "grid"
BLOCK_MARK = "block"
CYCLIC_MARK = "cyclic"
REDUCE_MARK = "reduce"
SYNC_MARK = "sync"
ONE_KERNEL_MARK = "one_kernel"  # (base trees only) the subtree below is one kernel: the host/kernel split stops here

BASE_KEY = "base"
"""``Schedule._lazy`` key of the base tree (before tiling and mapping) that ``to_text`` prints."""
FOLD_KEY = "fold"
"""``Schedule._lazy`` key of the C step left for the schedule a policy chooses: its contractions' initialisations
moved into their tiles (``schedule._fold``)."""
CARRIED_KEYS = (BASE_KEY, FOLD_KEY)
"""The ``Schedule._lazy`` entries a copy of a chosen schedule keeps."""
FELL_BACK_SEQUENTIAL = "fell back to the source order, run sequentially"
ROWS_FUSED = "threads=1: the loop nests of each time step run fused row by row"
"""The note (``fusion/steps.py``) of a schedule whose time steps run as one row-fused kernel each."""
SMS = 132
"""An H100's multiprocessors: a CUDA kernel launching fewer blocks leaves some idle, and ``explain()`` says why."""


@dataclass(frozen=True)
class Kernel:
    """One kernel: a group of fused statements launched (CUDA) or run (C) as one loop nest.

    ``grid`` and ``block`` are CUDA launch extents at the schedule's sizes (innermost dimension first, as
    CUDA's x, y, z); both are ``()`` for the C target. ``shared_bytes`` is the static shared memory used.
    """

    name: str
    statements: tuple[str, ...]
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    shared_bytes: int = 0
    parallel_depth: int = 0
    tile_sizes: tuple[int, ...] = ()  # sizes of the kernel's tile loops (outermost first); () = untiled
    serial: str = ""  # why a kernel with a parallel loop runs on one thread anyway ("" when it does not)
    reduction: str = ""  # CUDA: how the threads share a reduction into one element (block_reductions.py)
    microtile: Any = None  # CUDA: the register micro-tile plan its printer follows (tiling/cuda_microtile.py)
    vector_sum: Any = None  # CUDA: the plan of a sum into a vector its printer follows (mapping/vector_sums.py)
    unroll: int = 0  # CUDA: how far the cooperative-row loops are unrolled (mapping/rows.py; 0: the printer's default)
    wavefront: str = ""  # C: how its tiles run in parallel on diagonals, where no loop of it is parallel (tiling/wavefront.py)
    thread_share: int = 0  # CUDA: iterations of the innermost mapped loop each thread runs (mapping/element_share.py; 0: one)

    @property
    def without_parallel_loop(self) -> bool:
        """Whether the kernel has no parallel loop at all (one left serial for its tiny work has one)."""
        return self.parallel_depth == 0 and not self.serial and not self.reduction


@dataclass(frozen=True)
class Buffer:
    """A promoted copy of (part of) an array: ``space`` is ``"shared"`` (a ``__shared__`` array of
    ``shape`` per thread block) or ``"register"`` (one element per thread, ``shape == ()``). ``reuse`` is
    the number of accesses per copied element in one tile (0 when not counted); ``why``, when given, is
    what ``explain()`` says of it (a register window names its registers there)."""

    name: str
    array: str
    kernel: str
    space: str
    shape: tuple[int, ...]
    dtype: Any
    reuse: float = 0.0
    why: str = ""

    @property
    def nbytes(self) -> int:
        n = int(self.dtype.numpy().itemsize)
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class RowBuffer:
    """C: the temporary ``buffer`` standing in for output ``array`` within the rows of ``kernel``, one row of
    ``length`` elements per thread (``schedule/row_buffers.py``)."""

    buffer: str
    array: str
    length: int
    kernel: str


@dataclass(frozen=True, eq=False)
class Promotion:
    """Data movement added for code generation (``schedule/movement/promotion.py``).

    ``tree`` is ``Schedule.tree`` plus the copy and barrier statements, placed by isl extension nodes (so it
    cannot be flattened by ``get_map``; legality and traffic use ``Schedule.tree``). ``statements`` holds
    the copy statements, the barrier statements (names in ``barriers``; printed ``__syncthreads()``) and
    the compute statements whose accesses were redirected to a buffer, by name (``build_ast(statements=)``).
    ``kernels`` are the kernels with their ``shared_bytes``, by name.
    """

    tree: isl.Schedule
    buffers: tuple[Buffer, ...]
    statements: Mapping[str, Any]
    barriers: frozenset[str]
    kernels: Mapping[str, Kernel] = field(default_factory=dict)


@dataclass(frozen=True)
class FusionDecision:
    """Why two neighbouring groups of statements were or were not fused (for ``explain()``)."""

    first: tuple[str, ...]
    second: tuple[str, ...]
    fused: bool
    reason: str


@dataclass(frozen=True, eq=False)
class Schedule:
    """A program with a legal schedule tree and the kernel plan read off it.

    ``decide`` computes :attr:`decisions` on first use (``explain()``): they schedule pairs of kernels
    again with isl, so ``pf.schedule`` does not pay for them. The result is kept in a private cache; the
    value itself never changes.
    """

    program: Program
    tree: isl.Schedule
    target: str
    fusion: str
    kernels: tuple[Kernel, ...]
    contracted: frozenset[str] = frozenset()
    params: Mapping[str, int] = field(default_factory=dict)
    tile: Any = None
    decide: Callable[[], tuple[FusionDecision, ...]] | None = field(default=None, repr=False)
    notes: tuple[str, ...] = ()
    promotion: Promotion | None = None
    row_buffers: tuple[RowBuffer, ...] = ()  # C: outputs whose rows are kept in per-thread buffers (row_buffers.py)
    reassociate: bool = True  # float reductions may be reassociated / contracted (``pf.schedule(reassociate=)``)
    _lazy: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def decisions(self) -> tuple[FusionDecision, ...]:
        """Why neighbouring kernels were or were not fused (computed by ``decide`` on first use)."""
        if "decisions" not in self._lazy:
            self._lazy["decisions"] = tuple(self.decide()) if self.decide is not None else ()
        return self._lazy["decisions"]

    def explain(self) -> str:
        """For each pair of neighbouring kernels, why they were or were not fused."""
        lines = [f"schedule of {self.program.name}: {len(self.kernels)} kernel(s), fusion={self.fusion}, target={self.target}"]
        lines.extend(f"  assumes {a.describe()}" for a in self.program.assumptions)
        for k in self.kernels:
            launch = f"grid={k.grid} block={k.block}" if any(k.grid) else f"grid=(symbolic: sizes not given) block={k.block}"
            lines.append(f"  {k.name}: {', '.join(k.statements)}" + (f"  {launch}" if k.grid else ""))
            if k.reduction:
                lines.append(f"  {k.name}: parallel reduction: {k.reduction}")
            if k.microtile is not None:
                lines.append(f"  {k.name}: {k.microtile}")
            if k.wavefront:
                lines.append(f"  {k.name}: {k.wavefront}")
            if k.thread_share:
                lines.append(f"  {k.name}: each thread runs {k.thread_share} iterations of the innermost mapped loop, "
                             f"{k.block[0]} apart (their loads in flight together)")
            if k.vector_sum is not None:
                lines.append(f"  {k.name}: {k.vector_sum}")
            elif k.parallel_depth == 0:
                lines.append(f"  {k.name}: sequential: {self._sequential_reason(k)}")
            few = self._few_blocks_reason(k)
            if few:
                lines.append(f"  {k.name}: {few}")
        for d in self.decisions:
            verdict = "fused" if d.fused else "not fused"
            lines.append(f"  {'+'.join(d.first)} | {'+'.join(d.second)}: {verdict}: {d.reason}")
        if self.contracted:
            lines.append(f"  contracted (no global buffer): {', '.join(sorted(self.contracted))}")
        for b in self.promotion.buffers if self.promotion is not None else ():
            where = f"shared {b.name}[{']['.join(map(str, b.shape))}] ({b.nbytes} bytes)" if b.space == "shared" else f"register {b.name}"
            why = f"reused {b.reuse:g}x per tile across threads" if b.space == "shared" and b.reuse else (
                "read by several threads of a block" if b.space == "shared" else "one element per thread, reused in its sequential loop")
            lines.append(f"  {b.kernel}: promoted {b.array} to {where}: {b.why or why}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def _sequential_reason(self, kernel: Kernel) -> str:
        """Why a kernel has no parallel loop: a dependence among its statements that its outermost loop
        carries in the source order (the outermost carried one, flow first)."""
        if kernel.serial:
            return kernel.serial
        if any(FELL_BACK_SEQUENTIAL in n for n in self.notes):
            return "isl's operation budget ran out (see the note below), so the program runs as written, on one thread"
        if len(kernel.statements) > 1 and any(n.startswith(ROWS_FUSED) for n in self.notes):
            return ("its loop nests run fused row by row for one thread (see the note): a row reads what earlier rows "
                    "of the other nests wrote, so the rows run in order, which costs one thread nothing")
        if self._loop_free(kernel):  # (a dependence its host loops carry is theirs, not the kernel's)
            return "one statement instance per launch (no loop inside the kernel): nothing to run in parallel"
        inside = set(kernel.statements)
        carried = [d for d in self.program.dependences()
                   if d.source in inside and d.sink in inside and d.carried_depth is not None]
        if not carried:
            return "no loop with more than one iteration is free of dependences at this depth"
        order = {"flow": 0, "anti": 1, "output": 2}
        d = min(carried, key=lambda d: (d.carried_depth, order.get(d.kind, 3)))
        return (f"the {d.kind} dependence on {d.array!r} from {d.source} to {d.sink} is carried at loop depth "
                f"{d.carried_depth} (distance {d.distance_text()})")

    def _few_blocks_reason(self, kernel: Kernel) -> str:
        """CUDA at known sizes: why a kernel with parallel loops launches fewer blocks than an H100 has
        multiprocessors ("" when it launches enough, or runs on one thread: the sequential line says why).
        Either a dependence among its statements is carried by one of their loops (the deepest such, the
        one that kept a loop off the threads; a dependence that only the host loops around the kernel carry
        orders launches, not threads), or every loop is parallel and a launch is that small."""
        if self.target != "cuda" or not kernel.grid or not all(kernel.grid) or kernel.parallel_depth == 0:
            return ""
        blocks, threads = math.prod(kernel.grid), math.prod(kernel.block or (1,))
        if blocks >= SMS:
            return ""
        head = f"{blocks} block(s) of {threads} thread(s), fewer than an H100's {SMS} multiprocessors: "
        work, host = self._instances_per_launch(kernel)
        size = f"{work} statement instances per launch" if work is not None else "a launch's instances (not counted)"
        inside = set(kernel.statements)  # (a dependence only the host loops carry orders launches, not threads)
        carried = [d for d in self.program.dependences()
                   if d.source in inside and d.sink in inside and d.carried_depths and max(d.carried_depths) >= host]
        if carried:
            order = {"flow": 0, "anti": 1, "output": 2}
            d = max(carried, key=lambda d: (max(d.carried_depths), -order.get(d.kind, 3)))
            return head + (f"{size}; not every loop is parallel: the {d.kind} dependence on {d.array!r} from "
                           f"{d.source} to {d.sink} is carried at loop depth {max(d.carried_depths)} "
                           f"(distance {d.distance_text()})")
        return head + f"{size}, all of them parallel: at these sizes there is no more work to spread"

    def _instances_per_launch(self, kernel: Kernel) -> tuple[int | None, int]:
        """The statement instances of ``kernel`` at the schedule's sizes divided by its launches (the
        iterations of the host loops around it; ``None`` when they cannot be counted), and the number of
        those host loops."""
        from polyfuse.cost.footprint import count_set, fixed_params  # cost/ builds on this module

        mark = self._kernel_mark(kernel)
        if mark is None:
            return None, 0
        host = mark.get_schedule_depth()
        try:
            domain = mark.get_domain().intersect_params(fixed_params(self.program, self.params))
            launches = count_set(mark.get_prefix_schedule_union_map().intersect_domain(domain).range()) if host else 1
            return count_set(domain) // max(launches, 1), host
        except (isl.Error, ValueError):
            return None, host

    def _kernel_mark(self, kernel: Kernel) -> isl.ScheduleNode | None:
        """The ``kernel`` mark of ``kernel`` in the tree, or None."""
        from polyfuse.schedule.movement.kernel_tree import kernel_marks  # (it builds on this module)

        return next((m for m in kernel_marks(self.tree) if getattr(m.mark_get_id().user, "name", None) == kernel.name), None)

    def _loop_free(self, kernel: Kernel) -> bool:
        """Whether ``kernel`` runs one statement instance per launch: every statement has no loop of its
        own inside the kernel (its loops, if any, are the host loops around the kernel's mark), or the
        host loops determine its instance (floyd-warshall's pivot ``S0_4``, ``i = j = k``)."""
        mark = self._kernel_mark(kernel)
        if mark is None:
            return False
        if all(self.program.statement(s).depth <= mark.get_schedule_depth() for s in kernel.statements):
            return True
        prefix = mark.get_prefix_schedule_union_map().intersect_domain(mark.get_domain())
        return len(kernel.statements) == 1 and prefix.is_injective()

    def to_text(self) -> str:
        """The schedule as editable text that ``pf.schedule(prog, schedule=text)`` (or the CLI's
        ``--schedule FILE``) reads back: the tree of the order and fusion chosen, before tiling and mapping
        (isl's YAML block format; see :mod:`polyfuse.schedule.text`). A schedule that fell back to the
        sequential source order prints the source order."""
        return schedule_text(self._lazy.get(BASE_KEY, self.program.schedule))

    def traffic(self, params: Mapping[str, int] | None = None):
        """The modelled global-memory traffic (``polyfuse.cost.traffic.TrafficReport``) at the schedule's
        sizes, or at ``params`` when given (every size must be known one way or the other)."""
        from polyfuse.cost.traffic import traffic  # cost/ builds on this module

        return traffic(self, params)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its fusion decisions computed (``decide`` holds the dependence analysis) and the
        base tree ``to_text`` prints; other lazy values are recomputed on demand."""
        extra = {"decisions": self.decisions, **({BASE_KEY: self._lazy[BASE_KEY]} if BASE_KEY in self._lazy else {})}
        return rebuild, (type(self), fields_state(self, drop=("decide",)), {"_lazy": extra})

    def __str__(self) -> str:
        return self.explain() + "\n" + str(self.tree.get_root())
