// expect: SourceError: a while loop is not allowed
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  while (n > 0)
    B[0] = 1.0;
#pragma endscop
}
