// expect: SourceError: goto is not allowed
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  goto out;
#pragma endscop
}
