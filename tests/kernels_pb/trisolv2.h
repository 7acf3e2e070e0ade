/* Dataset sizes and data type of trisolv2.c, laid out as PolyBench/C 4.2.1's kernel headers are
 * (a dataset macro picks N; DATA_TYPE_IS_FLOAT / _DOUBLE pick the type and its math functions).
 * Written for polyfuse's tests. */
#ifndef _TRISOLV2_H
# define _TRISOLV2_H

# if !defined(MINI_DATASET) && !defined(SMALL_DATASET) && !defined(MEDIUM_DATASET) && !defined(LARGE_DATASET)
#  define SMALL_DATASET
# endif

# if !defined(N)
#  ifdef MINI_DATASET
#   define N 6
#  endif
#  ifdef SMALL_DATASET
#   define N 12
#  endif
#  ifdef MEDIUM_DATASET
#   define N 40
#  endif
#  ifdef LARGE_DATASET
#   define N 200
#  endif
# endif

# define _PB_N POLYBENCH_LOOP_BOUND(N, n)

# if !defined(DATA_TYPE_IS_INT) && !defined(DATA_TYPE_IS_FLOAT) && !defined(DATA_TYPE_IS_DOUBLE)
#  define DATA_TYPE_IS_DOUBLE
# endif

# ifdef DATA_TYPE_IS_FLOAT
#  define DATA_TYPE float
#  define DATA_PRINTF_MODIFIER "%0.2f "
#  define SCALAR_VAL(x) x##f
#  define SQRT_FUN(x) sqrtf(x)
#  define EXP_FUN(x) expf(x)
#  define POW_FUN(x,y) powf(x,y)
# endif

# ifdef DATA_TYPE_IS_DOUBLE
#  define DATA_TYPE double
#  define DATA_PRINTF_MODIFIER "%0.2lf "
#  define SCALAR_VAL(x) x
#  define SQRT_FUN(x) sqrt(x)
#  define EXP_FUN(x) exp(x)
#  define POW_FUN(x,y) pow(x,y)
# endif

#endif
