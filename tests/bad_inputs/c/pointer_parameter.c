// expect: SourceError: `P` is a pointer
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    P[i] = 1.0;
#pragma endscop
}
