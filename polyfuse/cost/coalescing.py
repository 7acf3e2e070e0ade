"""Memory transactions of a CUDA tile's global accesses: 32-byte sectors per warp (coalescing).

The traffic model (``footprint.py``) counts the distinct *bytes* a tile moves; a GPU moves whole 32-byte
sectors, and a warp instruction (32 consecutive ``threadIdx.x``) costs one transaction per distinct sector
its lanes touch. A transpose ``B[j, i] = A[i, j]`` with ``threadIdx.x`` on ``j`` moves the same bytes as a
copy, but each warp store touches 32 sectors (4 useful bytes in each) where the copy's touches 4. The tile
search (``search.py``) ranks shapes by these *sector bytes*; the traffic report keeps meaning bytes.

For one access, with ``time: instance -> (p, m, s)`` (the prefix above the kernel band, the band members
with ``threadIdx.x`` on member ``x``, the schedule below), :func:`access_steps` reads off with isl the
address step between neighbouring threads: ``addr(t + e_x) - addr(t)`` in elements of the row-major array
at the given sizes (and the same along ``threadIdx.y`` for warps that span several rows). :func:`warp_sectors`
counts the sectors one warp instruction touches for such steps, exactly, by listing its lanes' addresses
(warp start on a sector boundary). How a tile is charged (``array_factor``):

* an array the promotion pass stages in shared memory (reused, or transposed with a box row of at least one
  sector: ``schedule/movement/shared.py``) moves by copy loops with consecutive threads on consecutive addresses,
  one box row at a time: ``ceil(row bytes / 32)`` sectors per row, i.e. the factor ``32 ceil(w b / 32) / (w b)``
  for a row of ``w`` elements of ``b`` bytes;
* an access left in global memory costs ``32 * sectors / (elements * b)`` per byte of footprint, the
  sectors and distinct elements of one warp instruction; a warp on a single element (a broadcast, step 0)
  costs one transaction for the whole warp and is charged its bytes (factor 1), like a coalesced access.

An array's factor is the largest over its accesses; its sector bytes are its exact bytes times the factor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.movement.access_patterns import walks_outer_dim
from polyfuse.schedule.movement.shared import SECTOR_BYTES

WARP = 32
LINE_BYTES = 128  # an L2 cache line: four sectors


@dataclass(frozen=True)
class AccessSteps:
    """How one access walks memory across neighbouring threads: ``x`` (``y``) is the address step in
    elements from thread ``threadIdx.x`` (``.y``) to the next one (the largest step in absolute value when
    it is not uniform, ``uniform`` then false; 0 when the threads never differ along that member);
    ``transposed`` is ``access_patterns.walks_outer_dim`` (the promotion pass stages such an array)."""

    statement: str
    array: str
    kind: str
    x: int
    y: int
    uniform: bool
    transposed: bool


def warp_sectors(step_x: int, lanes: int, itemsize: int, step_y: int = 0, rows: int = 1,
                 start: int = 0) -> tuple[int, int]:
    """``(sectors, elements)``: the distinct 32-byte sectors and distinct elements one warp instruction
    touches when lane ``(r, l)`` (row ``r < rows``, ``l < lanes``, ``rows * lanes <= 32``) accesses element
    ``start + r * step_y + l * step_x`` of ``itemsize`` bytes. Exact (the lanes are listed)."""
    addrs = {start + r * step_y + l * step_x for r in range(max(rows, 1)) for l in range(max(lanes, 1))}
    sectors: set[int] = set()
    for a in addrs:
        lo, hi = a * itemsize, a * itemsize + itemsize - 1
        sectors.update(range(lo // SECTOR_BYTES, hi // SECTOR_BYTES + 1))
    return len(sectors), len(addrs)


def row_factor(width: int, itemsize: int) -> Fraction:
    """Sector bytes per byte of a box row of ``width`` elements copied with consecutive threads on
    consecutive addresses (the row starting on a sector boundary)."""
    nbytes = max(width, 1) * itemsize
    return Fraction(-(-nbytes // SECTOR_BYTES) * SECTOR_BYTES, nbytes)


def warp_factor(steps: AccessSteps, lanes: int, rows: int, itemsize: int) -> Fraction:
    """Sector bytes per byte of footprint of an access left in global memory (module docstring)."""
    sectors, elements = warp_sectors(steps.x, lanes, itemsize, steps.y, rows)
    if elements <= 1:
        return Fraction(1)
    return max(Fraction(1), Fraction(sectors * SECTOR_BYTES, elements * itemsize))


def linear_address(prog: Program, array: str, sizes: Mapping[str, int]) -> isl.UnionMap:
    """``{ X[a0, .., ad] -> [a0 * e1 * .. * ed + .. + ad] }``: the row-major element offset at ``sizes``."""
    shape = prog.arrays[array].concrete_shape(sizes)
    names = [f"a{k}" for k in range(len(shape))]
    terms, stride = [], 1
    for k in reversed(range(len(shape))):
        terms.append(f"{stride}*{names[k]}")
        stride *= max(shape[k], 1)
    return isl.UnionMap(f"{{ {array}[{', '.join(names)}] -> [{' + '.join(terms) or '0'}] }}")


def access_steps(prog: Program, time: isl.UnionMap, x: int, y: int | None, fixed: isl.Set,
                 sizes: Mapping[str, int], skip: Iterable[str] = ()) -> list[AccessSteps]:
    """The steps of every access of the statements ``time`` schedules (``instance -> (p, m, s)``, member
    ``x`` to ``threadIdx.x``, ``y`` to ``threadIdx.y`` or ``None``), arrays in ``skip`` left out, at the
    sizes ``fixed`` (a params set) = ``sizes``."""
    time = time.intersect_params(fixed)
    names: list[str] = []
    time.domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    skip = set(skip)
    shifts = {q: _shift(time, q) for q in (x, y) if q is not None}
    out: list[AccessSteps] = []
    for name in sorted(names, key=lambda n: (len(n), n)):
        st = prog.statement(name)
        for a in st.accesses:
            if a.array in skip:
                continue
            acc = isl.UnionMap.from_map(a.relation).intersect_params(fixed)
            timed = time.reverse().apply_range(acc.apply_range(linear_address(prog, a.array, sizes)))
            sx, ux = _step(timed, shifts[x])
            sy, uy = _step(timed, shifts[y]) if y is not None else (0, True)
            out.append(AccessSteps(name, a.array, a.kind, sx, sy, ux and uy,
                                   walks_outer_dim(acc, time, x, fixed)))
    return out


def band_time(node: isl.ScheduleNode) -> tuple[isl.UnionMap, int]:
    """``instance -> (p, m, s)`` for the band at ``node`` (prefix, all its members, the subtree below) and
    the position of its first member in that vector."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    depth = _dims(prefix)
    time = prefix.flat_range_product(node.band_get_partial_schedule_union_map().intersect_domain(domain))
    child = node.child(0)
    if child.get_type() != isl.schedule_node_type.leaf:
        time = time.flat_range_product(child.get_subtree_schedule_union_map().intersect_domain(domain))
    return time, depth


def array_factor(steps: Sequence[AccessSteps], itemsize: int, lanes: int, rows: int,
                 staged_width: int | None) -> Fraction:
    """Sector bytes per byte of one array's footprint: the copy loops' row factor when it is staged
    (``staged_width``: the box's innermost extent), else the worst warp factor of its accesses."""
    if staged_width is not None:
        return row_factor(staged_width, itemsize)
    return max((warp_factor(s, lanes, rows, itemsize) for s in steps), default=Fraction(1))


# -- isl helpers -----------------------------------------------------------------------------------------


def _dims(umap: isl.UnionMap) -> int:
    spaces: list[int] = []
    umap.foreach_map(lambda m: spaces.append(m.dim(isl.dim_type.out)))
    return spaces[0] if spaces else 0


def _shift(time: isl.UnionMap, q: int) -> isl.UnionMap:
    """``{ v -> v + e_q }`` on the range spaces of ``time``."""
    out = None
    sets: list[isl.Set] = []
    time.range().foreach_set(sets.append)
    for s in sets:
        n = s.dim(isl.dim_type.set)
        src = ", ".join(f"v{k}" for k in range(n))
        dst = ", ".join(f"v{k} + 1" if k == q else f"v{k}" for k in range(n))
        m = isl.UnionMap(f"{{ [{src}] -> [{dst}] }}")
        out = m if out is None else out.union(m)
    return out if out is not None else isl.UnionMap("{ }")


def _step(timed: isl.UnionMap, shift: isl.UnionMap) -> tuple[int, bool]:
    """The address step ``addr(v + e_q) - addr(v)`` of ``timed`` (``v -> [addr]``): ``(step, uniform)``,
    the step of largest magnitude when several occur, 0 when no two neighbours exist."""
    pairs = timed.range_product(shift.apply_range(timed)).range()
    found: list[isl.Set] = []
    pairs.foreach_set(lambda s: found.append(s.unwrap().deltas()))
    lo_hi: list[int] = []
    for d in found:
        if d.is_empty():
            continue
        d = _drop_params(d)
        lo, hi = d.dim_min_val(0), d.dim_max_val(0)
        if not (lo.is_int() and hi.is_int()):
            return WARP * 1024, False  # unbounded steps: every lane on its own sector
        lo_hi += [int(lo.to_python()), int(hi.to_python())]
    if not lo_hi:
        return 0, True
    step = max(lo_hi, key=lambda v: (abs(v), v))
    return step, min(lo_hi) == max(lo_hi)


def _drop_params(s: isl.Set) -> isl.Set:
    n = s.dim(isl.dim_type.param)
    return s.project_out(isl.dim_type.param, 0, n) if n else s
