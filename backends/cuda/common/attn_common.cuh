/*
 * attn_common.cuh: what the kernels of both families share beyond core/: the log2 constants of
 * the exp2 trick and the mask as core/math/mask.h defines it.
 */
#ifndef FA_CUDA_ATTN_COMMON_CUH
#define FA_CUDA_ATTN_COMMON_CUH

#include "attn_args.h"
#include "core/math/mask.h"

#define CUDA_LOG2E 1.4426950408889634f
#define CUDA_LN2 0.6931471805599453f

__device__ __forceinline__ fa_mask cuda_mask_of(const cuda_problem &p) {
  fa_mask m;
  m.shift = p.mask.shift;
  m.left = p.mask.left;
  m.right = p.mask.right;
  return m;
}

#endif /* FA_CUDA_ATTN_COMMON_CUH */
