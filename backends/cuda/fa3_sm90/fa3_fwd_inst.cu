/*
 * fa3_fwd_inst.cu: the FlashAttention-3 forward kernels (fa3_fwd.cuh) of the head dims built,
 * for f16 and bf16, their launchers and shared-memory opt-in. Compiled for sm_90a only.
 */
#include <cuda_runtime.h>

#include "fa3_fwd.cuh"

namespace {

template <typename Tr, int HD>
int launch(const fa3_fwd_args *a) {
  const fa2_problem &p = a->a.p;
  if (p.seqlen_q == 0 || p.heads_q == 0 || p.batch == 0) return 0;
  const dim3 grid((unsigned)((p.seqlen_q + FA3_FWD_TILE_M - 1) / FA3_FWD_TILE_M),
                  (unsigned)p.heads_q, (unsigned)p.batch);
  fa3_fwd_kernel<Tr, HD><<<grid, 384, FA3_FWD_SMEM(HD), static_cast<cudaStream_t>(p.stream)>>>(*a);
  return (int)cudaGetLastError();
}

template <int HD>
int prepare() {
  cudaError_t e =
      cudaFuncSetAttribute(fa3_fwd_kernel<fa_f16, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)FA3_FWD_SMEM(HD));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fa3_fwd_kernel<fa_bf16, HD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FA3_FWD_SMEM(HD));
  return (int)e;
}

}  // namespace

extern "C" int fa3_fwd_launch_hd64(const fa3_fwd_args *a) {
  return a->a.p.bf16 ? launch<fa_bf16, 64>(a) : launch<fa_f16, 64>(a);
}
extern "C" int fa3_fwd_launch_hd128(const fa3_fwd_args *a) {
  return a->a.p.bf16 ? launch<fa_bf16, 128>(a) : launch<fa_f16, 128>(a);
}
extern "C" int fa3_prepare_hd64(void) { return prepare<64>(); }
extern "C" int fa3_prepare_hd128(void) { return prepare<128>(); }
