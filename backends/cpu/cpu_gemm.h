/*
 * cpu_gemm.h: the one matrix product every tile step of the CPU kernels is made of.
 *
 * C[m x n] = (or +=) A·B over fp32 tiles in the plugin's scratch. B and C are row-major; A is
 * addressed as A(i, p) = a[i * rs_a + p * cs_a], so the same routine serves Q·Kᵀ (A row-major) and
 * Pᵀ·dO (A transposed) without copying.
 *
 * Every C element is summed in the same order, C's old value (or 0) then p = 0, 1, ..., k-1,
 * whatever the blocking, the tile sizes or the thread that runs it: results are bitwise
 * reproducible and scores recomputed in the backward pass equal the forward's.
 */
#ifndef FA_CPU_GEMM_H
#define FA_CPU_GEMM_H

#include <stddef.h>

void cpu_gemm(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a, const float *b,
              ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);

#endif /* FA_CPU_GEMM_H */
