/*
 * fa3_softmax.cuh: the FlashAttention-3 forward's online softmax in registers: the mask of a
 * partial key tile, the running max and sum of each of a thread's two rows (core/math/softmax.h's
 * rules, exp2 with log2-scaled scores), the rescale of O, P packed as the A operand of P V, and
 * a row's sum and LSE at the end of a tile.
 */
#ifndef FA_CUDA_FA3_SOFTMAX_CUH
#define FA_CUDA_FA3_SOFTMAX_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "../common/attn_common.cuh"
#include "core/math/mask.h"
#include "core/math/softmax.h"

/* A consumer's running softmax state for its thread's two rows (8 apart). */
struct fa3_rows {
  int lo[2], hi[2]; /* each row's key range under the mask */
  float max[2], sum[2];
};

/* The mask of a partial tile (keys c0..c0 + BN): a score whose key lies outside its row's range
   [lo, hi) becomes -inf. Element 4 j + i is key c0 + 8 j + 2 t + i % 2 of row i / 2, so for each
   i the kept j form one run [jlo, jhi): a bit mask per i, made once per tile, then one bit test
   and one select per score (comparing each key with both bounds took two compares a score, 5% of
   the instructions at head dim 64 under a causal mask at 1k). */
template <int BN>
__device__ __forceinline__ void fa3_mask_partial(float (&s)[BN / 2], const fa3_rows &r, int c0,
                                                 int t) {
  static_assert(BN / 8 < 32, "one bit per key group of a row in a 32-bit mask");
  uint32_t keep[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int first = c0 + 2 * t + (i & 1), w = i >> 1;
    /* j kept iff lo <= first + 8 j < hi: jlo = ceil((lo - first) / 8), jhi = ceil((hi - first)
       / 8), both clamped to [0, BN / 8] */
    const int jlo = (min(max(r.lo[w] - first, 0), BN) + 7) >> 3;
    const int jhi = (min(max(r.hi[w] - first, 0), BN) + 7) >> 3;
    keep[i] = ((1u << jhi) - 1u) & ~((1u << jlo) - 1u);
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (!((keep[i] >> j) & 1u)) s[4 * j + i] = -INFINITY;
}

/* Mask and online softmax of one tile of scores (keys c0..c0 + BN), in place: s becomes P; alpha
   gets each row's rescale factor for O (the caller applies it once P V of the previous tile no
   longer reads O). (FlashAttention-4's conditional rescaling and partial exp2 emulation measured
   no gain here.) SUM: the row sums kept here (without it P V's ones columns form them). SPLIT_MAX:
   the second row's max made to depend on an early exp of the first (an FFMA adding 0 times it), so
   that ptxas cannot hoist it above the first row's exps: its FMNMX chain then runs in the issue
   gaps of the first row's MUFU block instead of before it, where the XU pipe idles. */
template <int BN, bool SUM, bool SPLIT_MAX>
__device__ __forceinline__ void fa3_softmax(float (&s)[BN / 2], fa3_rows &r, fa_tile_class cls,
                                            int c0, int t, float sl2, float (&alpha)[2]) {
  if (cls != FA_TILE_FULL) {
    fa3_mask_partial<BN>(s, r, c0, t);
  }
  /* Per row: a row's pieces sit in the 4 threads of a quad. */
  float early = 0.0f; /* SPLIT_MAX: an exp of row 0 */
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float mx = r.max[w];
    if (SPLIT_MAX && w == 1) mx = fmaf(early, 0.0f, mx); /* early is finite: mx unchanged */
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * w], s[4 * j + 2 * w + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ms = fa_softmax_safe_max(mx) * sl2;
    alpha[w] = r.max[w] == -INFINITY ? 0.0f : fast_exp2(r.max[w] * sl2 - ms);
    r.max[w] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = fast_exp2(s[4 * j + 2 * w + e] * sl2 - ms);
        s[4 * j + 2 * w + e] = pe;
        if (SUM) sum += pe;
        if (SPLIT_MAX && w == 0 && j == 1 && e == 0) early = pe;
      }
    if (SUM) r.sum[w] = r.sum[w] * alpha[w] + sum;
  }
}

template <int NP>
__device__ __forceinline__ void fa3_rescale(float (&o)[NP / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < NP / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[4 * j + i] *= alpha[i >> 1];
}

/* P as the A operand: the accumulator of keys 16 kk.. is kk's A fragment. */
template <typename Tr, int BN>
__device__ __forceinline__ void fa3_pack_p(const float (&s)[BN / 2], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) pa[kk][i] = Tr::pack(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

/* A tile's end for this thread's row w (of two): the row's sum of P, from the ones columns of
   P V (MMA_ROW_SUM) or the quad's four partial sums, and its LSE in natural log from the row max
   (__log2f: one MUFU.LG2, abs. error ~2^-22, where logf took ~25 instructions a row). */
template <int NP, bool ROW_SUM>
__device__ __forceinline__ float fa3_row_sum(const float (&o)[NP / 2], const float (&sum)[2],
                                             int w) {
  if constexpr (ROW_SUM) return o[(NP - 8) / 2 + 2 * w];
  float l = sum[w];
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  return l + __shfl_xor_sync(0xffffffffu, l, 2);
}
__device__ __forceinline__ float fa3_row_lse(float mx, float l, float sl2) {
  return l > 0.0f ? (mx * sl2 + __log2f(l)) * CUDA_LN2 : -INFINITY;
}

#endif /* FA_CUDA_FA3_SOFTMAX_CUH */
