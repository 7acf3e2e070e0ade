/* seidel-2d: TSTEPS in-place Gauss-Seidel sweeps of a 9-point average  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef TSTEPS
# define TSTEPS 20
#endif
#ifndef N
# define N 40
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_TSTEPS
# define _PB_TSTEPS POLYBENCH_LOOP_BOUND(TSTEPS, tsteps)
#endif
#ifndef _PB_N
# define _PB_N POLYBENCH_LOOP_BOUND(N, n)
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_seidel_2d(int tsteps, int n,
                      DATA_TYPE POLYBENCH_2D(A, N, N, n, n))
{
  int t, i, j;

#pragma scop
  for (t = 0; t <= _PB_TSTEPS - 1; t++)
    for (i = 1; i <= _PB_N - 2; i++)
      for (j = 1; j <= _PB_N - 2; j++)
        A[i][j] = (A[i - 1][j - 1] + A[i - 1][j] + A[i - 1][j + 1]
                   + A[i][j - 1] + A[i][j] + A[i][j + 1]
                   + A[i + 1][j - 1] + A[i + 1][j] + A[i + 1][j + 1]) / SCALAR_VAL(9.0);
#pragma endscop
}
