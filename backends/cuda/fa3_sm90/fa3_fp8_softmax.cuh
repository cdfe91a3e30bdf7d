/*
 * fa3_fp8_softmax.cuh: the FP8 forward's online softmax and descales. The descales fold into the
 * score scale: a score of stored values times q's descale (per row: its block's) times k's (per key
 * tile: its block's) is the score of the values they stand for, so a row's scale in log2 units is
 * softmax_scale x log2(e) x q descale x k descale, and it changes from key tile to key tile where
 * k's descale does. The running max is therefore kept scaled (log2 units), not as a raw score as
 * fa3_softmax.cuh keeps it; the mask, the sums and the rescale of O are fa3_softmax.cuh's. v's
 * descale scales the output, never P (which is rounded to e4m3 as it is): O is accumulated in
 * units of the current key tile's v descale, so where the descale changes from tile vd' to vd,
 * the rescale of O takes vd' / vd with the softmax's factor, and the epilogue multiplies by the
 * last tile's. With one v descale the ratio is exactly 1.
 */
#ifndef FA_CUDA_FA3_FP8_SOFTMAX_CUH
#define FA_CUDA_FA3_FP8_SOFTMAX_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "core/math/softmax.h"
#include "fa3_args.h"
#include "fa3_softmax.cuh"

/* q's descale of query row i of head h in batch b; 1 without descales and for rows past seqlen_q
   (a tile's padding rows, never stored: their block may lie past the descale tensor). */
__device__ __forceinline__ float fa3_fp8_q_descale(const fa3_fwd_args &A, int b, int h, int i) {
  const fa3_fp8_args &f = A.fp8;
  if (!f.q_descale || i >= A.a.p.seqlen_q) return 1.0f;
  const int blk = f.q_rows > 0 ? i / f.q_rows : 0;
  return f.q_descale[b * f.qd_batch + h * f.qd_head + blk * f.qd_block];
}
/* k's descale of key tile n (a block holds k_tiles whole tiles) of K/V head hk in batch b. */
__device__ __forceinline__ float fa3_fp8_k_descale(const fa3_fwd_args &A, int b, int hk, int n) {
  const fa3_fp8_args &f = A.fp8;
  if (!f.k_descale) return 1.0f;
  const int blk = f.k_tiles > 0 ? n / f.k_tiles : 0;
  return f.k_descale[b * f.kd_batch + hk * f.kd_head + blk * f.kd_block];
}
/* v's descale of key tile n of K/V head hk in batch b (its blocks are k's). */
__device__ __forceinline__ float fa3_fp8_v_descale(const fa3_fwd_args &A, int b, int hk, int n) {
  const fa3_fp8_args &f = A.fp8;
  if (!f.v_descale) return 1.0f;
  const int blk = f.k_tiles > 0 ? n / f.k_tiles : 0;
  return f.v_descale[b * f.vd_batch + hk * f.vd_head + blk * f.vd_block];
}

/* How far (log2 units) a row's max may rise above the reference max that P is taken against
   before the reference moves (LAZY). */
#define FA3_FP8_MAX_SLACK 8.0f

/* Mask and online softmax of one tile of raw scores (keys c0..c0 + BN), in place: s becomes P in
   [0, 1] (LAZY: [0, 2^FA3_FP8_MAX_SLACK]); sl2[w] is row w's scale for this tile (log2 units,
   > 0), r.max[w] the max of scaled scores that P is taken against (LAZY: up to
   FA3_FP8_MAX_SLACK below the row's running max); alpha gets each row's rescale factor for O.
   SPLIT_MAX as fa3_softmax's: the second row's max waits for an early exp of the first, so that
   it runs under the first row's exps. */
template <int BN, bool SPLIT_MAX, bool LAZY>
__device__ __forceinline__ void fa3_fp8_softmax(float (&s)[BN / 2], fa3_rows &r, fa_tile_class cls,
                                                int c0, int t, const float (&sl2)[2],
                                                float (&alpha)[2]) {
  if (cls != FA_TILE_FULL) fa3_mask_partial<BN>(s, r, c0, t);
  float early = 0.0f; /* SPLIT_MAX: an exp of row 0 */
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float mx = -INFINITY;
    if (SPLIT_MAX && w == 1) mx = fmaf(early, 0.0f, mx); /* early is finite: mx unchanged */
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * w], s[4 * j + 2 * w + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    /* the raw max scaled is the scaled max (sl2 > 0); -inf stays -inf */
    const float m_new = fmaxf(r.max[w], mx * sl2[w]);
    /* LAZY: the reference max moves only when the row's max exceeds it by more than
       FA3_FP8_MAX_SLACK, so P stays below 2^FA3_FP8_MAX_SLACK (within e4m3's 448) and alpha is
       exactly 1 on most tiles */
    const bool moves = !LAZY || m_new > r.max[w] + FA3_FP8_MAX_SLACK;
    const float m_ref = moves ? m_new : r.max[w];
    const float ms = fa_softmax_safe_max(m_ref);
    alpha[w] = !moves ? 1.0f : r.max[w] == -INFINITY ? 0.0f : fast_exp2(r.max[w] - ms);
    r.max[w] = m_ref;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = fast_exp2(fmaf(s[4 * j + 2 * w + e], sl2[w], -ms));
        s[4 * j + 2 * w + e] = pe;
        sum += pe;
        if (SPLIT_MAX && w == 0 && j == 1 && e == 0) early = pe;
      }
    r.sum[w] = r.sum[w] * alpha[w] + sum;
  }
}

#endif /* FA_CUDA_FA3_FP8_SOFTMAX_CUH */
