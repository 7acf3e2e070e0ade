/* gemm: C := alpha*A*B + beta*C  (PolyBench/C 4.2.1 style, written from the algorithm). */
#include <math.h>

#ifndef NI
# define NI 20
#endif
#ifndef NJ
# define NJ 25
#endif
#ifndef NK
# define NK 30
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_NI
# define _PB_NI POLYBENCH_LOOP_BOUND(NI, ni)
#endif
#ifndef _PB_NJ
# define _PB_NJ POLYBENCH_LOOP_BOUND(NJ, nj)
#endif
#ifndef _PB_NK
# define _PB_NK POLYBENCH_LOOP_BOUND(NK, nk)
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_gemm(int ni, int nj, int nk,
                 DATA_TYPE alpha,
                 DATA_TYPE beta,
                 DATA_TYPE POLYBENCH_2D(C, NI, NJ, ni, nj),
                 DATA_TYPE POLYBENCH_2D(A, NI, NK, ni, nk),
                 DATA_TYPE POLYBENCH_2D(B, NK, NJ, nk, nj))
{
  int i, j, k;

#pragma scop
  for (i = 0; i < _PB_NI; i++) {
    for (j = 0; j < _PB_NJ; j++)
      C[i][j] *= beta;
    for (k = 0; k < _PB_NK; k++) {
      for (j = 0; j < _PB_NJ; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
    }
  }
#pragma endscop
}
