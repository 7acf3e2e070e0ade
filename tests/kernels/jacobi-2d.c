/* jacobi-2d: TSTEPS sweeps of a 5-point average, ping-ponging between A and B  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef TSTEPS
# define TSTEPS 20
#endif
#ifndef N
# define N 30
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

void kernel_jacobi_2d(int tsteps, int n,
                      DATA_TYPE POLYBENCH_2D(A, N, N, n, n),
                      DATA_TYPE POLYBENCH_2D(B, N, N, n, n))
{
  int t, i, j;

#pragma scop
  for (t = 0; t < _PB_TSTEPS; t++) {
    for (i = 1; i < _PB_N - 1; i++)
      for (j = 1; j < _PB_N - 1; j++)
        B[i][j] = SCALAR_VAL(0.2) * (A[i][j] + A[i][j - 1] + A[i][1 + j] + A[1 + i][j] + A[i - 1][j]);
    for (i = 1; i < _PB_N - 1; i++)
      for (j = 1; j < _PB_N - 1; j++)
        A[i][j] = SCALAR_VAL(0.2) * (B[i][j] + B[i][j - 1] + B[i][1 + j] + B[1 + i][j] + B[i - 1][j]);
  }
#pragma endscop
}
