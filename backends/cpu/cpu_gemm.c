/*
 * cpu_gemm.c: the blocked fp32 tile product (see cpu_kernels.h), compiled once per instruction set.
 *
 * Written as plain C the vectoriser understands: a block of 4 rows x NR columns of C is held in
 * four separate accumulator arrays (one array per row, so the compiler keeps them in vector
 * registers instead of memory), and each B row loaded once feeds all four rows. NR is a constant
 * after inlining (64, then 16, then the rest), which lets the loops over it unroll completely.
 */
#include "cpu_kernels.h"

#define ROWS 4
#define WIDE 64
#define NARROW 16

static inline void block_4rows(const int nr, int k, const float *restrict a, ptrdiff_t rs_a,
                               ptrdiff_t cs_a, const float *restrict b, ptrdiff_t ldb,
                               float *restrict c, ptrdiff_t ldc, int accumulate) {
  float c0[WIDE], c1[WIDE], c2[WIDE], c3[WIDE];
  for (int j = 0; j < nr; ++j) {
    c0[j] = accumulate ? c[j] : 0.0f;
    c1[j] = accumulate ? c[ldc + j] : 0.0f;
    c2[j] = accumulate ? c[2 * ldc + j] : 0.0f;
    c3[j] = accumulate ? c[3 * ldc + j] : 0.0f;
  }
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    const float *ap = a + p * cs_a;
    float a0 = ap[0], a1 = ap[rs_a], a2 = ap[2 * rs_a], a3 = ap[3 * rs_a];
    for (int j = 0; j < nr; ++j) {
      float bj = bp[j];
      c0[j] += a0 * bj;
      c1[j] += a1 * bj;
      c2[j] += a2 * bj;
      c3[j] += a3 * bj;
    }
  }
  for (int j = 0; j < nr; ++j) {
    c[j] = c0[j];
    c[ldc + j] = c1[j];
    c[2 * ldc + j] = c2[j];
    c[3 * ldc + j] = c3[j];
  }
}

/* The last m % 4 rows: same per-element summation order as block_4rows. */
static void block_1row(int nr, int k, const float *restrict a, ptrdiff_t cs_a,
                       const float *restrict b, ptrdiff_t ldb, float *restrict c, int accumulate) {
  float acc[WIDE];
  for (int j = 0; j < nr; ++j) acc[j] = accumulate ? c[j] : 0.0f;
  for (int p = 0; p < k; ++p) {
    float ap = a[p * cs_a];
    const float *restrict bp = b + p * ldb;
    for (int j = 0; j < nr; ++j) acc[j] += ap * bp[j];
  }
  for (int j = 0; j < nr; ++j) c[j] = acc[j];
}

void CPU_KFN(gemm)(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a,
                   const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  int i0 = 0;
  for (; i0 + ROWS <= m; i0 += ROWS) {
    const float *ai = a + i0 * rs_a;
    float *ci = c + i0 * ldc;
    int j0 = 0;
    for (; j0 + WIDE <= n; j0 += WIDE)
      block_4rows(WIDE, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
    for (; j0 + NARROW <= n; j0 += NARROW)
      block_4rows(NARROW, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
    if (j0 < n) block_4rows(n - j0, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
  }
  for (; i0 < m; ++i0)
    for (int j0 = 0; j0 < n; j0 += WIDE)
      block_1row(n - j0 < WIDE ? n - j0 : WIDE, k, a + i0 * rs_a, cs_a, b + j0, ldb,
                 c + i0 * ldc + j0, accumulate);
}
