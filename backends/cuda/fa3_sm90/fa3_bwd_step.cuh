/*
 * fa3_bwd_step.cuh: the pieces of a FlashAttention-3 backward step that a consumer runs between
 * its wgmmas: Pᵀ from the LSE (masked), dSᵀ = Pᵀ ∘ (dPᵀ − D), dS written for dQ's wgmma, K and V
 * as register fragments, the products with A from registers, and the rows that need no mask.
 */
#ifndef FA_CUDA_FA3_BWD_STEP_CUH
#define FA_CUDA_FA3_BWD_STEP_CUH

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "../common/sm90_wgmma.cuh"
#include "core/math/backward.h"
#include "core/math/mask.h"

/* Writes a consumer's dSᵀ, packed as the A fragments of dK += dSᵀ Q (dsa[kk][i]: keys 16 warp +
   lane / 4 + 8 (i & 1), queries 16 kk + 8 (i >> 1) + 2 (lane % 4) and + 1), as dS into its 64 x 64
   half of the stage's tile: rows = queries, keys along the row, 128-byte swizzled, the K-major A
   operand of dQ = dS K. Each register is one 8 x 8 matrix of the fragment layout (8 keys x 8
   queries) whose transpose is 8 query rows of one 16-byte chunk (the warp's 8 keys): one
   stmatrix.trans per kk, lanes 8i..8i+7 addressing matrix i's rows, chunks spread over the banks
   by the swizzle. */
__device__ __forceinline__ void fa3_bwd_store_ds(const uint32_t (&dsa)[4][4], uint32_t tile,
                                                 int warp, int lane) {
  const int i = lane >> 3, r = lane & 7;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int q = 16 * kk + 8 * (i >> 1) + r;
    stmatrix_x4_trans(tile + q * 128 + (((2 * warp + (i & 1)) ^ r) << 4), dsa[kk]);
  }
}

/* Pᵀ into s for one consumer's 64 keys (rows of the accumulator) and NQ query rows m0..
   (columns), the rows' LSE from the stage's slots (lsed: their NQ LSEs, and 64 floats on their
   Ds). Padded rows have LSE +inf (P = 0). MASKED: keys past seqlen_k or outside a row's range
   get P = 0 (core/math/mask.h); steps whose rows all see all 64 keys skip the test. */
template <bool MASKED, int NQ>
__device__ __forceinline__ void fa3_bwd_p(float (&s)[NQ / 2], const float *lsed, float sl2,
                                          const fa_mask &mask, int m0, int key0, int seqlen_k,
                                          int warp, int g, int t) {
#pragma unroll
  for (int j = 0; j < NQ / 8; ++j) {
    const float2 l2 = *reinterpret_cast<const float2 *>(lsed + 8 * j + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float p = fast_exp2(s[4 * j + e] * sl2 - ((e & 1) ? l2.y : l2.x));
      if (MASKED && !fa_mask_allows(&mask, m0 + 8 * j + 2 * t + (e & 1),
                                    key0 + 16 * warp + g + 8 * (e >> 1), seqlen_k))
        p = 0.0f;
      s[4 * j + e] = p;
    }
  }
}

/* dSᵀ = Pᵀ ∘ (dPᵀ − D) into dp (core/math/backward.h), D from the stage's slots (as fa3_bwd_p's).
 */
template <int NQ>
__device__ __forceinline__ void fa3_bwd_ds(const float (&p)[NQ / 2], float (&dp)[NQ / 2],
                                           const float *lsed, int t) {
#pragma unroll
  for (int j = 0; j < NQ / 8; ++j) {
    const float2 d2 = *reinterpret_cast<const float2 *>(lsed + 64 + 8 * j + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dp[4 * j + e] = fa_bwd_ds(p[4 * j + e], dp[4 * j + e], (e & 1) ? d2.y : d2.x);
  }
}

/* A consumer's 64 keys of K (or V) as wgmma A fragments (kk: 16 columns; the layout of
   fa3_pack_p's), from the 128-byte swizzled tile: ldmatrix.x4 with lanes 8i..8i+7 addressing the
   rows of matrix i (rows + 8 (i & 1), columns + 8 (i >> 1)). Loaded once a key tile, they make
   Sᵀ = K Qᵀ and dPᵀ = V dOᵀ read only Q and dO from shared memory. */
template <int HD, int KV_BOX>
__device__ __forceinline__ void fa3_bwd_load_keys(uint32_t (&a)[HD / 16][4],
                                                  const unsigned char *tile, int warp, int lane) {
  const int i = lane >> 3, r = lane & 7, row = 16 * warp + r + 8 * (i & 1);
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int chunk = 2 * (kk % 4) + (i >> 1);
    ldmatrix_x4(a[kk], smem_u32(tile + (kk / 4) * KV_BOX + row * 128 + ((chunk ^ r) << 4)));
  }
}

/* d = A Bᵀ over the head dim: A from registers (fa3_bwd_load_keys), B = the step's Q or dO rows
   (K-major, 64-column boxes QBOX bytes apart). */
template <int HD, int QBOX, bool F16>
__device__ __forceinline__ void fa3_bwd_issue_rs(float (&d)[32], const uint32_t (&a)[HD / 16][4],
                                                 const unsigned char *b) {
  const uint64_t db = wgmma_desc_sw128_at(smem_addr_opaque(b), 16, 1024);
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks)
    wgmma_n<64>::template rs<0, F16>(d, a[ks], db + ((((ks / 4) * QBOX) + (ks % 4) * 32) >> 4),
                                     ks > 0);
}

/* The query rows that see every key of [k0, k1) (none when one is past seqlen_k; core/math/mask.h),
   as [lo, hi) within [0, seqlen_q] (no int overflow), opaque: kept in two registers rather than
   recomputed in 64 bits in every step, as the compiler did to save registers. */
__device__ __forceinline__ void fa3_bwd_full_rows(const fa_mask &mask, int k0, int k1, int seqlen_q,
                                                  int seqlen_k, int &lo, int &hi) {
  int64_t r0, r1;
  fa_mask_full_rows(&mask, k0, k1, seqlen_q, seqlen_k, &r0, &r1);
  lo = (int)min(r0, (int64_t)seqlen_q);
  hi = (int)min(r1, (int64_t)seqlen_q);
  asm volatile("" : "+r"(lo), "+r"(hi));
}

#endif /* FA_CUDA_FA3_BWD_STEP_CUH */
