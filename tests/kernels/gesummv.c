/* gesummv: y := alpha A x + beta B x  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef N
# define N 30
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

void kernel_gesummv(int n,
                    DATA_TYPE alpha,
                    DATA_TYPE beta,
                    DATA_TYPE POLYBENCH_2D(A, N, N, n, n),
                    DATA_TYPE POLYBENCH_2D(B, N, N, n, n),
                    DATA_TYPE POLYBENCH_1D(tmp, N, n),
                    DATA_TYPE POLYBENCH_1D(x, N, n),
                    DATA_TYPE POLYBENCH_1D(y, N, n))
{
  int i, j;

#pragma scop
  for (i = 0; i < _PB_N; i++) {
    tmp[i] = SCALAR_VAL(0.0);
    y[i] = SCALAR_VAL(0.0);
    for (j = 0; j < _PB_N; j++) {
      tmp[i] = A[i][j] * x[j] + tmp[i];
      y[i] = B[i][j] * x[j] + y[i];
    }
    y[i] = alpha * tmp[i] + beta * y[i];
  }
#pragma endscop
}
