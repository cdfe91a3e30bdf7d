/*
 * fa2_common.cuh: what the forward and backward kernels of the fa2 family share beyond core/:
 * the log2 constants of the exp2 trick and the mask as core/math/mask.h defines it.
 */
#ifndef FA_CUDA_FA2_COMMON_CUH
#define FA_CUDA_FA2_COMMON_CUH

#include "core/math/mask.h"
#include "fa2_args.h"

#define FA2_LOG2E 1.4426950408889634f
#define FA2_LN2 0.6931471805599453f

__device__ __forceinline__ fa_mask fa2_mask_of(const fa2_problem &p) {
  fa_mask m;
  m.shift = p.mask.shift;
  m.left = p.mask.left;
  m.right = p.mask.right;
  return m;
}

#endif /* FA_CUDA_FA2_COMMON_CUH */
