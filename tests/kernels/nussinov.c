/* nussinov: RNA secondary-structure prediction by dynamic programming  (PolyBench/C 4.2.1 style).
 * `match` compares two bases (a data-dependent value, not a control condition) and `max_score` is a
 * data-dependent select; both are expressions, so the loop nest stays affine. PolyBench's `base` is
 * char; here it is int, the same values. */
#include <math.h>

#ifndef N
# define N 60
#endif

#define DATA_TYPE int
#define base int
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

#define match(b1, b2) (((b1) + (b2)) == 3 ? 1 : 0)
#define max_score(s1, s2) ((s1 >= s2) ? s1 : s2)

void kernel_nussinov(int n, base POLYBENCH_1D(seq, N, n),
                     DATA_TYPE POLYBENCH_2D(table, N, N, n, n))
{
  int i, j, k;

#pragma scop
  for (i = _PB_N - 1; i >= 0; i--) {
    for (j = i + 1; j < _PB_N; j++) {

      if (j - 1 >= 0)
        table[i][j] = max_score(table[i][j], table[i][j - 1]);
      if (i + 1 < _PB_N)
        table[i][j] = max_score(table[i][j], table[i + 1][j]);

      if (j - 1 >= 0 && i + 1 < _PB_N) {
        /* do not allow adjacent elements to bond */
        if (i < j - 1)
          table[i][j] = max_score(table[i][j], table[i + 1][j - 1] + match(seq[i], seq[j]));
        else
          table[i][j] = max_score(table[i][j], table[i + 1][j - 1]);
      }

      for (k = i + 1; k < j; k++) {
        table[i][j] = max_score(table[i][j], table[i][k] + table[k + 1][j]);
      }
    }
  }
#pragma endscop
}
