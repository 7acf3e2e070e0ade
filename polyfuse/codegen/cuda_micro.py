"""The CUDA kernel of a register micro-tile (``schedule/tiling/cuda_microtile.py`` states the plan and
why): block tile, stages of ``k`` copied into shared memory with ``cp.async`` several steps ahead, and a
register tile of accumulators per thread.

Shape of the printed kernel (``S`` stages, ``BK`` the step of ``k``)::

    acc[r][c] = X[i][j] for the thread's rows i = i0 + TR ty + r and lanes j = j0 + TL tx + c in bounds
    steps 0 .. S-2: copy into stages 0 .. S-2 (one commit group each)
    for each step s:
        wait until step s has landed (at most S-2 groups pending); __syncthreads()
        copy step s+S-1 into stage (s-1) % S, the one every thread finished with before the barrier; commit
        for each run of 4 k of step s: load fragments from stage s % S, 16 bytes at a time;
            acc[r][c] += value for each k of the run
    X[i][j] = acc[r][c] for the elements in bounds

**Fragments.** Each thread's ``TR`` rows and ``TL`` lanes are contiguous, so its fragment of a ``k x
width`` tile is a run along the tile's row, and its fragment of a ``width x k`` tile a run of ``k`` in each
of its rows: either way 16-byte shared loads (``pf_load16``), 2 * 4 of them per 4 x 4 x 4 updates of an
f32 gemm where element loads needed 32. Shared-memory issue, not latency, bounded the element-load
kernel on an H100 (0.62 of cuBLAS; 0.66 with 16-byte loads at 4 x 4, 0.72 at 8 x 4). Where a tile is
padded (the lane operand stored ``lanes x k``: no 16-byte alignment) or a thread's run is shorter than a
vector, the threads interleave instead (rows ``i0 + ty + 16 r``), which keeps a padded tile free of bank
conflicts, and fragments are loaded element by element. A step shorter than ``BK`` (the last) always
runs element by element.

Copies move 16 bytes at a time where the global address is aligned and the whole vector is inside the
bounds (a run-time test per vector), one element otherwise; elements outside the bounds are stored as 0
so that no thread reads shared memory nobody wrote. Rows and lanes of the tile outside the bounds are
computed on those zeros and never stored; the last step runs over its valid ``k`` only, so each element
sums exactly its own terms, in the order of ``k``. Everything is block-uniform except the final stores,
so every thread reaches every barrier. The copies and ``pf_copy_*`` helpers are in ``PRELUDE``
(``cuda.py``): ``cp.async`` on sm_80 and later, plain copies before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import islpy as isl

from polyfuse.codegen.ast import as_operand
from polyfuse.codegen.cuda_accesses import flat_index, iterator_bounds, statement_arrays
from polyfuse.codegen.cuda_values import value_text
from polyfuse.ir.expr import ScalarArg
from polyfuse.ir.program import Program, Statement
from polyfuse.schedule.tiling.cuda_microtile import CudaMicroTile, StagedRead

COPY_PRELUDE = r"""
/* asynchronous global -> shared copies (the register micro-tiles' operand tiles, below):
   cp.async on sm_80 and later, where a copy has landed once pf_copy_wait<N>() leaves at most N of the
   thread's committed groups pending; plain copies before sm_80 */
#ifdef __CUDACC__
template <typename T> __device__ __forceinline__ bool pf_aligned16(const T* p) { return ((unsigned long long) p & 15) == 0; }
template <typename T> __device__ __forceinline__ void pf_copy_async(T& dst, const T* __restrict__ src, long long i)
{
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" :: "r"((unsigned) __cvta_generic_to_shared(&dst)), "l"(src + i), "n"(sizeof(T)) : "memory");
#else
  dst = src[i];
#endif
}
template <typename T> __device__ __forceinline__ void pf_copy_async16(T& dst, const T* __restrict__ src, long long i)
{
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned) __cvta_generic_to_shared(&dst)), "l"(src + i) : "memory");
#else
  *(int4*) &dst = *(const int4*) (src + i);
#endif
}
template <typename T> __device__ __forceinline__ void pf_load16(const T& first, T* out)
{
  /* 16 bytes from 16-byte aligned shared memory in one load (the micro-tile's fragments) */
  struct __align__(16) Run { T e[16 / sizeof(T)]; };
  const Run run = *reinterpret_cast<const Run*>(&first);
  #pragma unroll
  for (int e = 0; e < (int) (16 / sizeof(T)); e++) out[e] = run.e[e];
}
__device__ __forceinline__ void pf_copy_commit(void)
{
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void pf_copy_wait(void)
{
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}
#endif
"""

ROW, LANE, RED, BATCH = "pf_i", "pf_j", "pf_k", "pf_b"
"""The C names of the rows, lane, reduction and batch iterators inside the kernel."""


class MicroKernel:
    """The body of one micro-tiled kernel: ``lines`` (indented one level), the arrays it touches (name ->
    written) and the scalar arguments its value reads, for the kernel's signature (``cuda.py``)."""

    def __init__(self, program: Program, plan: CudaMicroTile, dialect, context: isl.Set | None,
                 origins: Mapping[str, str], grid_iterators: Sequence[str], reassociate: bool = True,
                 sizes: Mapping[str, int] | None = None) -> None:
        self.program = program
        self.reassociate = reassociate  # the accumulators start at 0 and the element is added last
        self.plan = plan
        self.stmt: Statement = program.statement(plan.statement)
        # at known sizes, every index fits 32 bits when every array the kernel touches does: the sizes are
        # printed as numbers and the indices as int (fewer registers than 64-bit arithmetic)
        self.sizes = dict(sizes) if sizes is not None and all(p in sizes for p in program.params) else None
        self.idx = "int" if self.sizes is not None and self._fits_int() else "long long"
        self.dialect = dialect
        self.context = context
        self.origins = origins
        self.grid_iterators = tuple(grid_iterators)  # the tile band's iterators: (batch,) rows, lane
        names = self.stmt.iterators
        self.var = {names.index(plan.rows): ROW, names.index(plan.lane): LANE, names.index(plan.reduction): RED}
        for b in plan.batch:
            self.var[names.index(b)] = BATCH
        self.type = program.arrays[self.stmt.write.array].dtype.c_name
        self.lines: list[str] = []
        self.arrays: dict[str, bool] = {}
        self.scalars = {n.name for n in self.stmt.value.walk() if isinstance(n, ScalarArg)}
        self.shared: list[str] = []
        self.vector = self._vector_width()

    # ----- names and expressions ----------------------------------------------------------------------

    def _fits_int(self) -> bool:
        arrays = {a.array for a in self.stmt.accesses}
        for name in arrays:
            count = 1
            for extent in self.program.arrays[name].concrete_shape(self.sizes):
                count *= max(int(extent), 1)
            if count >= 1 << 30:  # (room for an index one tile past the end)
                return False
        return True

    def tile_name(self, r: StagedRead) -> str:
        return f"pf_{self.stmt.accesses[r.access].array}_{r.side}{r.access}"

    def _bounds(self, iterator: str) -> tuple[str, str]:
        return iterator_bounds(self.program, self.stmt, iterator, self.context, self.dialect)

    def _flat(self, access: int, values: Mapping[int, str]) -> str:
        return flat_index(self.program, self.stmt, access, values, self.dialect, self.sizes)

    def _in_bounds(self, d: int, value: str) -> str:
        v = as_operand(value)
        return f"{v} >= {self.var[d]}_lo && {v} <= {self.var[d]}_hi"

    def emit(self, text: str, depth: int = 1) -> None:
        self.lines.append("  " * depth + text)

    # ----- the kernel ---------------------------------------------------------------------------------

    def build(self) -> MicroKernel:
        plan, stmt = self.plan, self.stmt
        tx, ty = plan.threads
        self.arrays = statement_arrays(stmt)
        for r in plan.staged:
            outer, inner = plan.tile_shape(r)
            ctype = self.program.arrays[stmt.accesses[r.access].array].dtype.c_name
            side = plan.rows if r.side == "rows" else plan.lane
            what = f"{plan.reduction} x {side}" if plan.stored_k_major(r) else f"{side} x {plan.reduction}"
            transposed = ", transposed on the copy" if plan.transposed(r) else ""
            pad = plan.padding(r, self._itemsize(r))
            self.shared.append(f"  __shared__ __align__(16) {ctype} {self.tile_name(r)}[{plan.stages}][{outer}][{inner + pad}];"
                               f"  /* {stmt.accesses[r.access].array}: {what} of {plan.stages} steps{transposed} */")
        iters = self.grid_iterators
        if plan.batch:
            self.emit(f"const {self.idx} {BATCH} = {_plus(self.origins[iters[0]], 'blockIdx.z', self.idx)};  /* {plan.batch[0]} */")
        self.emit(f"const {self.idx} pf_i0 = {plan.block_rows} * ({_plus(self.origins[iters[-2]], 'blockIdx.y', self.idx)});  /* first {plan.rows} of the block */")
        self.emit(f"const {self.idx} pf_j0 = {plan.block_lanes} * ({_plus(self.origins[iters[-1]], 'blockIdx.x', self.idx)});  /* first {plan.lane} */")
        self.emit("const int pf_tx = (int) threadIdx.x, pf_ty = (int) threadIdx.y;")
        self.emit(f"const int pf_tid = pf_ty * {tx} + pf_tx;")
        for name, it in (("pf_i", plan.rows), ("pf_j", plan.lane), ("pf_k", plan.reduction), *([("pf_b", plan.batch[0])] if plan.batch else [])):
            lo, hi = self._bounds(it)
            self.emit(f"const {self.idx} {name}_lo = {lo}, {name}_hi = {hi};  /* {it} */")
        if plan.batch:
            self.emit(f"if ({BATCH} < pf_b_lo || {BATCH} > pf_b_hi) return;  /* the whole block: no barrier is skipped */")
        self.emit(f"const int pf_steps = pf_k_hi >= pf_k_lo ? (int) ((pf_k_hi - pf_k_lo) / {plan.k_stage} + 1) : 0;")
        self.emit("if (pf_steps == 0) return;  /* no instance: the whole block returns */")
        self._accumulators(load=True)
        self.emit(f"/* steps 0 .. {plan.stages - 2} in flight before the first compute */")
        self.emit(f"for (int pf_p = 0; pf_p < {plan.stages - 1}; pf_p++) {{")
        self.emit("if (pf_p < pf_steps) {", 2)
        self._copies("pf_p", "pf_p", 3)
        self.emit("}", 2)
        self.emit("pf_copy_commit();", 2)
        self.emit("}")
        self.emit(f"int pf_cs = 0, pf_ls = {plan.stages - 1};  /* the stages computed and copied into at step pf_s */")
        self.emit("for (int pf_s = 0; pf_s < pf_steps; pf_s++) {")
        self.emit(f"pf_copy_wait<{plan.stages - 2}>();  /* this thread's copies of step pf_s have landed */", 2)
        self.emit("__syncthreads();  /* everyone's have, and everyone is done with step pf_s - 1 */", 2)
        self.emit("{", 2)
        self.emit(f"const int pf_n = pf_s + {plan.stages - 1};", 3)
        self.emit("if (pf_n < pf_steps) {", 3)
        self._copies("pf_n", "pf_ls", 4)
        self.emit("}", 3)
        self.emit("pf_copy_commit();", 3)
        self.emit("}", 2)
        self._compute("pf_cs", 2)
        self.emit(f"pf_cs = pf_cs == {plan.stages - 1} ? 0 : pf_cs + 1;", 2)
        self.emit(f"pf_ls = pf_ls == {plan.stages - 1} ? 0 : pf_ls + 1;", 2)
        self.emit("}")
        self._accumulators(load=False)
        return self

    def _local(self, side: str, index: str) -> str:
        """The tile coordinate of the thread's ``index``-th row (``side`` "rows") or lane: contiguous runs
        per thread where fragments load 16 bytes at a time, else strided by the thread count."""
        plan = self.plan
        if side == "rows":
            thread, count, stride = "pf_ty", plan.thread_rows, plan.threads[1]
        else:
            thread, count, stride = "pf_tx", plan.thread_lanes, plan.threads[0]
        return f"{thread} * {count} + {index}" if self.vector else f"{thread} + {stride} * {index}"

    def _vector_width(self) -> int:
        """Elements per 16-byte fragment load from the shared tiles, or 0 where the tiles do not allow it
        (a padded tile, mixed element sizes, a thread tile or step of k not a multiple of the vector)."""
        plan = self.plan
        sizes = {self._itemsize(r) for r in plan.staged}
        if len(sizes) != 1 or any(plan.padding(r, self._itemsize(r)) * self._itemsize(r) % 16 for r in plan.staged):
            return 0
        width = 16 // sizes.pop()
        counts = [plan.thread_rows if r.side == "rows" else plan.thread_lanes for r in plan.staged if plan.stored_k_major(r)]
        if plan.k_stage % width or any(c % width for c in counts):
            return 0
        return width

    def _itemsize(self, r: StagedRead) -> int:
        return self.program.arrays[self.stmt.accesses[r.access].array].dtype.bits // 8

    def _thread_loops(self, depth: int, body) -> None:
        plan = self.plan
        outer = len(self.lines)
        body(depth + 2)
        inner = self.lines[outer:]
        del self.lines[outer:]
        used = "\n".join(inner)
        self.emit("#pragma unroll", depth)
        self.emit(f"for (int pf_r = 0; pf_r < {plan.thread_rows}; pf_r++) {{", depth)
        if ROW in used:  # (not printed unused: nvcc warns)
            self.emit(f"const {self.idx} {ROW} = pf_i0 + {self._local('rows', 'pf_r')};", depth + 1)
        self.emit("#pragma unroll", depth + 1)
        self.emit(f"for (int pf_c = 0; pf_c < {plan.thread_lanes}; pf_c++) {{", depth + 1)
        if LANE in used:
            self.emit(f"const {self.idx} {LANE} = pf_j0 + {self._local('lane', 'pf_c')};", depth + 2)
        self.lines.extend(inner)
        self.emit("}", depth + 1)
        self.emit("}", depth)

    def _accumulators(self, load: bool) -> None:
        plan, stmt = self.plan, self.stmt
        values = dict(self.var)
        flat = self._flat(stmt.target, values)
        target = f"{stmt.write.array}[{flat}]"
        inside = " && ".join([self._in_bounds(d, v) for d, v in self.var.items() if v in (ROW, LANE)])
        if load and self.reassociate:
            self.emit(f"{self.type} pf_acc[{plan.thread_rows}][{plan.thread_lanes}];  /* the thread's sums, in registers */")
            self._thread_loops(1, lambda d: self.emit(f"pf_acc[pf_r][pf_c] = ({self.type}) 0;", d))
        elif load:
            self.emit(f"{self.type} pf_acc[{plan.thread_rows}][{plan.thread_lanes}];  /* the thread's outputs, in registers */")
            self._thread_loops(1, lambda d: self.emit(f"pf_acc[pf_r][pf_c] = ({inside}) ? {target} : ({self.type}) 0;", d))
        elif self.reassociate:  # (the element's own value added after its terms: fewer registers live in the loop)
            self._thread_loops(1, lambda d: self.emit(f"if ({inside}) {target} = {target} + pf_acc[pf_r][pf_c];  /* {stmt.name} */", d))
        else:
            self._thread_loops(1, lambda d: self.emit(f"if ({inside}) {target} = pf_acc[pf_r][pf_c];  /* {stmt.name} */", d))

    def _copies(self, step: str, stage: str, depth: int) -> None:
        """Issue the copies of step ``step`` of every staged read into ``stage``."""
        plan = self.plan
        threads = plan.threads[0] * plan.threads[1]
        self.emit(f"const {self.idx} pf_k0 = pf_k_lo + {plan.k_stage} * ({self.idx}) {as_operand(step)};", depth)
        for r in plan.staged:
            if plan.transposed(r):
                self._transposed_copies(r, stage, depth)
                continue
            acc = self.stmt.accesses[r.access]
            dtype = self.program.arrays[acc.array].dtype
            outer, inner = plan.tile_shape(r)
            width = 16 // (dtype.bits // 8) if r.contiguous and not plan.padding(r, dtype.bits // 8) else 1
            per_row = inner // width
            total = outer * per_row
            count = -(-total // threads)
            tile = self.tile_name(r)
            # which iterators the tile's (outer, inner) coordinates are
            side = ROW if r.side == "rows" else LANE
            first = "pf_i0" if side == ROW else "pf_j0"
            coords = (RED, side) if plan.stored_k_major(r) else (side, RED)
            start = {RED: "pf_k0", side: first}
            self.emit(f"/* {acc.array}: {outer} x {inner} elements, {width} per copy */", depth)
            self.emit("#pragma unroll", depth)
            self.emit(f"for (int pf_q = 0; pf_q < {count}; pf_q++) {{", depth)
            self.emit(f"const int pf_v = pf_tid + {threads} * pf_q;", depth + 1)
            d = depth + 1
            if total % threads:
                self.emit(f"if (pf_v < {total}) {{", d)
                d += 1
            self.emit(f"const int pf_o = pf_v / {per_row}, pf_e = (pf_v % {per_row}) * {width};", d)
            self.emit(f"const {self.idx} {coords[0]} = {start[coords[0]]} + pf_o, {coords[1]} = {start[coords[1]]} + pf_e;", d)
            values = dict(self.var)
            inv = {v: dd for dd, v in self.var.items()}
            outer_ok = self._in_bounds(inv[coords[0]], coords[0])
            if width > 1:
                last = f"{coords[1]} + {width - 1}"
                ok = f"{outer_ok} && {self._in_bounds(inv[coords[1]], coords[1])} && {self._in_bounds(inv[coords[1]], last)}"
                self.emit(f"const {self.idx} pf_at = {self._flat(r.access, values)};", d)
                self.emit(f"if ({ok} && pf_at % {width} == 0 && pf_aligned16({acc.array})) {{", d)
                self.emit(f"pf_copy_async16({tile}[{stage}][pf_o][pf_e], {acc.array}, pf_at);", d + 1)
                self.emit("} else {", d)
                self.emit("#pragma unroll", d + 1)
                self.emit(f"for (int pf_w = 0; pf_w < {width}; pf_w++) {{", d + 1)
                moved = dict(values)
                moved[inv[coords[1]]] = f"{coords[1]} + pf_w"
                ok1 = f"{outer_ok} && {self._in_bounds(inv[coords[1]], f'{coords[1]} + pf_w')}"
                self.emit(f"if ({ok1}) pf_copy_async({tile}[{stage}][pf_o][pf_e + pf_w], {acc.array}, {self._flat(r.access, moved)});", d + 2)
                self.emit(f"else {tile}[{stage}][pf_o][pf_e + pf_w] = ({dtype.c_name}) 0;", d + 2)
                self.emit("}", d + 1)
                self.emit("}", d)
            else:
                ok = f"{outer_ok} && {self._in_bounds(inv[coords[1]], coords[1])}"
                self.emit(f"if ({ok}) pf_copy_async({tile}[{stage}][pf_o][pf_e], {acc.array}, {self._flat(r.access, values)});", d)
                self.emit(f"else {tile}[{stage}][pf_o][pf_e] = ({dtype.c_name}) 0;", d)
            if total % threads:
                self.emit("}", depth + 1)
            self.emit("}", depth)

    def _transposed_copies(self, r: StagedRead, stage: str, depth: int) -> None:
        """The copies of a read contiguous along ``k`` into its ``k x width`` tile, one element each: the
        32 threads of a warp copy ``run`` consecutive values of ``k`` (one 32-byte sector of f32) for each of
        ``32 / run`` rows, so that the global reads use whole sectors and, with the tile's padding, the
        shared stores hit 32 different banks. Where the thread count divides evenly, a thread's copies sit
        at constant offsets from its first (``pf_q`` known when unrolled), which keeps their addresses out
        of registers."""
        plan = self.plan
        threads = plan.threads[0] * plan.threads[1]
        acc = self.stmt.accesses[r.access]
        ctype = self.program.arrays[acc.array].dtype.c_name
        steps, width = plan.tile_shape(r)
        run = math.gcd(8, steps)
        total = steps * width
        count = -(-total // threads)
        side, first = (ROW, "pf_i0") if r.side == "rows" else (LANE, "pf_j0")
        tile = self.tile_name(r)
        inv = {v: d for d, v in self.var.items()}
        self.emit(f"/* {acc.array}: {width} x {steps} elements, one per copy, transposed into {steps} x {width} */", depth)
        self.emit("#pragma unroll", depth)
        self.emit(f"for (int pf_q = 0; pf_q < {count}; pf_q++) {{", depth)
        d = depth + 1
        if (width * run) % threads == 0 and threads % run == 0:
            per = width * run // threads
            self.emit(f"const int pf_o = pf_tid / {run} + {threads // run} * (pf_q % {per}), pf_e = pf_tid % {run} + {run} * (pf_q / {per});", d)
        else:
            self.emit(f"const int pf_v = pf_tid + {threads} * pf_q;", d)
            if total % threads:
                self.emit(f"if (pf_v < {total}) {{", d)
                d += 1
            self.emit(f"const int pf_o = pf_v % {width * run} / {run}, pf_e = pf_v / {width * run} * {run} + pf_v % {run};", d)
        self.emit(f"const {self.idx} {RED} = pf_k0 + pf_e, {side} = {first} + pf_o;", d)
        ok = f"{self._in_bounds(inv[RED], RED)} && {self._in_bounds(inv[side], side)}"
        self.emit(f"if ({ok}) pf_copy_async({tile}[{stage}][pf_e][pf_o], {acc.array}, {self._flat(r.access, self.var)});", d)
        self.emit(f"else {tile}[{stage}][pf_e][pf_o] = ({ctype}) 0;", d)
        if d > depth + 1:
            self.emit("}", depth + 1)
        self.emit("}", depth)

    def _compute(self, stage: str, depth: int) -> None:
        plan, stmt = self.plan, self.stmt
        self.emit(f"const int pf_kn = (int) pf_min({plan.k_stage}, pf_k_hi - (pf_k_lo + {plan.k_stage} * ({self.idx}) pf_s) + 1);", depth)
        reads: dict[int, str] = {}
        fragments: list[tuple[str, str, str, int, int]] = []  # (name, ctype, element text, count, vector)
        for r in plan.staged:
            ctype = self.program.arrays[stmt.accesses[r.access].array].dtype.c_name
            tile = self.tile_name(r)
            if r.side == "rows":
                local, count, it = self._local("rows", "pf_f"), plan.thread_rows, "pf_r"
            else:
                local, count, it = self._local("lane", "pf_f"), plan.thread_lanes, "pf_c"
            element = f"{tile}[{stage}][pf_kk][{local}]" if plan.stored_k_major(r) else f"{tile}[{stage}][{local}][pf_kk]"
            name = f"pf_{'a' if r.side == 'rows' else 'b'}{r.access}"
            fragments.append((name, ctype, element, count, self.vector if plan.stored_k_major(r) else 0))
            reads[r.access] = f"{name}[{it}]"
        staged = {r.access for r in plan.staged}
        invariant = {k: f"{acc.array}[{self._flat(k, self.var)}]"  # reads invariant in the tile: from global memory
                     for k, acc in enumerate(stmt.accesses) if k != stmt.target and k not in staged}
        value = value_text(stmt.value, None, self.dialect, {**reads, **invariant})
        # whole steps: every fragment of one k a run along its k-major tile (16-byte loads, one k at a time), or
        # runs of k from the tiles stored width x k (``_vector_step``), or element by element; the last step,
        # shorter, element by element (fewer registers)
        k_major = bool(self.vector) and all(plan.stored_k_major(r) for r in plan.staged)
        elements = [f[:4] + (0,) for f in fragments]
        if k_major:
            what = f"unrolled; fragments {self.vector} values at a time"
        else:
            what = f"{self.vector} values of k at a time, 16-byte loads" if self.vector else "unrolled"
        self.emit(f"if (pf_kn == {plan.k_stage}) {{  /* a whole step: {what} */", depth)
        if self.vector and not k_major:
            self._vector_step(stage, invariant, depth + 1)
        else:
            self.emit("#pragma unroll", depth + 1)
            self.emit(f"for (int pf_kk = 0; pf_kk < {plan.k_stage}; pf_kk++) {{", depth + 1)
            self._fragment_step(fragments if k_major else elements, value, depth + 2)
            self.emit("}", depth + 1)
        self.emit("} else {", depth)
        self.emit("for (int pf_kk = 0; pf_kk < pf_kn; pf_kk++) {", depth + 1)
        self._fragment_step(elements, value, depth + 2)
        self.emit("}", depth + 1)
        self.emit("}", depth)

    def _vector_step(self, stage: str, invariant: Mapping[int, str], depth: int) -> None:
        """A whole step of k in runs of ``self.vector``: every fragment read 16 bytes at a time from its
        tile (along the thread's rows or lanes in a ``k x width`` tile, along k in a ``width x k`` one),
        then the run's updates; each element still takes its terms in the order of k."""
        plan, stmt = self.plan, self.stmt
        v = self.vector
        self.emit("#pragma unroll", depth)
        self.emit(f"for (int pf_kq = 0; pf_kq < {plan.k_stage}; pf_kq += {v}) {{", depth)
        d = depth + 1
        reads: dict[int, str] = {}
        for r in plan.staged:
            ctype = self.program.arrays[stmt.accesses[r.access].array].dtype.c_name
            tile = self.tile_name(r)
            side, count, it = ("rows", plan.thread_rows, "pf_r") if r.side == "rows" else ("lane", plan.thread_lanes, "pf_c")
            name = f"pf_{'a' if r.side == 'rows' else 'b'}{r.access}"
            if plan.stored_k_major(r):  # k x width: the thread's run of rows (lanes) is contiguous
                self.emit(f"{ctype} {name}[{v}][{count}];", d)
                self.emit("#pragma unroll", d)
                self.emit(f"for (int pf_u = 0; pf_u < {v}; pf_u++) {{", d)
                self.emit("#pragma unroll", d + 1)
                self.emit(f"for (int pf_f = 0; pf_f < {count}; pf_f += {v}) "
                          f"pf_load16({tile}[{stage}][pf_kq + pf_u][{self._local(side, 'pf_f')}], &{name}[pf_u][pf_f]);", d + 1)
                self.emit("}", d)
                reads[r.access] = f"{name}[pf_u][{it}]"
            else:  # width x k: a run of k is contiguous for each of the thread's rows (lanes)
                self.emit(f"{ctype} {name}[{count}][{v}];", d)
                self.emit("#pragma unroll", d)
                self.emit(f"for (int pf_f = 0; pf_f < {count}; pf_f++) pf_load16({tile}[{stage}][{self._local(side, 'pf_f')}][pf_kq], &{name}[pf_f][0]);", d)
                reads[r.access] = f"{name}[{it}][pf_u]"
        value = value_text(stmt.value, None, self.dialect, {**invariant, **reads})
        self.emit("#pragma unroll", d)
        self.emit(f"for (int pf_u = 0; pf_u < {v}; pf_u++) {{", d)
        self.emit("#pragma unroll", d + 1)
        self.emit(f"for (int pf_r = 0; pf_r < {plan.thread_rows}; pf_r++) {{", d + 1)
        self.emit("#pragma unroll", d + 2)
        self.emit(f"for (int pf_c = 0; pf_c < {plan.thread_lanes}; pf_c++) pf_acc[pf_r][pf_c] {stmt.op} {value};  /* {stmt.name} */", d + 2)
        self.emit("}", d + 1)
        self.emit("}", d)
        self.emit("}", depth)

    def _fragment_step(self, fragments: list[tuple[str, str, str, int, int]], value: str, d: int) -> None:
        """One value of k (``pf_kk``): the thread's fragments (``vector`` elements per load where it is not
        0, else element by element), then its updates."""
        plan, stmt = self.plan, self.stmt
        for name, ctype, element, count, vector in fragments:
            self.emit(f"{ctype} {name}[{count}];", d)
            self.emit("#pragma unroll", d)
            if vector:
                self.emit(f"for (int pf_f = 0; pf_f < {count}; pf_f += {vector}) pf_load16({element}, &{name}[pf_f]);", d)
            else:
                self.emit(f"for (int pf_f = 0; pf_f < {count}; pf_f++) {name}[pf_f] = {element};", d)
        self.emit("#pragma unroll", d)
        self.emit(f"for (int pf_r = 0; pf_r < {plan.thread_rows}; pf_r++) {{", d)
        self.emit("#pragma unroll", d + 1)
        self.emit(f"for (int pf_c = 0; pf_c < {plan.thread_lanes}; pf_c++) pf_acc[pf_r][pf_c] {stmt.op} {value};  /* {stmt.name} */", d + 1)
        self.emit("}", d)


def _plus(origin: str, index: str, ctype: str = "long long") -> str:
    return f"({ctype}) {index}" if origin in ("0", "") else f"{as_operand(origin)} + ({ctype}) {index}"


def launch_bounds(plan: CudaMicroTile, reassociate: bool = True) -> str:
    """``__launch_bounds__`` of the kernel: its block size, and the plan's minimum of blocks an SM where the
    sums are reassociated (the accumulators start at 0). Without reassociation each accumulator starts from
    its element, whose addresses ptxas then keeps live across the reduction: under the tall tile's bound of
    64 registers it spilled 12 bytes, so that form gets the block size only. ``tests/test_cuda_micro.py``
    holds the registers, spills and occupancy of both forms to this."""
    threads = plan.threads[0] * plan.threads[1]
    if plan.min_blocks and reassociate:
        return f"__launch_bounds__({threads}, {plan.min_blocks}) "
    return f"__launch_bounds__({threads}) "
