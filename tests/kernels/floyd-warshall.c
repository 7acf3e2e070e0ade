/* floyd-warshall: all-pairs shortest path lengths, in place  (PolyBench/C 4.2.1 style; int data). */
#include <math.h>

#ifndef N
# define N 60
#endif

#define DATA_TYPE int
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_N
# define _PB_N POLYBENCH_LOOP_BOUND(N, n)
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_floyd_warshall(int n,
                           DATA_TYPE POLYBENCH_2D(path, N, N, n, n))
{
  int i, j, k;

#pragma scop
  for (k = 0; k < _PB_N; k++) {
    for (i = 0; i < _PB_N; i++)
      for (j = 0; j < _PB_N; j++)
        path[i][j] = path[i][j] < path[i][k] + path[k][j] ?
            path[i][j] : path[i][k] + path[k][j];
  }
#pragma endscop
}
