/*
 * fa2_bwd_step.cuh: the pieces of a FlashAttention-2 backward step (fa2_bwd.cuh): the query
 * tile's loads and workspace rows, Sᵀ and dPᵀ of a warp's tile, Pᵀ and dSᵀ into shared memory, and
 * the atomic adds of the sm_80 code's dQ and of the balanced last wave's dK/dV sums.
 */
#ifndef FA_CUDA_FA2_BWD_STEP_CUH
#define FA_CUDA_FA2_BWD_STEP_CUH

#include <limits.h>
#include <math.h>

#include "../common/ptx.cuh"
#include "../common/seq_index.cuh"
#include "../common/tile_io.cuh"
#include "../common/warp_mma.cuh"
#include "core/math/backward.h"
#include "core/math/mask.h"
#include "core/math/score.h"
#include "fa2_args.h"
#include "../common/attn_common.cuh"
#include "fa2_tiles.h"

/* Adds two neighbouring floats to the dQ accumulator (the sm_80 code's natural layout). */
__device__ __forceinline__ void atomic_add_pair(float *p, float x, float y) {
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
}

/* Adds four floats to 16 aligned bytes of global memory (the balanced last wave's dK/dV sums). */
__device__ __forceinline__ void add_f32x4(float4 *p, const float (&x)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  red_add_v4_f32(reinterpret_cast<float *>(p), x[0], x[1], x[2], x[3]);
#else
  float *f = reinterpret_cast<float *>(p);
  for (int i = 0; i < 4; ++i) atomicAdd(f + i, x[i]);
#endif
}

/* The workspace row of row 0 of query head h of sequence (or batch) b: over sequences (SEQS)
   ws_seq (the sequence's head 0 row, common/seq_index.cuh's seq_bwd_ws_row) plus h heads' rows,
   else [batch, heads_q, seqlen_q_padded]. */
template <bool SEQS>
__device__ __forceinline__ int64_t bwd_ws_row(const cuda_bwd_args &a, int b, int h,
                                              int64_t ws_seq) {
  if constexpr (SEQS) return ws_seq + (int64_t)h * a.ws_head;
  return ((int64_t)b * a.p.heads_q + h) * a.seqlen_q_padded;
}

/* Issues the loads of one query tile of head h starting at row m0 of a sequence of seqlen_q rows
   from row q_start (packed q; 0 otherwise), all by cp.async: Q, dO, and the tile's LSE (log2
   units) and D from the workspace the preprocessing kernel filled (its row ws_row). */
template <typename Tr, int HD, int BM, int NT>
__device__ __forceinline__ void bwd_load_query_tile(const cuda_bwd_args &a, int b, int h, int m0,
                                                    int q_start, int seqlen_q, int64_t ws_row,
                                                    typename Tr::elem *sQ, typename Tr::elem *sdO,
                                                    float *sLse, float *sD, int tid) {
  typedef typename Tr::elem E;
  typedef typename smem_tile_layout<HD, FA2_SWIZZLED(HD)>::type TL;
  const int64_t r = (int64_t)q_start + m0;
  const E *q = static_cast<const E *>(a.q) + b * a.q_str.batch + h * a.q_str.head;
  const E *dO = static_cast<const E *>(a.dout) + b * a.do_str.batch + h * a.do_str.head;
  tile_load_async<BM, HD, NT, TL>(sQ, q + r * a.q_str.row, a.q_str.row, seqlen_q - m0, a.p.head_dim,
                                  tid);
  tile_load_async<BM, HD, NT, TL>(sdO, dO + r * a.do_str.row, a.do_str.row, seqlen_q - m0,
                                  a.p.head_dim, tid);
  const int64_t row0 = ws_row;
  constexpr int CHUNKS = BM / 4; /* 16-byte pieces of one vector */
  static_assert(2 * CHUNKS <= NT, "one chunk per thread");
  if (tid < CHUNKS)
    cp_async_16(smem_u32(sLse + 4 * tid), a.lse_log2 + row0 + 4 * tid, 16);
  else if (tid < 2 * CHUNKS)
    cp_async_16(smem_u32(sD + 4 * (tid - CHUNKS)), a.dsum + row0 + 4 * (tid - CHUNKS), 16);
}

/* Pᵀ = exp2(Sᵀ·sl2 − LSE) and dSᵀ = Pᵀ ∘ (dPᵀ − D) of one warp's tile, packed into shared
   memory (rows: keys, LDP apart). With SOFTCAP, dS also takes the softcap's derivative, and a
   select keeps masked scores (-inf, whose factor is not finite) at 0; without it, P = 0 already
   gives dS = 0 and each element costs five instructions. */
template <typename Tr, bool SOFTCAP, int MS, int SNB, int LDP>
__device__ __forceinline__ void bwd_probs_to_smem(const float (&s)[MS][SNB][4],
                                                  const float (&dp)[MS][SNB][4], const float *tLse,
                                                  const float *tD, typename Tr::elem *sPt,
                                                  typename Tr::elem *sdSt, int s_key, int s_q,
                                                  int lane, float sl2, float inv_cap) {
  const int g = lane >> 2, t = lane & 3;
  /* Query blocks outside, key blocks inside: each query's LSE and D is read once per block
     (inside the key loop, the stores below, which might alias them as far as the compiler
     knows, made it read them again for every key block). */
#pragma unroll
  for (int nb = 0; nb < SNB; ++nb) {
    const int q_l = s_q + nb * 8 + 2 * t;
    const float2 lse2 = *reinterpret_cast<const float2 *>(tLse + q_l);
    const float2 dd = *reinterpret_cast<const float2 *>(tD + q_l);
#pragma unroll
    for (int m = 0; m < MS; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key_l = s_key + m * 16 + g + 8 * r;
        float pv[2], dsv[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float z = s[m][nb][2 * r + c];
          const float p = fast_exp2(z * sl2 - (c ? lse2.y : lse2.x));
          const float ds = fa_bwd_ds(p, dp[m][nb][2 * r + c], c ? dd.y : dd.x);
          pv[c] = p;
          if (SOFTCAP)
            dsv[c] = p > 0.0f ? ds * fa_score_softcap_grad_inv(z, inv_cap) : 0.0f;
          else
            dsv[c] = ds;
        }
        *reinterpret_cast<uint32_t *>(sPt + key_l * LDP + q_l) = Tr::pack(pv[0], pv[1]);
        *reinterpret_cast<uint32_t *>(sdSt + key_l * LDP + q_l) = Tr::pack(dsv[0], dsv[1]);
      }
    }
  }
}

/* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for one warp's MS·16 keys (from s_key) x SNB·8 queries (from q_p),
   accumulated into s and dp. K's and V's fragments come from registers where held (HK, HV: kf,
   vf hold every k-step's) or from shared memory. One product after the other (advancing both
   k-step by k-step together, twice the independent mma chains, was no faster). */
template <typename Tr, typename TL, int MS, int SNB, int K16, bool HK, bool HV, int KH, int VH,
          typename E>
__device__ __forceinline__ void bwd_scores(float (&s)[MS][SNB][4], float (&dp)[MS][SNB][4],
                                           const uint32_t (&kf)[KH][MS][4],
                                           const uint32_t (&vf)[VH][MS][4], const E *sK,
                                           const E *sV, int s_key, const E *tQ, const E *tdO,
                                           int q_p, int lane) {
  if constexpr (HK)
    mma_held_a<Tr, false, MS, SNB, K16, TL>(s, kf, tQ, q_p, lane);
  else
    mma_rows_rows<Tr, MS, SNB, K16, TL, TL>(s, sK, s_key, tQ, q_p, lane);
  if constexpr (HV)
    mma_held_a<Tr, false, MS, SNB, K16, TL>(dp, vf, tdO, q_p, lane);
  else
    mma_rows_rows<Tr, MS, SNB, K16, TL, TL>(dp, sV, s_key, tdO, q_p, lane);
}

#endif /* FA_CUDA_FA2_BWD_STEP_CUH */
