// expect: SourceError: cannot assign to the scalar parameter `alpha`
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  alpha = 2.0;
#pragma endscop
}
