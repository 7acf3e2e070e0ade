/* jacobi-1d: TSTEPS sweeps of a 3-point average, ping-ponging between A and B  (PolyBench/C 4.2.1 style). */
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
#ifndef POLYBENCH_1D
# define POLYBENCH_1D(var, dim1, ddim1) var[ddim1]
#endif

void kernel_jacobi_1d(int tsteps, int n,
                      DATA_TYPE POLYBENCH_1D(A, N, n),
                      DATA_TYPE POLYBENCH_1D(B, N, n))
{
  int t, i;

#pragma scop
  for (t = 0; t < _PB_TSTEPS; t++) {
    for (i = 1; i < _PB_N - 1; i++)
      B[i] = SCALAR_VAL(0.33333) * (A[i - 1] + A[i] + A[i + 1]);
    for (i = 1; i < _PB_N - 1; i++)
      A[i] = SCALAR_VAL(0.33333) * (B[i - 1] + B[i] + B[i + 1]);
  }
#pragma endscop
}
