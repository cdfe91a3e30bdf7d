/*
 * attn_common.cuh: what the kernels of both families share beyond core/: the log2 constants of
 * the exp2 trick and the mask as core/math/mask.h defines it.
 */
#ifndef FA_CUDA_ATTN_COMMON_CUH
#define FA_CUDA_ATTN_COMMON_CUH

#include "attn_args.h"
#include "core/math/mask.h"
#include "core/math/score.h"

#define CUDA_LOG2E 1.4426950408889634f
#define CUDA_LN2 0.6931471805599453f

__device__ __forceinline__ fa_mask cuda_mask_of(const cuda_problem &p) {
  fa_mask m;
  m.shift = p.mask.shift;
  m.left = p.mask.left;
  m.right = p.mask.right;
  return m;
}

/* The softcap of core/math/score.h on a warp's tile of raw q·k products (mma accumulators). */
template <int M, int N>
__device__ __forceinline__ void softcap_tile(float (&s)[M][N][4], float scale, float cap) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[m][n][c] = fa_score_softcap(s[m][n][c] * scale, cap);
}

#endif /* FA_CUDA_ATTN_COMMON_CUH */
