// expect: SourceError: `B[i]` reads an array
// function: k
#define N 64
void k(int n, double A[N][N], double B[N], double *P, double alpha) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    if (B[i] > 0.0) B[i] = 0.0;
#pragma endscop
}
