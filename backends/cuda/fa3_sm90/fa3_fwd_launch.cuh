/*
 * fa3_fwd_launch.cuh: the launcher and shared-memory opt-in of one FlashAttention-3 forward
 * configuration (fa3_tile_size.h's FA3_FWD_CONFIGS), for f16 and bf16 (an FP8 configuration's:
 * fa3_fp8_launch.cuh). Each fa3_fwd_hd<N>.cu
 * defines FA3_FWD_HD and gets the configurations of that padded head dim (one file per head dim so
 * that the build compiles them in parallel).
 */
#ifndef FA_CUDA_FA3_FWD_LAUNCH_CUH
#define FA_CUDA_FA3_FWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fa3_fp8_launch.cuh"
#include "fa3_fwd_kernel.cuh"

template <typename Tr, int HD, int WGS, int BN, int FLAGS>
int fa3_launch(const fa3_fwd_args *a) {
  const cuda_problem &p = a->a.p;
  if (p.seqlen_q == 0 || p.heads_q == 0 || p.batch == 0) return 0;
  /* One block per tile, or (PERSISTENT) at most one per SM, each looping over its tiles. */
  const int rows = (64 * WGS) >> a->pack_log2; /* per query head (GQA packing) */
  const int64_t tiles =
      (int64_t)((p.seqlen_q + rows - 1) / rows) * (p.heads_q >> a->pack_log2) * p.batch;
  const int64_t blocks =
      (FLAGS & FA3_PERSISTENT) && a->sm_count > 0 && a->sm_count < tiles ? a->sm_count : tiles;
  if (tiles > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)blocks);
  if (FLAGS & FA3_DYNAMIC_SCHEDULE) { /* the blocks count the tiles they take from zero */
    const cudaError_t e = fa3_tile_counter_ready(a);
    if (e != cudaSuccess) return (int)e;
  }
  fa3_fwd_kernel<Tr, HD, WGS, BN, FLAGS><<<grid, 128 * (WGS + 1), FA3_FWD_SMEM(HD, WGS, BN, FLAGS),
                                           static_cast<cudaStream_t>(p.stream)>>>(*a);
  return (int)cudaGetLastError();
}

template <typename K>
cudaError_t fa3_opt_in(K kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <int HD, int WGS, int BN, int FLAGS>
int fa3_prepare() {
  const int bytes = (int)FA3_FWD_SMEM(HD, WGS, BN, FLAGS);
  cudaError_t e = fa3_opt_in(fa3_fwd_kernel<fa_f16, HD, WGS, BN, FLAGS>, bytes);
  if (e == cudaSuccess) e = fa3_opt_in(fa3_fwd_kernel<fa_bf16, HD, WGS, BN, FLAGS>, bytes);
  return (int)e;
}

/* A configuration's launch and opt-in: the FP8 kernels' (fa3_fp8_launch.cuh) or f16/bf16's. */
template <int HD, int WGS, int BN, int FLAGS>
int fa3_launch_config(const fa3_fwd_args *a) {
  if constexpr ((FLAGS & FA3_FP8) != 0)
    return fa3_fp8_launch_config<HD, WGS, BN, FLAGS>(a);
  else
    return a->a.p.bf16 ? fa3_launch<fa_bf16, HD, WGS, BN, FLAGS>(a)
                       : fa3_launch<fa_f16, HD, WGS, BN, FLAGS>(a);
}
template <int HD, int WGS, int BN, int FLAGS>
int fa3_prepare_config() {
  if constexpr ((FLAGS & FA3_FP8) != 0)
    return fa3_fp8_prepare_config<HD, WGS, BN, FLAGS>();
  else
    return fa3_prepare<HD, WGS, BN, FLAGS>();
}

/* The entry points of the configurations of head dim FA3_FWD_HD (the others' are in their own
   files): FA3_FWD_CONFIGS(FA3_DEFINE). */
#if FA3_FWD_HD == 64
#define FA3_KEEP_64(...) __VA_ARGS__
#else
#define FA3_KEEP_64(...)
#endif
#if FA3_FWD_HD == 128
#define FA3_KEEP_128(...) __VA_ARGS__
#else
#define FA3_KEEP_128(...)
#endif
#if FA3_FWD_HD == 256
#define FA3_KEEP_256(...) __VA_ARGS__
#else
#define FA3_KEEP_256(...)
#endif
#define FA3_DEFINE(name, hd, wgs, bn, flags)                        \
  FA3_KEEP_##hd(                                                    \
      extern "C" int fa3_fwd_launch_##name(const fa3_fwd_args *a) { \
        return fa3_launch_config<hd, wgs, bn, flags>(a);            \
      } extern "C" int fa3_fwd_prepare_##name(void) {               \
        return fa3_prepare_config<hd, wgs, bn, flags>();            \
      })

#endif /* FA_CUDA_FA3_FWD_LAUNCH_CUH */
