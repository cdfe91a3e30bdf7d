/*
 * fa3_fwd_epilogue.cuh: a FlashAttention-3 forward tile's end: O / l and the LSE (natural log) of
 * each consumer thread's two rows, written straight to global memory from the accumulators, or
 * (TMA_EPILOGUE) into shared memory in Q's swizzled layout for the store thread's TMA store
 * (fa3_store_o, fa3_store_o_staged); and a tile whose rows see no key (zeros, LSE -inf).
 */
#ifndef FA_CUDA_FA3_FWD_EPILOGUE_CUH
#define FA_CUDA_FA3_FWD_EPILOGUE_CUH

#include <math.h>

#include "../common/sm90_async.cuh"
#include "core/math/softmax.h"
#include "fa3_col_boxes.cuh"
#include "fa3_fwd_block.cuh"
#include "fa3_softmax.cuh"

/* The TMA store of a tile's output (its coordinates tf) from its Q buffer buf (64-column boxes
   of boxq bytes, as the Q load wrote them), waiting until TMA has read the buffer so that a later
   Q may be loaded there. by_slab (SHORT_BLOCK_FIRST without packing: O's box is 64 rows): the
   slabs that hold the tile's rows, each a store, so that a short first block writes none of the
   next block's rows; else one box, the whole tile. */
template <bool SEQS>
__device__ __forceinline__ void fa3_store_o(const fa3_fwd_args &A, const fa3_tile &tf,
                                            const unsigned char *buf, int boxq, bool by_slab) {
  const int slabs = by_slab ? (tf.m_end - tf.m0 + 63) / 64 : 1;
  int y, w;
  fa3_rows_at<SEQS>(tf, A.q_ext, A.o_batch_rows, false, tf.m0, y, w);
  for (int sb = 0; sb < slabs; ++sb)
    for (int cb = 0; cb * 64 < A.a.p.head_dim; ++cb)
      tma_store_4d(A.to, buf + cb * boxq + sb * 64 * 128, cb * 64, y + 64 * sb, tf.h, w);
  bulk_commit();
  bulk_wait_read<0>();
}

/* EPILOGUE_IN_KV_STAGE: the TMA store of a tile's output from the two consumers' regions (64 rows
   each, in 64-column boxes of 64 x 128 bytes; the O tensor map's box is 64 rows of a query head,
   or of several packed ones). Consumer 1's rows start 64 rows into the tile: at that position of
   the first head, or (rows per head <= 64) at a later head. */
template <bool SEQS>
__device__ __forceinline__ void fa3_store_o_staged(const fa3_fwd_args &A, const fa3_tile &tf,
                                                   const unsigned char *c0, const unsigned char *c1,
                                                   int rows) {
  for (int c = 0; c < 2; ++c) {
    const unsigned char *region = c ? c1 : c0;
    const int head = (64 * c) / rows, pos = (64 * c) % rows;
    int y, w;
    fa3_rows_at<SEQS>(tf, A.q_ext, A.o_batch_rows, false, tf.m0 + pos, y, w);
    for (int cb = 0; cb * 64 < A.a.p.head_dim; ++cb)
      tma_store_4d(A.to, region + cb * 64 * 128, cb * 64, y, tf.h + head, w);
  }
  bulk_commit();
  bulk_wait_read<0>();
}

/* Where row i (from the sequence's first) of query head h of tile tf's batch goes in the lse
   tensor, and its output row: the sequence's packed rows (SEQS) or the batch's. */
template <bool SEQS>
__device__ __forceinline__ int64_t fa3_lse_at(const fa3_fwd_args &A, const fa3_tile &tf, int h,
                                              int i) {
  const cuda_lse_strides &st = A.a.lse_str;
  return SEQS ? seq_lse_at(A.ix, st, tf.b, h, tf.q_start, i)
              : tf.b * st.batch + h * st.head + (int64_t)i * st.row;
}
template <typename E>
__device__ __forceinline__ E *fa3_out_row(const fa3_fwd_args &A, const fa3_tile &tf, int h, int i) {
  const cuda_strides &st = A.a.o_str;
  return static_cast<E *>(A.a.out) + tf.b * st.batch + h * st.head +
         ((int64_t)tf.q_start + i) * st.row;
}

/* The output of tile kt for consumer thread me: O / l and the LSE in natural log (sum, mx: the
   rows' running sum and max). Straight from the accumulators to global memory (4-byte stores of
   the real head dim's columns), or (TMA_EPILOGUE) into Q buffer qbuf in Q's swizzled layout for
   the store thread's TMA store, or (EPILOGUE_IN_KV_STAGE) into this consumer's region of K/V
   stage ls (64-row boxes). The tile's coordinates are read again from q_info (TMA_EPILOGUE: slot
   `slot` is still this tile's) or computed again from an opaque copy of kt, rather than kept in
   registers through the main loop (at head dim 256 that spilled). */
template <typename Tr, int HD, int WGS, int BN, int FLAGS>
__device__ __forceinline__ void fa3_fwd_epilogue(
    const fa3_fwd_args &A, const fa3_fwd_smem &S, const fa3_consumer &me, int kt, int total,
    int hb_count, const float (&o)[fa3_fwd_traits<HD, WGS, BN, FLAGS>::NP / 2],
    const float (&sum)[2], const float (&mx)[2], int qbuf, int slot, int ls) {
  typedef fa3_fwd_traits<HD, WGS, BN, FLAGS> K;
  typedef typename Tr::elem E;
  const cuda_fwd_args &a = A.a;
  const int c = me.c, t = me.t, rl = me.rl;
  fa3_tile tf;
  if (K::TMA_EPI) { /* still published: the slot is handed back after the store */
    tf = S.q_info[slot];
  } else {
    int k_again = kt;
    asm volatile("" : "+r"(k_again));
    fa3_tile_of<K::BM, BN, K::LPT, K::SHORT_FIRST>(k_again, total, hb_count, A, tf);
  }
  /* IN_KV: consumer 0 writes into the K stage once consumer 1's last Q Kᵀ has read it (named
     barrier 3), consumer 1 into the V stage once consumer 0's last P V has (4). */
  if (K::IN_KV) bar_sync(3 + c, 256);
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float l = fa3_row_sum<K::NP, K::ROW_SUM>(o, sum, w), inv = fa_softmax_out_scale(l);
    int head, pos;
    fa3_row_of<K::BM>(A, rl + 8 * w, head, pos);
    const int i = tf.m0 + pos;
    if (K::TMA_EPI) {
      /* Row rl + 8 w of each 64-column box (IN_KV: row rl - 64 c of this consumer's boxes of 64
         rows); 16-byte chunk j % 8 swizzled by the row's position in its 8-row atom, lane / 4
         (rows past seqlen_q are not stored by TMA). Zeros in a box that the loads skip
         (fa3_col_boxes.cuh), whatever P V left in those columns. */
      const bool last_loaded = !K::SEQS || K::CB != 4 || fa3_col_boxes(a.p.head_dim) == 4;
      unsigned char *row = K::IN_KV ? (c == 0 ? S.k : S.v) + ls * K::CB * K::BOXK +
                                          (rl - 64 * c + 8 * w) * 128 + 4 * t
                                    : S.q + qbuf * K::CB * K::BOXQ + (rl + 8 * w) * 128 + 4 * t;
      constexpr int box = K::IN_KV ? 64 * 128 : K::BOXQ;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j)
        *reinterpret_cast<uint32_t *>(row + (j / 8) * box + (((j % 8) ^ (me.lane / 4)) * 16)) =
            j / 8 < K::CB - 1 || last_loaded
                ? Tr::pack(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv)
                : 0u;
    } else if (i < a.p.seqlen_q) {
      E *out = fa3_out_row<E>(A, tf, tf.h + head, i);
#pragma unroll
      for (int j = 0; j < HD / 8; ++j)
        if (8 * j < a.p.head_dim)
          *reinterpret_cast<uint32_t *>(out + 8 * j + 2 * t) =
              Tr::pack(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv);
    }
    if (a.lse && t == 0 && i < (K::SEQS ? tf.sq : a.p.seqlen_q))
      a.lse[fa3_lse_at<K::SEQS>(A, tf, tf.h + head, i)] = fa3_row_lse(mx[w], l, me.sl2);
  }
  if (K::TMA_EPI) {
    fence_proxy_async_smem();
    mbar_arrive(K::IN_KV ? &S.o_ready[slot] : &S.q_empty[qbuf]);
  }
}

/* A tile whose rows see no key (no Q loaded): zeros and an LSE of -inf, straight to memory. */
template <typename Tr, int BM, bool SEQS>
__device__ __forceinline__ void fa3_fwd_epilogue_empty(const fa3_fwd_args &A, const fa3_fwd_smem &S,
                                                       const fa3_consumer &me, int slot) {
  typedef typename Tr::elem E;
  const cuda_fwd_args &a = A.a;
  const fa3_tile tf = S.q_info[slot]; /* released after this */
  for (int w = 0; w < 2; ++w) {
    int head, pos;
    fa3_row_of<BM>(A, me.rl + 8 * w, head, pos);
    const int i = tf.m0 + pos;
    if (i >= tf.m_end) continue; /* a short block's (the sequence's end, or SHORT_BLOCK_FIRST) */
    E *out = fa3_out_row<E>(A, tf, tf.h + head, i);
    for (int col = 2 * me.t; col < a.p.head_dim; col += 8)
      *reinterpret_cast<uint32_t *>(out + col) = 0u;
    if (a.lse && me.t == 0) a.lse[fa3_lse_at<SEQS>(A, tf, tf.h + head, i)] = -INFINITY;
  }
}

#endif /* FA_CUDA_FA3_FWD_EPILOGUE_CUH */
