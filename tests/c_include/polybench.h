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
/* a main's arrays: pointers to heap arrays of the full extents, passed as *A */
#include <stdlib.h>
#define POLYBENCH_1D_ARRAY_DECL(var, type, d1, ds1) type (*var)[d1] = (type (*)[d1]) calloc((d1), sizeof(type))
#define POLYBENCH_2D_ARRAY_DECL(var, type, d1, d2, ds1, ds2) type (*var)[d1][d2] = (type (*)[d1][d2]) calloc((d1) * (d2), sizeof(type))
#define POLYBENCH_ARRAY(x) *x
#define POLYBENCH_FREE_ARRAY(x) free((void *) x)
#define polybench_start_instruments
#define polybench_stop_instruments
#define polybench_print_instruments
#define polybench_prevent_dce(x) x
#endif
