/*
 * fa3_bwd_scheduler.cuh: which key tiles a FlashAttention-3 backward block works on, and each key
 * tile's steps (fa3_tile_scheduler.h: the order; fa3_bwd_grid_blocks: the grid).
 */
#ifndef FA_CUDA_FA3_BWD_SCHEDULER_CUH
#define FA_CUDA_FA3_BWD_SCHEDULER_CUH

#include "../common/seq_index.cuh"
#include "../common/sm90_async.cuh"
#include "core/math/mask.h"
#include "fa3_args.h"
#include "fa3_tile_scheduler.h"

/* A key tile's work: its first key, and its steps (query head of the group, query tile): every
   query tile m_begin.. (m_count of them) that holds a row seeing one of its keys
   (core/math/mask.h's row range), for each query head of the group. */
struct fa3_bwd_tile {
  int n0, m_begin, m_count, steps;
};
__device__ __forceinline__ fa3_bwd_tile fa3_bwd_tile_of(const fa_mask &mask, int n, int bm, int bn,
                                                        int seqlen_q, int seqlen_k, int group) {
  fa3_bwd_tile T;
  T.n0 = n * bn;
  int64_t r_lo, r_hi;
  fa_mask_row_range(&mask, T.n0, min(T.n0 + bn, seqlen_k), seqlen_q, &r_lo, &r_hi);
  T.m_begin = (int)(r_lo / bm);
  T.m_count = r_hi > r_lo ? (int)((r_hi + bm - 1) / bm) - T.m_begin : 0;
  T.steps = group * T.m_count;
  return T;
}

/* The block's key tiles (items below fa3_bwd_items): the producer takes w = blockIdx.x, then
   w + gridDim.x, ... (the fixed deal) or, with A.tile_counter, gridDim.x + the counter's next
   value (the dynamic schedule: a block takes the next item when it is free); in the narrow
   kernels it publishes each to the consumers and the dQ writer (fa3_bwd_take_item), in the wide
   one every role walks the fixed deal itself. The default grid has a block per key tile (x), K/V
   head (y) and batch (z); deterministic mode a block per split (x) of the key tiles of K/V head y,
   batch z; the persistent grid (A.grid_blocks blocks in x) walks the tiles of every K/V head and
   batch: without a mask the key tile fastest, so that the blocks running together share a head's Q
   and dO in L2; under one in fa3_bwd_sched's order (the longest tiles first within chunks of
   heads). */
struct fa3_bwd_item {
  int n, hk, b;
};
__device__ __forceinline__ int fa3_bwd_items(const fa3_bwd_args &A, int n_tiles) {
  return A.grid_blocks > 0 ? n_tiles * A.a.p.heads_kv * A.a.p.batch : n_tiles;
}
__device__ __forceinline__ fa3_bwd_item fa3_bwd_item_of(const fa3_bwd_args &A, int w, int n_tiles) {
  fa3_bwd_item I;
  if (A.grid_blocks > 0 && A.sched_chunk > 0) {
    const int pairs = A.a.p.heads_kv * A.a.p.batch;
    int longest, pair;
    fa3_sched_lpt_tile(w, n_tiles, pairs, A.sched_chunk, &longest, &pair);
    I.n = A.sched_reverse ? n_tiles - 1 - longest : longest;
    I.hk = pair % A.a.p.heads_kv;
    I.b = pair / A.a.p.heads_kv;
  } else if (A.grid_blocks > 0) {
    const int r = w / n_tiles;
    I.n = w - r * n_tiles;
    I.hk = r % A.a.p.heads_kv;
    I.b = r / A.a.p.heads_kv;
  } else {
    I.n = w;
    I.hk = blockIdx.y;
    I.b = blockIdx.z;
  }
  return I;
}

/* SEQS (the backward over sequences of their own lengths, narrow kernels): an item as the producer
   publishes it to the consumers and the dQ writer: key tile n of K/V head hk of sequence b, the
   sequence's query rows [q_start, q_start + sq) of q and its keys [k_start, k_start + k_rows) of
   k, of which the first sk are used (q_start, k_start 0 where padded). Every key tile of the keys
   it holds is an item (those past its used keys have no steps: their dK and dV are zeros). */
struct fa3_bwd_seq_item {
  int n, hk, b, q_start, sq, k_start, k_rows, sk;
};
/* The sequence the producer has reached: its first item's index (item indices only grow). */
struct fa3_bwd_cursor {
  int b, base;
};
/* Item w of the sequences' items, the cursor moved forward to its sequence: sequence by sequence,
   each its K/V heads in turn, a head's key tiles from the first (the longest under a causal-type
   mask) or, with sched_reverse (a left bound only), from the last. false past the last. */
template <int BN>
__device__ __forceinline__ bool fa3_bwd_seq_item_of(int w, fa3_bwd_cursor &cur,
                                                    const fa3_bwd_args &A, fa3_bwd_seq_item &I) {
  const cuda_bwd_args &a = A.a;
  seq_rows r;
  int n_tiles;
  for (;;) {
    if (cur.b >= a.p.batch) return false;
    r = seq_rows_of(a.ix, cur.b, a.p.seqlen_q, a.p.seqlen_k, a.ix.cu_k != nullptr);
    n_tiles = (r.k_rows + BN - 1) / BN;
    if (w - cur.base < n_tiles * a.p.heads_kv) break;
    cur.base += n_tiles * a.p.heads_kv;
    ++cur.b;
  }
  const int within = w - cur.base, n = within % n_tiles;
  I.n = A.sched_reverse ? n_tiles - 1 - n : n;
  I.hk = within / n_tiles;
  I.b = cur.b;
  I.q_start = r.q_start;
  I.sq = r.sq;
  I.k_start = r.k_start;
  I.k_rows = r.k_rows;
  I.sk = r.sk;
  return true;
}

/* An item's key tile, K/V head and batch: its published record's (SEQS) or item w's. */
template <bool SEQS>
__device__ __forceinline__ fa3_bwd_item fa3_bwd_item_at(const fa3_bwd_args &A, int w, int n_tiles,
                                                        const fa3_bwd_seq_item &R) {
  if (!SEQS) return fa3_bwd_item_of(A, w, n_tiles);
  fa3_bwd_item I;
  I.n = R.n, I.hk = R.hk, I.b = R.b;
  return I;
}

/* An item's key tile and steps: the problem's (fa3_bwd_tile_of), or (SEQS) its sequence's under
   its own mask, none for a key tile past the sequence's used keys. */
template <bool SEQS>
__device__ __forceinline__ fa3_bwd_tile fa3_bwd_seq_tile_of(const fa_mask &mask,
                                                            const fa3_bwd_seq_item &R, int n,
                                                            int bm, int bn, int seqlen_q,
                                                            int seqlen_k, int group,
                                                            const cuda_seq_index &ix) {
  if (!SEQS) return fa3_bwd_tile_of(mask, n, bm, bn, seqlen_q, seqlen_k, group);
  const fa_mask mk = seq_mask_of(ix, R.sq, R.sk);
  fa3_bwd_tile T = fa3_bwd_tile_of(mk, n, bm, bn, R.sq, R.sk, group);
  if (T.n0 >= R.sk) T.m_count = T.steps = 0;
  return T;
}

/* The block's `loaded`-th item (in K/V slot loaded % kv_st) for a consumer or the dQ writer,
   once the producer has published it: -1 when none is left. The producer reuses the slot once
   the consumers' threads (after the item's steps) and the writer's lanes (once they have read
   it) have arrived on its kv_empty. */
__device__ __forceinline__ int fa3_bwd_take_item(uint64_t *item_full, const int *kv_item,
                                                 int loaded, int kv_st) {
  const int slot = loaded % kv_st;
  mbar_wait(item_full + slot, (loaded / kv_st) & 1);
  return kv_item[slot];
}

#endif /* FA_CUDA_FA3_BWD_SCHEDULER_CUH */
