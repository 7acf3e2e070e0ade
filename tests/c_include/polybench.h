/* A stand-in for PolyBench/C 4.2.1's polybench.h, for the gcc oracle of the tests (tests/c_oracle.py):
 * the macros a kernel function uses, with the distribution's meaning (C99 variable-length array
 * parameters; DATA_TYPE double unless a kernel says otherwise). Written for polyfuse's tests. */
#ifndef POLYFUSE_TEST_POLYBENCH_H
#define POLYFUSE_TEST_POLYBENCH_H
#include <math.h>

#ifndef DATA_TYPE
# define DATA_TYPE double
#endif
#ifndef SCALAR_VAL
# define SCALAR_VAL(x) x
#endif
#ifndef SQRT_FUN
# define SQRT_FUN(x) sqrt(x)
#endif
#ifndef EXP_FUN
# define EXP_FUN(x) exp(x)
#endif
#ifndef POW_FUN
# define POW_FUN(x, y) pow(x, y)
#endif
#ifdef POLYBENCH_USE_SCALAR_LB
# define POLYBENCH_LOOP_BOUND(x, y) x
#else
# define POLYBENCH_LOOP_BOUND(x, y) y
#endif
#define POLYBENCH_1D(var, d1, ds1) var[ds1]
#define POLYBENCH_2D(var, d1, d2, ds1, ds2) var[ds1][ds2]
#define POLYBENCH_3D(var, d1, d2, d3, ds1, ds2, ds3) var[ds1][ds2][ds3]
#define POLYBENCH_4D(var, d1, d2, d3, d4, ds1, ds2, ds3, ds4) var[ds1][ds2][ds3][ds4]
#define POLYBENCH_5D(var, d1, d2, d3, d4, d5, ds1, ds2, ds3, ds4, ds5) var[ds1][ds2][ds3][ds4][ds5]
#endif
