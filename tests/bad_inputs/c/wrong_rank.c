// expect: SourceError: array `B` has 1 dimension but `B[i][i]` gives 2 subscripts
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    B[i][i] = 1.0;
#pragma endscop
}
