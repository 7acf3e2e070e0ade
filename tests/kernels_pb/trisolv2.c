/* A triangular solve with a scaled norm, written as a PolyBench/C 4.2.1 source file is: the kernel
 * header, <polybench.h>, static functions, POLYBENCH_*D parameters and array declarations, _PB_N bounds,
 * SCALAR_VAL/SQRT_FUN/POW_FUN, and a main that allocates, runs and frees. Written for polyfuse's tests. */
#include <stdio.h>
#include <unistd.h>
#include <string.h>
#include <math.h>

#include <polybench.h>
#include "trisolv2.h"

static void init_array(int n, DATA_TYPE POLYBENCH_2D(L, N, N, n, n), DATA_TYPE POLYBENCH_1D(x, N, n),
                       DATA_TYPE POLYBENCH_1D(b, N, n))
{
  int i, j;
  for (i = 0; i < n; i++) {
    x[i] = -999;
    b[i] = i;
    for (j = 0; j <= i; j++)
      L[i][j] = (DATA_TYPE) (i + n - j + 1) * 2 / n;
  }
}

static void kernel_trisolv2(int n, DATA_TYPE POLYBENCH_2D(L, N, N, n, n), DATA_TYPE POLYBENCH_1D(x, N, n),
                            DATA_TYPE POLYBENCH_1D(b, N, n), DATA_TYPE POLYBENCH_1D(norm, 1, 1))
{
  int i, j;
  DATA_TYPE scale = SCALAR_VAL(0.5);

#pragma scop
  for (i = 0; i < _PB_N; i++) {
    x[i] = b[i];
    for (j = 0; j < i; j++)
      x[i] -= L[i][j] * x[j];
    x[i] = x[i] / L[i][i];
  }
  norm[0] = SCALAR_VAL(0.0);
  for (i = 0; i < _PB_N; i++)
    norm[0] += POW_FUN(x[i], SCALAR_VAL(2.0));
  norm[0] = SQRT_FUN(norm[0]) * scale + x[_PB_N - 1];
#pragma endscop
}

int main(int argc, char **argv)
{
  int n = N;
  POLYBENCH_2D_ARRAY_DECL(L, DATA_TYPE, N, N, n, n);
  POLYBENCH_1D_ARRAY_DECL(x, DATA_TYPE, N, n);
  POLYBENCH_1D_ARRAY_DECL(b, DATA_TYPE, N, n);
  POLYBENCH_1D_ARRAY_DECL(norm, DATA_TYPE, 1, 1);

  init_array(n, POLYBENCH_ARRAY(L), POLYBENCH_ARRAY(x), POLYBENCH_ARRAY(b));
  polybench_start_instruments;
  kernel_trisolv2(n, POLYBENCH_ARRAY(L), POLYBENCH_ARRAY(x), POLYBENCH_ARRAY(b), POLYBENCH_ARRAY(norm));
  polybench_stop_instruments;
  polybench_print_instruments;
  polybench_prevent_dce(fprintf(stderr, DATA_PRINTF_MODIFIER, (*norm)[0]));

  POLYBENCH_FREE_ARRAY(L);
  POLYBENCH_FREE_ARRAY(x);
  POLYBENCH_FREE_ARRAY(b);
  POLYBENCH_FREE_ARRAY(norm);
  return 0;
}
