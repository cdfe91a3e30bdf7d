/*
 * fa2_fwd.cuh: the FlashAttention-2 forward kernel (sm_80 and newer).
 *
 * One thread block per (query tile, query head, batch). The block's NW warps split the BM query
 * rows (16 * MT rows each); Q stays in shared memory, K and V tiles stream through a two-stage
 * cp.async ring, or (KVS = 1) through one buffer each, V's copy overlapping S = Q Kᵀ and the next
 * K's overlapping P V. Per key tile each warp computes S = Q Kᵀ for its rows with mma.sync
 * m16n8k16, applies softcap and the mask (core/math/score.h, core/math/mask.h; only on tiles the
 * mask cuts), then the online softmax and P V of fa2_fwd_step.cuh. The row sums stay per thread
 * until the end. O and the LSE are
 * written once, O through the warp's own rows of the Q tile so that its stores are 16 bytes wide.
 */
#ifndef FA_CUDA_FA2_FWD_CUH
#define FA_CUDA_FA2_FWD_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "../common/tile_io.cuh"
#include "../common/warp_mma.cuh"
#include "core/math/mask.h"
#include "core/math/score.h"
#include "core/math/softmax.h"
#include "../common/attn_common.cuh"
#include "fa2_args.h"
#include "fa2_fwd_step.cuh"
#include "fa2_tiles.h"

template <typename Tr, int HD, int BM, int BN, int NW, int KVS>
__global__ void __launch_bounds__(NW * 32) fa2_fwd_kernel(const cuda_fwd_args a) {
  typedef typename Tr::elem E;
  constexpr int NT = NW * 32;
  constexpr int MT = BM / (16 * NW);                                /* m16 tiles per warp */
  typedef typename smem_tile_layout<HD, FA2_SWIZZLED(HD)>::type TL; /* Q, K, V tiles */
  constexpr int LD = TL::LD;
  constexpr int NB = BN / 8; /* n8 blocks of keys in S */
  constexpr int DB = HD / 8; /* n8 blocks of the head dim in O */
  static_assert(BM % (16 * NW) == 0 && BN % 16 == 0 && HD % 32 == 0, "tile shape");
  static_assert(KVS == 1 || KVS == 2, "one or two K/V stages");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  E *sQ = reinterpret_cast<E *>(smem_raw);
  E *sK = sQ + BM * LD; /* KVS stages each */
  E *sV = sK + KVS * BN * LD;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  /* Largest query tiles first: under a causal mask they hold the most key tiles. */
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (a.p.heads_q / a.p.heads_kv);
  const int m0 = m_block * BM;
  const int d = a.p.head_dim;
  const int seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;

  const E *q = static_cast<const E *>(a.q) + b * a.q_str.batch + h * a.q_str.head;
  const E *k = static_cast<const E *>(a.k) + b * a.k_str.batch + hk * a.k_str.head;
  const E *v = static_cast<const E *>(a.v) + b * a.v_str.batch + hk * a.v_str.head;

  const fa_mask mask = cuda_mask_of(a.p);
  const int rows_end = min(m0 + BM, seqlen_q);
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&mask, m0, seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(&mask, rows_end - 1, seqlen_k, &lo_last, &hi_last);
  const int n_begin = (int)(lo_first / BN);
  const int n_end = hi_last > lo_first ? (int)((hi_last + BN - 1) / BN) : n_begin;
  /* Each thread's four rows' key ranges, once: the loop below needs no 64-bit mask arithmetic
     (fewer live registers in the loop). */
  const int warp_row0 = warp * MT * 16;
  int row_lo[MT][2], row_hi[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t lo, hi;
      fa_mask_key_range(&mask, m0 + warp_row0 + mt * 16 + g + 8 * r, seqlen_k, &lo, &hi);
      row_lo[mt][r] = (int)lo;
      row_hi[mt][r] = (int)hi;
    }
  const int blk_lo_first = (int)lo_first, blk_hi_first = (int)hi_first;
  const int blk_lo_last = (int)lo_last, blk_hi_last = (int)hi_last;

  /* Without softcap the scale folds into the exp2 argument; with it, scores are scaled first. */
  const bool capped = a.p.softcap > 0.0f;
  const float sl2 = capped ? CUDA_LOG2E : a.p.scale * CUDA_LOG2E;

  float o[MT][DB][4];
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mt][db][c] = 0.0f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }

  tile_load_async<BM, HD, NT, TL>(sQ, q + (int64_t)m0 * a.q_str.row, a.q_str.row, seqlen_q - m0, d,
                                  tid);
  if (n_begin < n_end) {
    const int c0 = n_begin * BN;
    tile_load_async<BN, HD, NT, TL>(sK, k + (int64_t)c0 * a.k_str.row, a.k_str.row, seqlen_k - c0,
                                    d, tid);
    if (KVS == 2)
      tile_load_async<BN, HD, NT, TL>(sV, v + (int64_t)c0 * a.v_str.row, a.v_str.row, seqlen_k - c0,
                                      d, tid);
  }
  cp_async_commit();

  for (int n = n_begin, it = 0; n < n_end; ++n, ++it) {
    const int st = KVS == 2 ? it & 1 : 0;
    const int c0 = n * BN;
    /* Two stages: tile n has landed; after the barrier every warp is also done with tile n - 1,
       whose stage the next tile's loads overwrite while this one is computed (one barrier per
       tile). One stage: K of tile n has landed and every warp is done with V of tile n - 1, so
       V of tile n is copied while S is computed. */
    cp_async_wait<0>();
    __syncthreads();
    if (KVS == 1) {
      tile_load_async<BN, HD, NT, TL>(sV, v + (int64_t)c0 * a.v_str.row, a.v_str.row, seqlen_k - c0,
                                      d, tid);
      cp_async_commit();
    }

    fa_tile_class cls = fa_mask_tile_class_from_ranges(blk_lo_first, blk_hi_first, blk_lo_last,
                                                       blk_hi_last, c0, min(c0 + BN, seqlen_k));
    if (cls == FA_TILE_FULL && c0 + BN > seqlen_k) cls = FA_TILE_PARTIAL;
    const E *tK = sK + st * BN * LD;
    const E *tV = sV + st * BN * LD;
    float s[MT][NB][4];
    if (cls != FA_TILE_EMPTY) {
      zero_tile(s);

      /* S = Q Kᵀ over the padded head dim (the padding is zeros; no branch on the real head dim
         inside the unrolled loops, which would stop loads overlapping the mma). */
      mma_rows_rows<Tr, MT, NB, HD / 16, TL, TL>(s, sQ, warp_row0, tK, 0, lane);
    }

    /* The next tile's loads, issued after S rather than right after the barrier, where they
       queued behind every warp's first ldmatrix. The stage they overwrite
       was last read in the previous iteration. */
    if (KVS == 2) {
      if (n + 1 < n_end) {
        const int c1 = (n + 1) * BN;
        tile_load_async<BN, HD, NT, TL>(sK + (st ^ 1) * BN * LD, k + (int64_t)c1 * a.k_str.row,
                                        a.k_str.row, seqlen_k - c1, d, tid);
        tile_load_async<BN, HD, NT, TL>(sV + (st ^ 1) * BN * LD, v + (int64_t)c1 * a.v_str.row,
                                        a.v_str.row, seqlen_k - c1, d, tid);
      }
    } else {
      /* One stage: V of tile n has landed and every warp is done reading K of tile n, whose
         buffer takes the next K while the softmax and P V run. */
      cp_async_wait<0>();
      __syncthreads();
      if (n + 1 < n_end) {
        const int c1 = (n + 1) * BN;
        tile_load_async<BN, HD, NT, TL>(sK, k + (int64_t)c1 * a.k_str.row, a.k_str.row,
                                        seqlen_k - c1, d, tid);
      }
    }
    cp_async_commit();

    if (cls != FA_TILE_EMPTY) {
      if (capped) softcap_tile(s, a.p.scale, a.p.softcap);

      if (cls == FA_TILE_PARTIAL) fa2_mask_scores(s, c0, row_lo, row_hi, t);
      fa2_softmax_pv<Tr, MT, NB, DB, TL>(s, o, row_max, row_sum, sl2, tV, lane);
    }
  }
  cp_async_wait<0>();

  /* Epilogue: finish the row sums, normalise, store the LSE (natural log), and O through the
     warp's own rows of the Q tile (no other warp reads them) so the stores are 16 bytes wide.
     Without a key tile no barrier has followed the Q tile's copies, which other threads
     issued. */
  if (n_begin >= n_end) __syncthreads();
  /* The lanes' last ldmatrix reads of these rows happen before any lane overwrites them: in
     practice through the data dependence, by the programming model only after a warp sync
     (compute-sanitizer racecheck reports the hazard without it, seen with one key tile). */
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = fa_softmax_out_scale(l);
      const int row_l = warp_row0 + mt * 16 + g + 8 * r;
#pragma unroll
      for (int db = 0; db < DB; ++db)
        *reinterpret_cast<uint32_t *>(sQ +
                                      TL::off8(warp_row0 + mt * 16 + 8 * r, g, db * 8 + 2 * t)) =
            Tr::pack(o[mt][db][2 * r] * inv, o[mt][db][2 * r + 1] * inv);
      const int i = m0 + row_l;
      if (a.lse && t == 0 && i < seqlen_q) {
        const float m_nat = row_max[mt][r] * sl2 * CUDA_LN2;
        a.lse[b * a.lse_str.batch + h * a.lse_str.head + (int64_t)i * a.lse_str.row] =
            l > 0.0f ? m_nat + logf(l) : -INFINITY;
      }
    }
  __syncthreads();
  E *out = static_cast<E *>(a.out) + b * a.o_str.batch + h * a.o_str.head;
  tile_store<BM, HD, NT, TL>(out + (int64_t)m0 * a.o_str.row, a.o_str.row, seqlen_q - m0, d, sQ,
                             tid);
}

#endif /* FA_CUDA_FA2_FWD_CUH */
