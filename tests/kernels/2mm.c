/* 2mm: D := alpha*A*B*C + beta*D through tmp := alpha*A*B  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef NI
# define NI 16
#endif
#ifndef NJ
# define NJ 18
#endif
#ifndef NK
# define NK 22
#endif
#ifndef NL
# define NL 24
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
#ifndef _PB_NL
# define _PB_NL POLYBENCH_LOOP_BOUND(NL, nl)
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_2mm(int ni, int nj, int nk, int nl,
                DATA_TYPE alpha,
                DATA_TYPE beta,
                DATA_TYPE POLYBENCH_2D(tmp, NI, NJ, ni, nj),
                DATA_TYPE POLYBENCH_2D(A, NI, NK, ni, nk),
                DATA_TYPE POLYBENCH_2D(B, NK, NJ, nk, nj),
                DATA_TYPE POLYBENCH_2D(C, NJ, NL, nj, nl),
                DATA_TYPE POLYBENCH_2D(D, NI, NL, ni, nl))
{
  int i, j, k;

#pragma scop
  for (i = 0; i < _PB_NI; i++)
    for (j = 0; j < _PB_NJ; j++) {
      tmp[i][j] = SCALAR_VAL(0.0);
      for (k = 0; k < _PB_NK; ++k)
        tmp[i][j] += alpha * A[i][k] * B[k][j];
    }
  for (i = 0; i < _PB_NI; i++)
    for (j = 0; j < _PB_NL; j++) {
      D[i][j] *= beta;
      for (k = 0; k < _PB_NJ; ++k)
        D[i][j] += tmp[i][k] * C[k][j];
    }
#pragma endscop
}
