/*
 * fa2_fwd_inst.cu / the kernels of one padded head dim (FA2_HD, set by the build): forward and
 * backward for f16 and bf16, their launchers and their shared-memory opt-in. Built once per head
 * dim so the eight head dims compile in parallel.
 */
#include <cuda_runtime.h>

#include "fa2_bwd.cuh"
#include "fa2_fwd.cuh"
#include "fa2_launch.h"

#ifndef FA2_HD
#error "FA2_HD must be defined by the build"
#endif

#define FA2_CAT_(a, b) a##b
#define FA2_CAT(a, b) FA2_CAT_(a, b)

namespace {

constexpr int HD = FA2_HD;
constexpr int FWD_M = FA2_FWD_TILE_M(HD), FWD_N = FA2_FWD_TILE_N(HD), FWD_W = FA2_FWD_WARPS(HD);
constexpr int FWD_S = FA2_FWD_KV_STAGES(HD);
constexpr int BWD_N = FA2_BWD_TILE_N(HD), BWD_M = FA2_BWD_TILE_M(HD), BWD_W = FA2_BWD_WARPS(HD);
/* Backward warp layout (fa2_tiles.h): warps along the keys for Sᵀ and dK/dV, along the queries for
   dQ; the other warps split the other dimension. */
constexpr int S_WK = FA2_BWD_S_WK(HD), KV_WK = FA2_BWD_KV_WK(HD), DQ_WQ = FA2_BWD_DQ_WQ(HD);

template <typename Tr>
int fwd(const fa2_fwd_args *a) {
  if (a->p.seqlen_q == 0 || a->p.heads_q == 0 || a->p.batch == 0) return 0;
  dim3 grid((unsigned)((a->p.seqlen_q + FWD_M - 1) / FWD_M), (unsigned)a->p.heads_q,
            (unsigned)a->p.batch);
  fa2_fwd_kernel<Tr, HD, FWD_M, FWD_N, FWD_W, FWD_S>
      <<<grid, FWD_W * 32, FA2_FWD_SMEM(HD), static_cast<cudaStream_t>(a->p.stream)>>>(*a);
  return (int)cudaGetLastError();
}

/* The dQ accumulator layout of the backward code the current device runs (fa2_args.h): the sm_90
   code's (its binary version, as the runtime picked it, tells) adds dQ by bulk reductions up to
   head dim 192 and by 16-byte vector reductions above; the sm_80 code by pairs of atomics. */
static_assert(FA2_BWD_SMEM(HD) + FA2_BWD_DQ_STAGE_SMEM(HD) <= 227 * 1024,
              "the sm_90 backward must fit 227 KB of shared memory");
template <typename Tr>
int bwd_dq_layout() {
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, fa2_bwd_kernel<Tr, HD, BWD_N, BWD_M, BWD_W, S_WK, KV_WK, DQ_WQ>) !=
          cudaSuccess ||
      attr.binaryVersion < 90)
    return FA2_DQ_NATURAL;
  return FA2_BWD_DQ_BULK(HD) ? FA2_DQ_ROTATED : FA2_DQ_PAIRED;
}
/* The backward's shared memory, the dQ staging included where the bulk path runs. */
constexpr size_t bwd_smem(int dq_layout) {
  return FA2_BWD_SMEM(HD) + (dq_layout == FA2_DQ_ROTATED ? FA2_BWD_DQ_STAGE_SMEM(HD) : 0);
}

template <typename Tr>
int bwd(const fa2_bwd_args *a, int grid_x) {
  if (grid_x == 0 || a->p.heads_kv == 0 || a->p.batch == 0) return 0;
  dim3 grid((unsigned)grid_x, (unsigned)a->p.heads_kv, (unsigned)a->p.batch);
  fa2_bwd_kernel<Tr, HD, BWD_N, BWD_M, BWD_W, S_WK, KV_WK, DQ_WQ>
      <<<grid, BWD_W * 32, bwd_smem(a->dq_layout), static_cast<cudaStream_t>(a->p.stream)>>>(*a);
  return (int)cudaGetLastError();
}

/* A kernel whose shared memory exceeds the device's limit is skipped, not an error: decide()
   refuses its shapes (cuda_decide.c computes the same sizes), and the other kernels run. */
template <typename Tr>
cudaError_t prepare(int smem_limit) {
  if ((int64_t)FA2_FWD_SMEM(HD) <= smem_limit) {
    const cudaError_t e = cudaFuncSetAttribute(fa2_fwd_kernel<Tr, HD, FWD_M, FWD_N, FWD_W, FWD_S>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)FA2_FWD_SMEM(HD));
    if (e != cudaSuccess) return e;
  }
  const size_t bwd_bytes = bwd_smem(bwd_dq_layout<Tr>());
  if ((int64_t)bwd_bytes > smem_limit) return cudaSuccess;
  return cudaFuncSetAttribute(fa2_bwd_kernel<Tr, HD, BWD_N, BWD_M, BWD_W, S_WK, KV_WK, DQ_WQ>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_bytes);
}

}  // namespace

extern "C" int FA2_CAT(fa2_fwd_launch_hd, FA2_HD)(const fa2_fwd_args *a) {
  return a->p.bf16 ? fwd<fa_bf16>(a) : fwd<fa_f16>(a);
}

extern "C" int FA2_CAT(fa2_bwd_main_launch_hd, FA2_HD)(const fa2_bwd_args *a, int grid_x) {
  return a->p.bf16 ? bwd<fa_bf16>(a, grid_x) : bwd<fa_f16>(a, grid_x);
}

extern "C" int FA2_CAT(fa2_bwd_dq_layout_hd, FA2_HD)(void) {
  /* The f16 and bf16 kernels come from the same compilation: one answer for both. */
  return bwd_dq_layout<fa_bf16>();
}

extern "C" int FA2_CAT(fa2_prepare_hd, FA2_HD)(int smem_limit) {
  cudaError_t e = prepare<fa_f16>(smem_limit);
  if (e == cudaSuccess) e = prepare<fa_bf16>(smem_limit);
  return (int)e;
}
