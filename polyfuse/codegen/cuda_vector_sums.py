"""The CUDA kernel of a sum into a vector (``schedule/mapping/vector_sums.py`` states the plans and
why). Columns: 32 elements by 8 slices of the summed loop a block, the slices shared cyclically by
``threadIdx.y`` and ``blockIdx.y``, a register sum per thread, the block's 8 partial sums of an element
added in shared memory, and one ``atomicAdd`` per element and block (the kernels before it initialised the
element). Rows: a warp per element, its lanes sharing the summed loop, a shuffle adding their sums, lane 0
adding the total to the element."""

from __future__ import annotations

import islpy as isl

from polyfuse.codegen.ast import PYTHON
from polyfuse.codegen.cuda_accesses import flat_index, iterator_bounds, statement_arrays
from polyfuse.codegen.cuda_values import value_text
from polyfuse.ir.expr import ScalarArg
from polyfuse.ir.program import Program
from polyfuse.schedule.mapping.vector_sums import LANES, SLICES, VectorSum

COLUMN, ROW = "pf_j", "pf_i"


def vector_sum_kernel(program: Program, plan: VectorSum, dialect, context: isl.Set | None
                  ) -> tuple[list[str], dict[str, bool], set[str], tuple[str, str]]:
    """The kernel body's lines (one level of indentation), the arrays it touches (name -> written), the
    scalar arguments it reads, and the launch's grid as Python expressions over the sizes (x, y)."""
    stmt = program.statement(plan.statement)
    names = stmt.iterators
    var = {names.index(plan.column): COLUMN, names.index(plan.row): ROW}
    ctype = program.arrays[stmt.write.array].dtype.c_name
    (jlo, jhi), (ilo, ihi) = (iterator_bounds(program, stmt, it, context, dialect) for it in (plan.column, plan.row))
    reads = {k: f"{a.array}[{flat_index(program, stmt, k, var, dialect)}]" for k, a in enumerate(stmt.accesses) if k != stmt.target}
    value = value_text(plan.increment, None, dialect, reads)
    target = flat_index(program, stmt, stmt.target, var, dialect)
    if plan.layout == "rows":
        lines = _rows(stmt.name, ctype, (jlo, jhi), (ilo, ihi), value, f"{stmt.write.array}[{target}]")
    else:
        lines = _columns(stmt.name, ctype, (jlo, jhi), (ilo, ihi), value, stmt.write.array, target)
    arrays = statement_arrays(stmt)
    scalars = {n.name for n in plan.increment.walk() if isinstance(n, ScalarArg)}
    plo, phi = iterator_bounds(program, stmt, plan.column, context, PYTHON)
    per_block = SLICES if plan.layout == "rows" else LANES
    grid = (f"max(0, (({phi}) - ({plo})) // {per_block} + 1)", "1" if plan.layout == "rows" else str(plan.slices))
    return lines, arrays, scalars, grid


def _rows(name: str, ctype: str, column: tuple[str, str], row: tuple[str, str], value: str, target: str) -> list[str]:
    """A warp per element (``threadIdx.y``), its lanes (``threadIdx.x``) sharing the summed loop."""
    return [
        f"  const long long pf_j_lo = {column[0]}, pf_j_hi = {column[1]};  /* the element's loop */",
        f"  const long long pf_i_lo = {row[0]}, pf_i_hi = {row[1]};  /* the loop summed over */",
        f"  const long long {COLUMN} = pf_j_lo + {SLICES} * (long long) blockIdx.x + (long long) threadIdx.y;",
        f"  {ctype} pf_acc = ({ctype}) 0;",
        f"  if ({COLUMN} <= pf_j_hi) {{",
        f"    for (long long {ROW} = pf_i_lo + (long long) threadIdx.x; {ROW} <= pf_i_hi; {ROW} += {LANES}) {{",
        f"      pf_acc += {value};  /* {name}, this lane's terms */",
        "    }",
        "  }",
        "  for (int pf_o = 16; pf_o > 0; pf_o >>= 1) pf_acc += __shfl_xor_sync(0xffffffffu, pf_acc, pf_o);  /* every lane */",
        f"  if (threadIdx.x == 0 && {COLUMN} <= pf_j_hi) {target} = {target} + pf_acc;  /* {name}: the warp's total */",
    ]


def _columns(name: str, ctype: str, column: tuple[str, str], row: tuple[str, str], value: str, array: str, target: str) -> list[str]:
    """32 elements (``threadIdx.x``) by 8 slices (``threadIdx.y``) of the summed loop a block."""
    (jlo, jhi), (ilo, ihi), stmt_name = column, row, name
    return [
        f"  __shared__ {ctype} pf_part[{SLICES}][{LANES + 1}];  /* the block's partial sums, a column per threadIdx.x */",
        f"  const long long pf_j_lo = {jlo}, pf_j_hi = {jhi};  /* the element's loop */",
        f"  const long long pf_i_lo = {ilo}, pf_i_hi = {ihi};  /* the loop summed over */",
        f"  const long long {COLUMN} = pf_j_lo + {LANES} * (long long) blockIdx.x + (long long) threadIdx.x;",
        f"  {ctype} pf_acc = ({ctype}) 0;",
        f"  if ({COLUMN} <= pf_j_hi) {{",
        f"    for (long long {ROW} = pf_i_lo + (long long) blockIdx.y * {SLICES} + (long long) threadIdx.y; {ROW} <= pf_i_hi; "
        f"{ROW} += (long long) gridDim.y * {SLICES}) {{",
        f"      pf_acc += {value};  /* {stmt_name}, this thread's rows */",
        "    }",
        "  }",
        "  pf_part[threadIdx.y][threadIdx.x] = pf_acc;",
        "  __syncthreads();  /* every partial sum of the block is in pf_part */",
        f"  if (threadIdx.y == 0 && {COLUMN} <= pf_j_hi) {{",
        f"    {ctype} pf_sum = pf_part[0][threadIdx.x];",
        f"    for (int pf_y = 1; pf_y < {SLICES}; pf_y++) pf_sum += pf_part[pf_y][threadIdx.x];",
        f"    atomicAdd({array} + ({target}), pf_sum);  /* {stmt_name}: the block's share of the column */",
        "  }",
    ]
