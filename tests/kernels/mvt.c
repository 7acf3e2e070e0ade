/* mvt: x1 := x1 + A y_1 and x2 := x2 + A^T y_2  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef N
# define N 40
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_N
# define _PB_N POLYBENCH_LOOP_BOUND(N, n)
#endif
#ifndef POLYBENCH_1D
# define POLYBENCH_1D(var, dim1, ddim1) var[ddim1]
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_mvt(int n,
                DATA_TYPE POLYBENCH_1D(x1, N, n),
                DATA_TYPE POLYBENCH_1D(x2, N, n),
                DATA_TYPE POLYBENCH_1D(y_1, N, n),
                DATA_TYPE POLYBENCH_1D(y_2, N, n),
                DATA_TYPE POLYBENCH_2D(A, N, N, n, n))
{
  int i, j;

#pragma scop
  for (i = 0; i < _PB_N; i++)
    for (j = 0; j < _PB_N; j++)
      x1[i] = x1[i] + A[i][j] * y_1[j];
  for (i = 0; i < _PB_N; i++)
    for (j = 0; j < _PB_N; j++)
      x2[i] = x2[i] + A[j][i] * y_2[j];
#pragma endscop
}
