/* doitgen: A[r][q][:] := A[r][q][:] * C4, a multiresolution-analysis kernel  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef NQ
# define NQ 8
#endif
#ifndef NR
# define NR 10
#endif
#ifndef NP
# define NP 12
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_NQ
# define _PB_NQ POLYBENCH_LOOP_BOUND(NQ, nq)
#endif
#ifndef _PB_NR
# define _PB_NR POLYBENCH_LOOP_BOUND(NR, nr)
#endif
#ifndef _PB_NP
# define _PB_NP POLYBENCH_LOOP_BOUND(NP, np)
#endif
#ifndef POLYBENCH_1D
# define POLYBENCH_1D(var, dim1, ddim1) var[ddim1]
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif
#ifndef POLYBENCH_3D
# define POLYBENCH_3D(var, dim1, dim2, dim3, ddim1, ddim2, ddim3) var[ddim1][ddim2][ddim3]
#endif

void kernel_doitgen(int nr, int nq, int np,
                    DATA_TYPE POLYBENCH_3D(A, NR, NQ, NP, nr, nq, np),
                    DATA_TYPE POLYBENCH_2D(C4, NP, NP, np, np),
                    DATA_TYPE POLYBENCH_1D(sum, NP, np))
{
  int r, q, p, s;

#pragma scop
  for (r = 0; r < _PB_NR; r++)
    for (q = 0; q < _PB_NQ; q++) {
      for (p = 0; p < _PB_NP; p++) {
        sum[p] = SCALAR_VAL(0.0);
        for (s = 0; s < _PB_NP; s++)
          sum[p] += A[r][q][s] * C4[s][p];
      }
      for (p = 0; p < _PB_NP; p++)
        A[r][q][p] = sum[p];
    }
#pragma endscop
}
