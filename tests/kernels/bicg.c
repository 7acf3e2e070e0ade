/* bicg: the BiCG sub-kernel, s := A^T r and q := A p in one sweep  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef M
# define M 38
#endif
#ifndef N
# define N 42
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
#ifndef POLYBENCH_1D
# define POLYBENCH_1D(var, dim1, ddim1) var[ddim1]
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_bicg(int m, int n,
                 DATA_TYPE POLYBENCH_2D(A, N, M, n, m),
                 DATA_TYPE POLYBENCH_1D(s, M, m),
                 DATA_TYPE POLYBENCH_1D(q, N, n),
                 DATA_TYPE POLYBENCH_1D(p, M, m),
                 DATA_TYPE POLYBENCH_1D(r, N, n))
{
  int i, j;

#pragma scop
  for (i = 0; i < _PB_M; i++)
    s[i] = 0;
  for (i = 0; i < _PB_N; i++) {
    q[i] = SCALAR_VAL(0.0);
    for (j = 0; j < _PB_M; j++) {
      s[j] = s[j] + r[i] * A[i][j];
      q[i] = q[i] + A[i][j] * p[j];
    }
  }
#pragma endscop
}
