/*
 * fa3_bwd_launch.cuh: the launcher and shared-memory opt-in of the FlashAttention-3 backward's
 * main kernel for one head dim, f16 and bf16. Each fa3_bwd_hd<N>.cu defines FA3_BWD_HD (one file
 * per head dim so that the build compiles them in parallel).
 */
#ifndef FA_CUDA_FA3_BWD_LAUNCH_CUH
#define FA_CUDA_FA3_BWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fa3_bwd_kernel.cuh"

template <typename Tr, int HD>
int fa3_bwd_main_launch(const fa3_bwd_args *x) {
  const cuda_problem &p = x->a.p;
  /* Over sequences: a persistent grid over the sequences' items (the narrow kernels' blocks
     take them by the dynamic schedule, the wide kernel's by the fixed deal). */
  if (x->a.seqs) {
    if (x->grid_blocks <= 0 || x->a.deterministic) return (int)cudaErrorInvalidValue;
    if (p.heads_kv == 0 || p.batch == 0) return 0;
    fa3_bwd_kernel<Tr, HD, true><<<dim3((unsigned)x->grid_blocks), 384, FA3_BWD_SMEM(HD),
                                   static_cast<cudaStream_t>(p.stream)>>>(*x);
    return (int)cudaGetLastError();
  }
  const int n_blocks = (p.seqlen_k + FA3_BWD_TILE_N(HD) - 1) / FA3_BWD_TILE_N(HD);
  if (n_blocks == 0 || p.heads_kv == 0 || p.batch == 0) return 0;
  /* Deterministic: one block per dQ split, each over its key tiles in order; persistent: the
     grid_blocks blocks over every tile (fa3_bwd_scheduler.cuh, fa3_bwd_item_of). */
  const int grid_x = x->a.deterministic ? x->a.dq_splits : n_blocks;
  const dim3 grid = x->grid_blocks > 0
                        ? dim3((unsigned)x->grid_blocks, 1u, 1u)
                        : dim3((unsigned)grid_x, (unsigned)p.heads_kv, (unsigned)p.batch);
  fa3_bwd_kernel<Tr, HD, false>
      <<<grid, 384, FA3_BWD_SMEM(HD), static_cast<cudaStream_t>(p.stream)>>>(*x);
  return (int)cudaGetLastError();
}

template <int HD, bool SEQS>
cudaError_t fa3_bwd_opt_in() {
  const int bytes = (int)FA3_BWD_SMEM(HD);
  cudaError_t e = cudaFuncSetAttribute(fa3_bwd_kernel<fa_f16, HD, SEQS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fa3_bwd_kernel<fa_bf16, HD, SEQS>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  return e;
}

template <int HD>
int fa3_bwd_prepare() {
  cudaError_t e = fa3_bwd_opt_in<HD, false>();
  if (e == cudaSuccess) e = fa3_bwd_opt_in<HD, true>();
  return (int)e;
}

#define FA3_BWD_DEFINE(hd)                                                                         \
  extern "C" int fa3_bwd_main_launch_hd##hd(const fa3_bwd_args *x) {                               \
    return x->a.p.bf16 ? fa3_bwd_main_launch<fa_bf16, hd>(x) : fa3_bwd_main_launch<fa_f16, hd>(x); \
  }                                                                                                \
  extern "C" int fa3_bwd_prepare_hd##hd(void) { return fa3_bwd_prepare<hd>(); }

#endif /* FA_CUDA_FA3_BWD_LAUNCH_CUH */
