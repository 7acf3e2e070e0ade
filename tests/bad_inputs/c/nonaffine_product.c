// expect: SourceError: `i * j` is not affine
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    for (j = 0; j < n; j++)
      B[i * j] = 0.0;
#pragma endscop
}
