/*
 * fa2_fwd_inst.cu / the kernels of one padded head dim (FA2_HD, set by the build): forward,
 * backward and the forward over sequences (fa2_fwd_splitkv.cuh) for f16 and bf16, their launchers
 * and their shared-memory opt-in. Built once per head
 * dim so the eight head dims compile in parallel.
 */
#include <cuda_runtime.h>

#include "fa2_bwd.cuh"
#include "fa2_fwd.cuh"
#include "fa2_fwd_decode.cuh"
#include "fa2_fwd_decode_bulk.cuh"
#include "fa2_fwd_splitkv.cuh"
#include "fa2_launch.h"

#ifndef FA2_HD
#error "FA2_HD must be defined by the build"
#endif

#define FA2_CAT_(a, b) a##b
#define FA2_CAT(a, b) FA2_CAT_(a, b)

namespace {

constexpr int HD = FA2_HD;

/* One size class's kernels (fa2_tiles.h). Both classes of a head dim instantiate the same
   template; where their shapes agree, they are one kernel. */
template <int C>
struct fwd_tiles {
  static constexpr int M = FA2_FWD_TILE_M(HD, C), N = FA2_FWD_TILE_N(HD, C);
  static constexpr int W = FA2_FWD_WARPS(HD, C), S = FA2_FWD_KV_STAGES(HD, C);
  static constexpr size_t SMEM = FA2_FWD_SMEM(HD, C);
};
/* Backward warp layout (fa2_tiles.h): warps along the keys for Sᵀ and dK/dV, along the queries for
   dQ; the other warps split the other dimension. DQB: the sm_90 code adds dQ by bulk reductions
   from a staging tile (else by vector reductions). QS: stages of the Q/dO tiles. */
template <int C>
struct bwd_tiles {
  static constexpr int N = FA2_BWD_TILE_N(HD, C), M = FA2_BWD_TILE_M(HD, C);
  static constexpr int W = FA2_BWD_WARPS(HD, C);
  static constexpr int S_WK = FA2_BWD_S_WK(HD, C), KV_WK = FA2_BWD_KV_WK(HD, C);
  static constexpr int DQ_WQ = FA2_BWD_DQ_WQ(HD, C);
  static constexpr bool DQB = FA2_BWD_DQ_BULK(HD, C);
  static constexpr int QS = FA2_BWD_Q_STAGES(HD, C);
};
template <typename Tr, int C>
constexpr auto *fwd_kernel() {
  typedef fwd_tiles<C> T;
  return fa2_fwd_kernel<Tr, HD, T::M, T::N, T::W, T::S>;
}
/* TAIL: the balanced last wave's pieces (fa2_args.h); the whole tiles run the other. SEQS: the
   backward over sequences of their own lengths (attn_args.h: cuda_bwd_args.seqs). */
template <typename Tr, int C, bool TAIL, bool SEQS = false>
constexpr auto *bwd_kernel() {
  typedef bwd_tiles<C> T;
  return fa2_bwd_kernel<Tr, HD, T::N, T::M, T::W, T::S_WK, T::KV_WK, T::DQ_WQ, T::DQB, T::QS, TAIL,
                        SEQS>;
}

template <typename Tr, int C>
int fwd_class(const cuda_fwd_args *a) {
  typedef fwd_tiles<C> T;
  dim3 grid((unsigned)((a->p.seqlen_q + T::M - 1) / T::M), (unsigned)a->p.heads_q,
            (unsigned)a->p.batch);
  fwd_kernel<Tr, C>()<<<grid, T::W * 32, T::SMEM, static_cast<cudaStream_t>(a->p.stream)>>>(*a);
  return (int)cudaGetLastError();
}
template <typename Tr>
int fwd(const cuda_fwd_args *a) {
  if (a->p.seqlen_q == 0 || a->p.heads_q == 0 || a->p.batch == 0) return 0;
  return a->size_class == FA2_COMPACT ? fwd_class<Tr, FA2_COMPACT>(a) : fwd_class<Tr, FA2_WIDE>(a);
}

static_assert(FA2_BWD_SMEM(HD, FA2_WIDE) + FA2_BWD_DQ_STAGE_SMEM(HD, FA2_WIDE) <= 227 * 1024,
              "the sm_90 backward must fit 227 KB of shared memory");
/* The backward's shared memory for a dQ layout: the staging tile where the bulk path runs. */
template <int C>
constexpr size_t bwd_smem(int dq_layout) {
  return FA2_BWD_SMEM_STAGED(HD, C, dq_layout == CUDA_DQ_ROTATED);
}

template <typename Tr, int C>
int bwd_class(const cuda_bwd_args *a, int grid_x) {
  const size_t smem = bwd_smem<C>(a->dq_layout);
  const cudaStream_t st = static_cast<cudaStream_t>(a->p.stream);
  if (a->seqs) { /* grid (key tiles of the longest sequence, KV heads, sequences) */
    const dim3 grid((unsigned)grid_x, (unsigned)a->p.heads_kv, (unsigned)a->p.batch);
    bwd_kernel<Tr, C, false, true>()<<<grid, bwd_tiles<C>::W * 32, smem, st>>>(*a);
    return (int)cudaGetLastError();
  }
  /* The whole tiles (all of them without a tail; with one, the blocks of the tail's tiles
     return at once), then the tail's pieces (fa2_args.h). */
  if (!a->tail_tiles || a->tail_first > 0) {
    const dim3 grid((unsigned)grid_x, (unsigned)a->p.heads_kv, (unsigned)a->p.batch);
    bwd_kernel<Tr, C, false>()<<<grid, bwd_tiles<C>::W * 32, smem, st>>>(*a);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
  }
  if (a->tail_tiles)
    bwd_kernel<Tr, C, true>()<<<(unsigned)a->tail_pieces, bwd_tiles<C>::W * 32, smem, st>>>(*a);
  return (int)cudaGetLastError();
}
template <typename Tr>
int bwd(const cuda_bwd_args *a, int grid_x) {
  if (grid_x == 0 || a->p.heads_kv == 0 || a->p.batch == 0) return 0;
  return a->size_class == FA2_COMPACT ? bwd_class<Tr, FA2_COMPACT>(a, grid_x)
                                      : bwd_class<Tr, FA2_WIDE>(a, grid_x);
}

/* The forward over sequences: grid (query blocks, query head groups, sequences x key pieces). */
template <typename Tr>
int splitkv(const cuda_seq_args *a) {
  const int rows = a->tile_m / a->pack;
  const dim3 grid((unsigned)((a->f.p.seqlen_q + rows - 1) / rows),
                  (unsigned)(a->f.p.heads_q / a->pack), (unsigned)(a->f.p.batch * a->splits));
  const cudaStream_t stream = static_cast<cudaStream_t>(a->f.p.stream);
  if (a->tile_m == FA2_DECODE_TILE_M && a->bulk)
    fa2_decode_bulk_kernel<Tr, HD><<<grid, 128, FA2_DECODE_BULK_SMEM(HD), stream>>>(*a);
  else if (a->tile_m == FA2_DECODE_TILE_M)
    fa2_decode_kernel<Tr, HD, FA2_DECODE_HALVES_HD(HD)>
        <<<grid, 128, FA2_DECODE_SMEM(HD), stream>>>(*a);
  else
    fa2_splitkv_kernel<Tr, HD><<<grid, 128, FA2_SPLITKV_SMEM(HD), stream>>>(*a);
  return (int)cudaGetLastError();
}

/* A kernel whose shared memory exceeds the device's limit is skipped, not an error: decide()
   refuses its shapes (fa2_host.c computes the same sizes), and the other kernels run. */
template <typename Tr, int C>
cudaError_t prepare_class(int smem_limit, int cc_major) {
  const size_t fwd_bytes = fwd_tiles<C>::SMEM;
  if ((int64_t)fwd_bytes <= smem_limit) {
    const cudaError_t e = cudaFuncSetAttribute(
        fwd_kernel<Tr, C>(), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_bytes);
    if (e != cudaSuccess) return e;
  }
  const size_t bwd_bytes = bwd_smem<C>(fa2_bwd_dq_layout(cc_major, HD, C));
  if ((int64_t)bwd_bytes > smem_limit) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(bwd_kernel<Tr, C, false>(),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(bwd_kernel<Tr, C, true>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)bwd_bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(bwd_kernel<Tr, C, false, true>(),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_bytes);
  return e;
}
template <typename Tr>
cudaError_t prepare(int smem_limit, int cc_major) {
  cudaError_t e = prepare_class<Tr, FA2_WIDE>(smem_limit, cc_major);
  if (e == cudaSuccess) e = prepare_class<Tr, FA2_COMPACT>(smem_limit, cc_major);
  if (e == cudaSuccess && (int64_t)FA2_SPLITKV_SMEM(HD) <= smem_limit)
    e = cudaFuncSetAttribute(fa2_splitkv_kernel<Tr, HD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)FA2_SPLITKV_SMEM(HD));
  if (e == cudaSuccess && (int64_t)FA2_DECODE_SMEM(HD) <= smem_limit)
    e = cudaFuncSetAttribute(fa2_decode_kernel<Tr, HD, FA2_DECODE_HALVES_HD(HD)>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FA2_DECODE_SMEM(HD));
  if (e == cudaSuccess && cc_major >= 9 && (int64_t)FA2_DECODE_BULK_SMEM(HD) <= smem_limit)
    e = cudaFuncSetAttribute(fa2_decode_bulk_kernel<Tr, HD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)FA2_DECODE_BULK_SMEM(HD));
  return e;
}

}  // namespace

extern "C" int FA2_CAT(fa2_fwd_launch_hd, FA2_HD)(const cuda_fwd_args *a) {
  return a->p.bf16 ? fwd<fa_bf16>(a) : fwd<fa_f16>(a);
}

extern "C" int FA2_CAT(fa2_bwd_main_launch_hd, FA2_HD)(const cuda_bwd_args *a, int grid_x) {
  return a->p.bf16 ? bwd<fa_bf16>(a, grid_x) : bwd<fa_f16>(a, grid_x);
}

extern "C" int FA2_CAT(fa2_splitkv_launch_hd, FA2_HD)(const cuda_seq_args *a) {
  if (a->f.p.seqlen_q == 0 || a->f.p.heads_q == 0 || a->f.p.batch == 0) return 0;
  return a->f.p.bf16 ? splitkv<fa_bf16>(a) : splitkv<fa_f16>(a);
}

extern "C" int FA2_CAT(fa2_prepare_hd, FA2_HD)(int smem_limit, int cc_major) {
  cudaError_t e = prepare<fa_f16>(smem_limit, cc_major);
  if (e == cudaSuccess) e = prepare<fa_bf16>(smem_limit, cc_major);
  return (int)e;
}
