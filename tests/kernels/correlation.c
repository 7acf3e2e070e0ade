/* correlation: the correlation matrix of N observations of M attributes  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef M
# define M 28
#endif
#ifndef N
# define N 32
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#define SQRT_FUN(x) sqrt(x)
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

void kernel_correlation(int m, int n,
                        DATA_TYPE float_n,
                        DATA_TYPE POLYBENCH_2D(data, N, M, n, m),
                        DATA_TYPE POLYBENCH_2D(corr, M, M, m, m),
                        DATA_TYPE POLYBENCH_1D(mean, M, m),
                        DATA_TYPE POLYBENCH_1D(stddev, M, m))
{
  int i, j, k;
  DATA_TYPE eps;

#pragma scop
  eps = SCALAR_VAL(0.1);

  for (j = 0; j < _PB_M; j++) {
    mean[j] = SCALAR_VAL(0.0);
    for (i = 0; i < _PB_N; i++)
      mean[j] += data[i][j];
    mean[j] /= float_n;
  }

  for (j = 0; j < _PB_M; j++) {
    stddev[j] = SCALAR_VAL(0.0);
    for (i = 0; i < _PB_N; i++)
      stddev[j] += (data[i][j] - mean[j]) * (data[i][j] - mean[j]);
    stddev[j] /= float_n;
    stddev[j] = SQRT_FUN(stddev[j]);
    /* A near-zero standard deviation would blow up the division below: use 1.0 instead. */
    stddev[j] = stddev[j] <= eps ? SCALAR_VAL(1.0) : stddev[j];
  }

  /* Centre and reduce the column vectors. */
  for (i = 0; i < _PB_N; i++)
    for (j = 0; j < _PB_M; j++) {
      data[i][j] -= mean[j];
      data[i][j] /= SQRT_FUN(float_n) * stddev[j];
    }

  /* The correlation matrix, upper triangle mirrored to the lower. */
  for (i = 0; i < _PB_M - 1; i++) {
    corr[i][i] = SCALAR_VAL(1.0);
    for (j = i + 1; j < _PB_M; j++) {
      corr[i][j] = SCALAR_VAL(0.0);
      for (k = 0; k < _PB_N; k++)
        corr[i][j] += (data[k][i] * data[k][j]);
      corr[j][i] = corr[i][j];
    }
  }
  corr[_PB_M - 1][_PB_M - 1] = SCALAR_VAL(1.0);
#pragma endscop
}
