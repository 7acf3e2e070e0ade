/* fdtd-2d: 2D finite-difference time-domain electromagnetics (Yee scheme)  (PolyBench/C 4.2.1 style). */
#include <math.h>

#ifndef TMAX
# define TMAX 20
#endif
#ifndef NX
# define NX 20
#endif
#ifndef NY
# define NY 30
#endif

#define DATA_TYPE double
#define SCALAR_VAL(x) x
#ifndef POLYBENCH_LOOP_BOUND
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#ifndef _PB_TMAX
# define _PB_TMAX POLYBENCH_LOOP_BOUND(TMAX, tmax)
#endif
#ifndef _PB_NX
# define _PB_NX POLYBENCH_LOOP_BOUND(NX, nx)
#endif
#ifndef _PB_NY
# define _PB_NY POLYBENCH_LOOP_BOUND(NY, ny)
#endif
#ifndef POLYBENCH_1D
# define POLYBENCH_1D(var, dim1, ddim1) var[ddim1]
#endif
#ifndef POLYBENCH_2D
# define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) var[ddim1][ddim2]
#endif

void kernel_fdtd_2d(int tmax, int nx, int ny,
                    DATA_TYPE POLYBENCH_2D(ex, NX, NY, nx, ny),
                    DATA_TYPE POLYBENCH_2D(ey, NX, NY, nx, ny),
                    DATA_TYPE POLYBENCH_2D(hz, NX, NY, nx, ny),
                    DATA_TYPE POLYBENCH_1D(_fict_, TMAX, tmax))
{
  int t, i, j;

#pragma scop
  for (t = 0; t < _PB_TMAX; t++) {
    for (j = 0; j < _PB_NY; j++)
      ey[0][j] = _fict_[t];
    for (i = 1; i < _PB_NX; i++)
      for (j = 0; j < _PB_NY; j++)
        ey[i][j] = ey[i][j] - SCALAR_VAL(0.5) * (hz[i][j] - hz[i - 1][j]);
    for (i = 0; i < _PB_NX; i++)
      for (j = 1; j < _PB_NY; j++)
        ex[i][j] = ex[i][j] - SCALAR_VAL(0.5) * (hz[i][j] - hz[i][j - 1]);
    for (i = 0; i < _PB_NX - 1; i++)
      for (j = 0; j < _PB_NY - 1; j++)
        hz[i][j] = hz[i][j] - SCALAR_VAL(0.7) * (ex[i][j + 1] - ex[i][j] + ey[i + 1][j] - ey[i][j]);
  }
#pragma endscop
}
