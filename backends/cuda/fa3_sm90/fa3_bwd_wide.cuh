/*
 * fa3_bwd_wide.cuh: the consumers of the FlashAttention-3 backward at head dim 256 (192 runs on
 * it); the kernel, its producer and the shared-memory layout are fa3_bwd_kernel.cuh's.
 *
 * At head dim 256 the narrow kernel's split (each consumer 64 of 128 keys, dK and dV of its keys
 * in registers) would need 256 accumulator registers a thread. Here a block owns 64 keys and both
 * consumers see all of them; consumer c owns the head-dim columns 128 c .. 128 c + 127 of dK and
 * dV (64 + 64 registers) and the queries 32 c .. 32 c + 31 of each step's Sᵀ and dPᵀ:
 *   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ        wgmma from shared memory (M = 64 keys, N = its 32 queries)
 *   Pᵀ, dSᵀ                        as the narrow kernel's (core/math/backward.h), then written (its
 * 32 queries) into the stage's Pᵀ and dSᵀ tiles, rows = keys (both consumers' halves written: a
 * named barrier) dV += Pᵀ dO, dK += dSᵀ Q       its 128 columns over all 64 queries, A = Pᵀ / dSᵀ
 * K-major dQ = dS K                      its 128 columns in two pieces of 64 (N = 64, 64 keys), A =
 * the dSᵀ tile read MN-major (as dS); each piece added to the fp32 accumulator from registers: one
 * 16-byte red.global.add a thread and 8 columns, in the fragment layout (CUDA_DQ_FRAGMENT: a
 * warp's 32 adds cover 512 contiguous bytes), so no staging tile and no writer warp A dQ element
 * gets one addition a key tile, from one thread; in deterministic mode (one accumulator a split,
 * its key tiles in order) those come in program order, so the sums repeat bitwise without waiting
 * for them.
 */
#ifndef FA_CUDA_FA3_BWD_WIDE_CUH
#define FA_CUDA_FA3_BWD_WIDE_CUH

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "../common/attn_common.cuh"
#include "fa3_args.h"
#include "fa3_bwd_block.cuh"
#include "fa3_bwd_epilogue.cuh"
#include "fa3_bwd_scheduler.cuh"
#include "fa3_bwd_step.cuh"
#include "fa3_mma.cuh"
#include "fa3_softmax.cuh"

/* Writes one consumer's 32 queries of Pᵀ (or dSᵀ), packed as A fragments (fa3_pack_p: pa[kk][i]
   is the 8 x 8 matrix of keys 16 warp + 8 (i & 1).., queries 16 kk + 8 (i >> 1)..), into the
   stage's 64 keys x 64 queries tile at query 32 c: rows = keys, 128-byte swizzled: the K-major A
   operand of dV += Pᵀ dO (and dK += dSᵀ Q); read MN-major, dQ's A operand dS. */
__device__ __forceinline__ void fa3_bwd_store_keys_rows(const uint32_t (&pa)[2][4], uint32_t tile,
                                                        int c, int warp, int lane) {
  const int i = lane >> 3, r = lane & 7, key = 16 * warp + 8 * (i & 1) + r;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk)
    stmatrix_x4(tile + key * 128 + (((4 * c + 2 * kk + (i >> 1)) ^ r) << 4), pa[kk]);
}

/* d (+)= A B over the step's 64 queries: A = a Pᵀ or dSᵀ tile (K-major), B = 128 columns of dO
   or Q (MN-major, two 64-column boxes QBOX bytes apart). */
template <int QBOX, bool F16>
__device__ __forceinline__ void fa3_bwd_issue_keys_rows(float (&d)[64], const unsigned char *pt,
                                                        const unsigned char *b) {
  const uint64_t da = wgmma_desc_sw128_at(smem_addr_opaque(pt), 16, 1024);
  const uint64_t db = wgmma_desc_sw128_at(smem_addr_opaque(b), QBOX, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_n<128>::template ss<1, F16>(d, da + ((kk * 32) >> 4), db + ((kk * 2048) >> 4), 1);
}

/* dQ's 64 columns of one K box = dS K: A = the dSᵀ tile read MN-major (rows = keys, queries along
   the row), B = the K box MN-major; k-step 16 keys (2048 bytes of both). */
template <bool F16>
__device__ __forceinline__ void fa3_bwd_issue_dq_piece(float (&d)[32], const unsigned char *dst,
                                                       const unsigned char *kbox) {
  const uint64_t da = wgmma_desc_sw128_at(smem_addr_opaque(dst), 8192, 1024);
  const uint64_t db = wgmma_desc_sw128_at(smem_addr_opaque(kbox), 8192, 1024);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma_n<64>::template ss<1, F16, 1>(d, da + ((ks * 2048) >> 4), db + ((ks * 2048) >> 4),
                                        ks > 0);
}

/* Adds a warp's 16 rows x 64 columns of dQ to the accumulator in the fragment layout: blocks
   (16-row block, 8-column block) of 128 floats, lane (g, t)'s four values of columns 8 j.. at
   4 (4 g + t) (fa2_args.h, CUDA_DQ_FRAGMENT); blocks points at the warp's first block. */
__device__ __forceinline__ void fa3_bwd_add_dq_piece(const float (&d)[32], float *blocks, int g,
                                                     int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* red_add_v4_f32 is sm_90's (ptx.cuh) */
  float *p = blocks + 4 * (4 * g + t);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    red_add_v4_f32(p + 128 * j, d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
#else
  (void)d, (void)blocks, (void)g, (void)t;
#endif
}

/* Consumer c (0 or 1) of the wide kernel: every key tile of the block, every step of it. The
   block's items are the fixed deal's (w = blockIdx.x, + gridDim.x, ...), which each role walks
   itself; SEQS: the sequences' items (fa3_bwd_seq_item_of, a cursor of the consumer's own, as the
   producer's), each under its sequence's lengths and mask, its dQ rows the sequence's rows of the
   workspace (seq_bwd_ws_row) and its dK and dV rows the sequence's keys. */
template <typename Tr, int HD, bool SEQS>
__device__ __forceinline__ void fa3_bwd_consume_wide(const fa3_bwd_args &A, unsigned char *sm,
                                                     float *dq_acc, int c, int tid) {
  typedef fa3_bwd_layout<HD> L;
  constexpr bool F16 = Tr::is_f16;
  constexpr int BM = L::BM, BN = L::BN;
  static_assert(BN == 64 && BM == 64 && HD == 256, "the wide decomposition's shape");
  const cuda_bwd_args &a = A.a;
  uint64_t *bars = reinterpret_cast<uint64_t *>(sm + L::BARS);
  uint64_t *kv_full = bars + L::KV_FULL, *kv_empty = bars + L::KV_EMPTY;
  uint64_t *full = bars + L::FULL, *empty = bars + L::EMPTY;
  static_assert(L::KV_ST == 1, "one K/V buffer");
  const int seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;
  const int group = a.p.heads_q / a.p.heads_kv;
  const fa_mask mask = cuda_mask_of(a.p);
  const int n_tiles = (seqlen_k + BN - 1) / BN, items = fa3_bwd_items(A, n_tiles);
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const float sl2 = a.p.scale * CUDA_LOG2E;
  const int q_off = 32 * c * 128; /* this consumer's queries in a Q or dO box */

  int it = 0, loaded = 0; /* as the producer's */
  fa3_bwd_cursor cur = {0, 0};
  for (int w = blockIdx.x;; w += gridDim.x) {
    fa3_bwd_seq_item R;
    if (SEQS ? !fa3_bwd_seq_item_of<BN>(w, cur, A, R) : w >= items) break;
    /* The item's sequence: its rows, keys and mask (SEQS), else the problem's. */
    int sq = seqlen_q, sk = seqlen_k, k_rows = seqlen_k, k_start = 0;
    fa_mask mk = mask;
    if constexpr (SEQS) {
      sq = R.sq, sk = R.sk, k_rows = R.k_rows, k_start = R.k_start;
      mk = seq_mask_of(a.ix, sq, sk);
    }
    const fa3_bwd_item I = fa3_bwd_item_at<SEQS>(A, w, n_tiles, R);
    const int hk = I.hk, b = I.b;
    const fa3_bwd_tile T =
        fa3_bwd_seq_tile_of<SEQS>(mask, R, I.n, BM, BN, seqlen_q, seqlen_k, group, a.ix);
    int full_lo, full_hi; /* the query rows that see all 64 keys: no mask test */
    fa3_bwd_full_rows(mk, T.n0, T.n0 + BN, sq, sk, full_lo, full_hi);
    float dk[64], dv[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.0f;
    if (T.steps > 0) mbar_wait(kv_full, loaded & 1);

    int h = hk * group, mt = T.m_begin;
    for (int i = 0; i < T.steps; ++i, ++it) {
      const int st = it & 1, m0 = mt * BM, head = h;
      if (++mt == T.m_begin + T.m_count) mt = T.m_begin, ++h;
      const unsigned char *q = sm + L::Q + st * L::Q_BYTES, *dO = sm + L::DO + st * L::Q_BYTES;
      unsigned char *pt = sm + L::DS + st * L::DS_BYTES, *dst = pt + L::DS_HALF;
      const float *lsed = reinterpret_cast<const float *>(sm + L::LSED + st * 2 * BM * 4) + 32 * c;
      mbar_wait(full + st, (it >> 1) & 1);

      float s[16], dp[16];
      wgmma_fence();
      fa3_issue_s<HD, 32, L::KV_BOX, L::Q_BOX, F16>(s, sm + L::K, q + q_off);
      wgmma_commit();
      fa3_issue_s<HD, 32, L::KV_BOX, L::Q_BOX, F16>(dp, sm + L::V, dO + q_off);
      wgmma_commit();
      if (i > 0) { /* the last step's dV and dK (below): its stage goes back to the producer */
        wgmma_wait<2>();
        wgmma_fence_regs(dv);
        wgmma_fence_regs(dk);
        if (tid == 0) mbar_arrive(empty + (st ^ 1));
      }
      wgmma_wait<1>();
      wgmma_fence_regs(s);
      const int r0 = m0 + 32 * c;
      if (r0 < full_lo || min(r0 + 32, sq) > full_hi)
        fa3_bwd_p<true, 32>(s, lsed, sl2, mk, r0, T.n0, sk, warp, g, t);
      else
        fa3_bwd_p<false, 32>(s, lsed, sl2, mk, r0, T.n0, sk, warp, g, t);
      uint32_t pa[2][4];
      fa3_pack_p<Tr, 32>(s, pa);
      /* The stage's tiles were last read by the wgmmas of two steps ago, which both consumers
         waited for before the last step's barrier. */
      fa3_bwd_store_keys_rows(pa, smem_u32(pt), c, warp, lane);
      /* Holds dPᵀ's wait below the exponentials (ptxas hoists it: fa3_bwd_kernel.cuh). */
      bar_sync(FA3_BWD_BAR_PIN + c, 128);
      wgmma_wait<0>();
      wgmma_fence_regs(dp);
      fa3_bwd_ds<32>(s, dp, lsed, t);
      fa3_pack_p<Tr, 32>(dp, pa);
      fa3_bwd_store_keys_rows(pa, smem_u32(dst), c, warp, lane);
      fence_proxy_async_smem(); /* the generic stores, before the async proxy's wgmma reads */
      bar_sync(FA3_BWD_BAR_DS, 256);

      /* dQ first, so that its additions run under dV's and dK's wgmmas; those are waited for
         once the next step's Sᵀ and dPᵀ are issued, so the tensor pipe goes on across the step's
         end. */
      float dq0[32], dq1[32];
      wgmma_fence();
      fa3_bwd_issue_dq_piece<F16>(dq0, dst, sm + L::K + 2 * c * L::KV_BOX);
      wgmma_commit();
      fa3_bwd_issue_dq_piece<F16>(dq1, dst, sm + L::K + (2 * c + 1) * L::KV_BOX);
      wgmma_commit();
      fa3_bwd_issue_keys_rows<L::Q_BOX, F16>(dv, pt, dO + 2 * c * L::Q_BOX);
      wgmma_commit();
      fa3_bwd_issue_keys_rows<L::Q_BOX, F16>(dk, dst, q + 2 * c * L::Q_BOX);
      wgmma_commit();
      /* The warp's first 16-row, 8-column block of this step's dQ columns 128 c.. (the head's
         rows start at a multiple of the query tile: whole blocks) */
      const int64_t row0 = SEQS ? seq_bwd_ws_row(a, b, head, R.q_start)
                                : ((int64_t)b * a.p.heads_q + head) * a.seqlen_q_padded;
      float *blocks = dq_acc + row0 * HD + ((int64_t)(m0 / 16 + warp) * (HD / 8) + 16 * c) * 128;
      wgmma_wait<3>();
      wgmma_fence_regs(dq0);
      fa3_bwd_add_dq_piece(dq0, blocks, g, t);
      wgmma_wait<2>();
      wgmma_fence_regs(dq1);
      fa3_bwd_add_dq_piece(dq1, blocks + 8 * 128, g, t);
    }
    /* The last step's dV and dK (unconditional: ptxas then sees every path wait before the
       epilogue reads them); its stage, and K and V, go back. */
    wgmma_wait<0>();
    wgmma_fence_regs(dv);
    wgmma_fence_regs(dk);
    if (T.steps > 0) {
      if (tid == 0) {
        mbar_arrive(empty + ((it - 1) & 1));
        mbar_arrive(kv_empty);
      }
      ++loaded;
    }
    fa3_bwd_store_dkv<Tr, 128>(dk, dv, a, hk, b, T.n0, 128 * c, warp, g, t, k_rows, k_start);
  }
}

#endif /* FA_CUDA_FA3_BWD_WIDE_CUH */
