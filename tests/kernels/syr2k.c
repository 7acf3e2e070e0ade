/* syr2k: C := alpha*A*B^T + alpha*B*A^T + beta*C on the lower triangle  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef M
# define M 20
#endif
#ifndef N
# define N 30
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_M
# define _PB_M POLYBENCH_LOOP_BOUND(M, m)
#endif
#ifndef _PB_N
# define _PB_N POLYBENCH_LOOP_BOUND(N, n)
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_syr2k(int n, int m,
                  DATA_TYPE alpha,
                  DATA_TYPE beta,
                  DATA_TYPE POLYBENCH_2D(C, N, N, n, n),
                  DATA_TYPE POLYBENCH_2D(A, N, M, n, m),
                  DATA_TYPE POLYBENCH_2D(B, N, M, n, m))
{
  int i, j, k;

#pragma scop
  for (i = 0; i < _PB_N; i++) {
    for (j = 0; j <= i; j++)
      C[i][j] *= beta;
    for (k = 0; k < _PB_M; k++)
      for (j = 0; j <= i; j++) {
        C[i][j] += A[j][k] * alpha * B[i][k] + B[j][k] * alpha * A[i][k];
      }
  }
#pragma endscop
}
