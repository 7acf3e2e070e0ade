"""The CUDA kernel of a column reduction (``schedule/mapping/column_reductions.py`` states the plan and
why): 32 columns by 8 row slices a block, the rows shared cyclically by ``threadIdx.y`` and ``blockIdx.y``,
a register sum per thread, the block's 8 partial sums of a column added in shared memory, and one
``atomicAdd`` per column and block into the element (which the kernels before it initialised)."""

from __future__ import annotations

import islpy as isl

from polyfuse.codegen.ast import PYTHON
from polyfuse.codegen.cuda_micro import flat_index, iterator_bounds
from polyfuse.codegen.cuda_values import value_text
from polyfuse.ir.expr import Read, ScalarArg
from polyfuse.ir.program import Program
from polyfuse.schedule.mapping.column_reductions import LANES, SLICES, ColumnReduction

COLUMN, ROW = "pf_j", "pf_i"


def column_kernel(program: Program, plan: ColumnReduction, dialect, context: isl.Set | None
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
    lines = [
        f"  __shared__ {ctype} pf_part[{SLICES}][{LANES + 1}];  /* the block's partial sums, a column per threadIdx.x */",
        f"  const long long pf_j_lo = {jlo}, pf_j_hi = {jhi};  /* {plan.column} */",
        f"  const long long pf_i_lo = {ilo}, pf_i_hi = {ihi};  /* {plan.row} */",
        f"  const long long {COLUMN} = pf_j_lo + {LANES} * (long long) blockIdx.x + (long long) threadIdx.x;",
        f"  {ctype} pf_acc = ({ctype}) 0;",
        f"  if ({COLUMN} <= pf_j_hi) {{",
        f"    for (long long {ROW} = pf_i_lo + (long long) blockIdx.y * {SLICES} + (long long) threadIdx.y; {ROW} <= pf_i_hi; "
        f"{ROW} += (long long) gridDim.y * {SLICES}) {{",
        f"      pf_acc += {value};  /* {stmt.name}, this thread's rows */",
        "    }",
        "  }",
        "  pf_part[threadIdx.y][threadIdx.x] = pf_acc;",
        "  __syncthreads();  /* every partial sum of the block is in pf_part */",
        f"  if (threadIdx.y == 0 && {COLUMN} <= pf_j_hi) {{",
        f"    {ctype} pf_sum = pf_part[0][threadIdx.x];",
        f"    for (int pf_y = 1; pf_y < {SLICES}; pf_y++) pf_sum += pf_part[pf_y][threadIdx.x];",
        f"    atomicAdd({stmt.write.array} + ({target}), pf_sum);  /* {stmt.name}: the block's share of the column */",
        "  }",
    ]
    arrays: dict[str, bool] = {}
    for k, a in enumerate(stmt.accesses):
        arrays[a.array] = arrays.get(a.array, False) or k == stmt.target
    for n in plan.increment.walk():
        if isinstance(n, Read):
            arrays.setdefault(stmt.accesses[n.access].array, False)
    scalars = {n.name for n in plan.increment.walk() if isinstance(n, ScalarArg)}
    plo, phi = iterator_bounds(program, stmt, plan.column, context, PYTHON)
    grid = (f"max(0, (({phi}) - ({plo})) // {LANES} + 1)", str(plan.slices))
    return lines, arrays, scalars, grid
