#include "cpu_gemm.h"

/* A register block of MR x NR accumulators: small enough to stay in vector registers on SSE2
   (x86-64's baseline), wide enough that each loaded B vector feeds MR multiply-adds. */
#define MR 4
#define NR 16

static inline void block_full(int k, const float *restrict a, ptrdiff_t rs_a, ptrdiff_t cs_a,
                              const float *restrict b, ptrdiff_t ldb, float *restrict c,
                              ptrdiff_t ldc, int accumulate) {
  float acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    const float *ap = a + p * cs_a;
    for (int r = 0; r < MR; ++r) {
      float ar = ap[r * rs_a];
      for (int j = 0; j < NR; ++j) acc[r][j] += ar * bp[j];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) c[r * ldc + j] = acc[r][j];
}

/* Any block up to MR x NR (the right and bottom edges), same summation order as block_full. */
static void block_edge(int mr, int nr, int k, const float *restrict a, ptrdiff_t rs_a,
                       ptrdiff_t cs_a, const float *restrict b, ptrdiff_t ldb, float *restrict c,
                       ptrdiff_t ldc, int accumulate) {
  float acc[MR][NR];
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    const float *ap = a + p * cs_a;
    for (int r = 0; r < mr; ++r) {
      float ar = ap[r * rs_a];
      for (int j = 0; j < nr; ++j) acc[r][j] += ar * bp[j];
    }
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) c[r * ldc + j] = acc[r][j];
}

void cpu_gemm(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a, const float *b,
              ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  for (int i0 = 0; i0 < m; i0 += MR) {
    int mr = m - i0 < MR ? m - i0 : MR;
    const float *ai = a + i0 * rs_a;
    float *ci = c + i0 * ldc;
    int j0 = 0;
    if (mr == MR)
      for (; j0 + NR <= n; j0 += NR)
        block_full(k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
    for (; j0 < n; j0 += NR) {
      int nr = n - j0 < NR ? n - j0 : NR;
      block_edge(mr, nr, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
    }
  }
}
