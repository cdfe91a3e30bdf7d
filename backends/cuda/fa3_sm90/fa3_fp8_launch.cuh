/*
 * fa3_fp8_launch.cuh: the launcher and shared-memory opt-in of an FP8 forward configuration
 * (fa3_tile_size.h's FA3_FP8 ones): four kernels each, for e4m3 or e5m2 inputs and an f16 or bf16
 * output. fa3_fwd_launch.cuh's entry points come here for those configurations; the pre-pass that
 * makes Vᵀ runs before (fa3_fwd_launch, fa3_fwd_host.c).
 */
#ifndef FA_CUDA_FA3_FP8_LAUNCH_CUH
#define FA_CUDA_FA3_FP8_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fa3_fp8_kernel.cuh"

template <typename Tr, bool E5M2, int HD, int WGS, int BN, int FLAGS>
int fa3_fp8_launch(const fa3_fwd_args *a) {
  const cuda_problem &p = a->a.p;
  if (p.seqlen_q == 0 || p.heads_q == 0 || p.batch == 0) return 0;
  /* One block per tile, or (PERSISTENT) at most one per SM, each looping over its tiles. */
  const int rows = (64 * WGS) >> a->pack_log2; /* per query head (GQA packing) */
  const int64_t tiles =
      (int64_t)((p.seqlen_q + rows - 1) / rows) * (p.heads_q >> a->pack_log2) * p.batch;
  const int64_t blocks =
      (FLAGS & FA3_PERSISTENT) && a->sm_count > 0 && a->sm_count < tiles ? a->sm_count : tiles;
  if (tiles > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
  if (FLAGS & FA3_DYNAMIC_SCHEDULE) { /* the blocks count the tiles they take from zero */
    const cudaError_t e = fa3_tile_counter_ready(a);
    if (e != cudaSuccess) return (int)e;
  }
  fa3_fp8_kernel<Tr, E5M2, HD, WGS, BN, FLAGS>
      <<<dim3((unsigned)blocks), 128 * (WGS + 1), FA3_FWD_SMEM(HD, WGS, BN, FLAGS),
         static_cast<cudaStream_t>(p.stream)>>>(*a);
  return (int)cudaGetLastError();
}

/* The kernel of a call: its inputs' format (a->fp8.e5m2) and out's dtype (a->a.p.bf16). */
template <int HD, int WGS, int BN, int FLAGS>
int fa3_fp8_launch_config(const fa3_fwd_args *a) {
  if (a->fp8.e5m2)
    return a->a.p.bf16 ? fa3_fp8_launch<fa_bf16, true, HD, WGS, BN, FLAGS>(a)
                       : fa3_fp8_launch<fa_f16, true, HD, WGS, BN, FLAGS>(a);
  return a->a.p.bf16 ? fa3_fp8_launch<fa_bf16, false, HD, WGS, BN, FLAGS>(a)
                     : fa3_fp8_launch<fa_f16, false, HD, WGS, BN, FLAGS>(a);
}

template <typename Tr, bool E5M2, int HD, int WGS, int BN, int FLAGS>
cudaError_t fa3_fp8_opt_in() {
  return cudaFuncSetAttribute(fa3_fp8_kernel<Tr, E5M2, HD, WGS, BN, FLAGS>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              (int)FA3_FWD_SMEM(HD, WGS, BN, FLAGS));
}

template <int HD, int WGS, int BN, int FLAGS>
int fa3_fp8_prepare_config() {
  cudaError_t e = fa3_fp8_opt_in<fa_f16, false, HD, WGS, BN, FLAGS>();
  if (e == cudaSuccess) e = fa3_fp8_opt_in<fa_bf16, false, HD, WGS, BN, FLAGS>();
  if (e == cudaSuccess) e = fa3_fp8_opt_in<fa_f16, true, HD, WGS, BN, FLAGS>();
  if (e == cudaSuccess) e = fa3_fp8_opt_in<fa_bf16, true, HD, WGS, BN, FLAGS>();
  return (int)e;
}

#endif /* FA_CUDA_FA3_FP8_LAUNCH_CUH */
