/*
 * fa2_fwd_step.cuh: one key tile's work in a warp of the FlashAttention-2 forward kernels
 * (fa2_fwd.cuh, fa2_fwd_splitkv.cuh), after S = Q Kᵀ: the mask on the tiles it cuts, the online
 * softmax in the log2 domain (exp2 of one FMA per score) and O += P V with P taken straight from
 * the S accumulators (the C fragment of two n8 blocks is the A fragment of one k16 step).
 */
#ifndef FA_CUDA_FA2_FWD_STEP_CUH
#define FA_CUDA_FA2_FWD_STEP_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "core/math/softmax.h"

/* Scores of keys outside a row's range [row_lo, row_hi) set to -inf (c0: the tile's first key;
   t: the lane's column pair within each n8 block). */
template <int MT, int NB>
__device__ __forceinline__ void fa2_mask_scores(float (&s)[MT][NB][4], int c0,
                                                const int (&row_lo)[MT][2],
                                                const int (&row_hi)[MT][2], int t) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int j = c0 + nb * 8 + 2 * t + c;
          if (j < row_lo[mt][r] || j >= row_hi[mt][r]) s[mt][nb][2 * r + c] = -INFINITY;
        }
    }
}

/* The online softmax of a warp's rows over one key tile (s: scores, turned into P) and
   O += P V with V's tile tV (layout TL) in shared memory. sl2: the factor that takes a score to
   the log2 domain (the softmax scale folded in where no softcap ran). */
template <typename Tr, int MT, int NB, int DB, typename TL, typename E>
__device__ __forceinline__ void fa2_softmax_pv(float (&s)[MT][NB][4], float (&o)[MT][DB][4],
                                               float (&row_max)[MT][2], float (&row_sum)[MT][2],
                                               float sl2, const E *tV, int lane) {
  /* Online softmax, per row (a row's 8-key pieces sit in the 4 threads of a quad). */
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[mt][r];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = fa_softmax_safe_max(mx) * sl2;
      const float alpha = row_max[mt][r] == -INFINITY ? 0.0f : fast_exp2(row_max[mt][r] * sl2 - ms);
      row_max[mt][r] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float p = fast_exp2(s[mt][nb][2 * r + c] * sl2 - ms);
          s[mt][nb][2 * r + c] = p;
          sum += p;
        }
      row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        o[mt][db][2 * r] *= alpha;
        o[mt][db][2 * r + 1] *= alpha;
      }
    }

    /* O += P V: P from registers, V through ldmatrix.trans. */
#pragma unroll
  for (int kk = 0; kk < NB / 2; ++kk) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = Tr::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = Tr::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = Tr::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = Tr::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int db2 = 0; db2 < DB / 2; ++db2) {
      {
        uint32_t vb[4];
        const int mi = lane >> 3;
        ldmatrix_x4_trans(vb, smem_u32(tV + TL::off8(kk * 16 + (mi & 1) * 8, lane & 7,
                                                     db2 * 16 + (mi >> 1) * 8)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<Tr>(o[mt][2 * db2], pa[mt], vb);
          mma_16816<Tr>(o[mt][2 * db2 + 1], pa[mt], vb + 2);
        }
      }
    }
  }
}

#endif /* FA_CUDA_FA2_FWD_STEP_CUH */
