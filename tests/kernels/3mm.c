/* 3mm: G := (A*B)*(C*D) through E := A*B and F := C*D  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef NI
# define NI 16
#endif
#ifndef NJ
# define NJ 18
#endif
#ifndef NK
# define NK 20
#endif
#ifndef NL
# define NL 22
#endif
#ifndef NM
# define NM 24
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
#ifndef _PB_NM
# define _PB_NM POLYBENCH_LOOP_BOUND(NM, nm)
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_3mm(int ni, int nj, int nk, int nl, int nm,
                DATA_TYPE POLYBENCH_2D(E, NI, NJ, ni, nj),
                DATA_TYPE POLYBENCH_2D(A, NI, NK, ni, nk),
                DATA_TYPE POLYBENCH_2D(B, NK, NJ, nk, nj),
                DATA_TYPE POLYBENCH_2D(F, NJ, NL, nj, nl),
                DATA_TYPE POLYBENCH_2D(C, NJ, NM, nj, nm),
                DATA_TYPE POLYBENCH_2D(D, NM, NL, nm, nl),
                DATA_TYPE POLYBENCH_2D(G, NI, NL, ni, nl))
{
  int i, j, k;

#pragma scop
  /* E := A*B */
  for (i = 0; i < _PB_NI; i++)
    for (j = 0; j < _PB_NJ; j++) {
      E[i][j] = SCALAR_VAL(0.0);
      for (k = 0; k < _PB_NK; ++k)
        E[i][j] += A[i][k] * B[k][j];
    }
  /* F := C*D */
  for (i = 0; i < _PB_NJ; i++)
    for (j = 0; j < _PB_NL; j++) {
      F[i][j] = SCALAR_VAL(0.0);
      for (k = 0; k < _PB_NM; ++k)
        F[i][j] += C[i][k] * D[k][j];
    }
  /* G := E*F */
  for (i = 0; i < _PB_NI; i++)
    for (j = 0; j < _PB_NL; j++) {
      G[i][j] = SCALAR_VAL(0.0);
      for (k = 0; k < _PB_NJ; ++k)
        G[i][j] += E[i][k] * F[k][j];
    }
#pragma endscop
}
