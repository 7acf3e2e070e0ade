// expect: SourceError: needs a non-zero integer constant
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    B[i % n] = 1.0;
#pragma endscop
}
