/*
 * fa3_fwd_scheduler.cuh: which tile a FlashAttention-3 forward block works on. One block per tile
 * (64 x consumers query rows of one query head and batch; with GQA packing, rows of 2^pack_log2
 * query heads sharing a K/V head), or with a persistent grid at most one per SM looping over
 * tiles: the static deal (block b: tiles b, b + grid, ...) or the dynamic schedule (the next tile
 * from a global counter, in fa3_tile_scheduler.h's order). The producer computes each tile's
 * record and publishes it to the consumers with the tile's Q.
 */
#ifndef FA_CUDA_FA3_FWD_SCHEDULER_CUH
#define FA_CUDA_FA3_FWD_SCHEDULER_CUH

#include "../common/attn_common.cuh"
#include "core/math/mask.h"
#include "fa3_args.h"
#include "fa3_tile_scheduler.h"

/* One tile of the grid's work: query block m0.. (rows_per_head positions) of query heads h ..
   h + 2^pack_log2 - 1 (GQA packing: heads of one K/V head, the tile's rows head-major), K/V head
   hk, batch b, and the key tiles n_begin..n_end that hold keys for any of its rows; m_end: the
   end of its rows (per packed head), seqlen_q at most. */
struct fa3_tile {
  int m0, m_end, h, hk, b, n_begin, n_end;
};
/* The grid's tiles: (query heads / pack) x batch head groups, each of ceil(seqlen_q / rows per
   head) query blocks. */
template <int BM>
__device__ __forceinline__ void fa3_grid_of(const fa3_fwd_args &A, int &hb_count, int &total) {
  const int rows = BM >> A.pack_log2;
  hb_count = (A.a.p.heads_q >> A.pack_log2) * A.a.p.batch;
  total = (A.a.p.seqlen_q + rows - 1) / rows * hb_count;
}
/* Tile k of the grid: with the dynamic schedule (LPT) in fa3_sched_lpt_tile's order, largest first
   within chunks of (head, batch) pairs; else (head, batch) pair k / num_m, its query blocks from
   the last (under a causal mask the largest) on. SHORT_FIRST: the blocks cut from the sequence's
   end (fa3_sched_query_block), so that the short one comes first. */
template <int BM, int BN, bool LPT, bool SHORT_FIRST>
__device__ __forceinline__ void fa3_tile_of(int k, int total, int hb_count, const fa3_fwd_args &A,
                                            fa3_tile &ti) {
  const cuda_problem &p = A.a.p;
  const fa_mask mask = cuda_mask_of(p); /* from the parameter space: no registers kept */
  const int num_m = total / hb_count, rows = BM >> A.pack_log2;
  const int groups = p.heads_q >> A.pack_log2;
  int hb, m_idx;
  if (LPT) { /* chunks of (head, batch) pairs, the remainder first; largest first in each */
    fa3_sched_lpt_tile(k, num_m, hb_count, A.chunk, &m_idx, &hb);
  } else {
    hb = k / num_m;
    m_idx = k % num_m;
  }
  fa3_sched_query_block(m_idx, num_m, p.seqlen_q, rows, 64, SHORT_FIRST && A.pack_log2 == 0, &ti.m0,
                        &ti.m_end);
  ti.h = (hb % groups) << A.pack_log2;
  ti.b = hb / groups;
  ti.hk = ti.h / (p.heads_q / p.heads_kv);
  int64_t lo, hi;
  fa_mask_key_range(&mask, ti.m0, p.seqlen_k, &lo, &hi);
  const int lo_first = (int)lo; /* key indices fit int: seqlen_k is one */
  fa_mask_key_range(&mask, ti.m_end - 1, p.seqlen_k, &lo, &hi);
  const int hi_last = (int)hi;
  ti.n_begin = lo_first / BN;
  ti.n_end = hi_last > lo_first ? (hi_last + BN - 1) / BN : ti.n_begin;
}

/* OWN_KEY_END: the end of consumer c's key tiles in tile ti: past the last key its 64 rows see
   (each row's end grows with the row), at least one tile (rows that see no key take the masked
   path and write zeros). The whole tile where its rows are packed heads or all past the tile's
   (the idle consumer releases its stages itself), or where the tile has no key tile. */
template <int BN>
__device__ __forceinline__ int fa3_own_end(const fa3_fwd_args &A, const fa3_tile &ti, int c) {
  const cuda_problem &p = A.a.p;
  const int first = ti.m0 + 64 * c;
  if (A.pack_log2 != 0 || first >= ti.m_end || ti.n_end == ti.n_begin) return ti.n_end;
  const fa_mask mask = cuda_mask_of(p);
  int64_t lo, hi;
  fa_mask_key_range(&mask, min(first + 63, ti.m_end - 1), p.seqlen_k, &lo, &hi);
  return max(min((int)((hi + BN - 1) / BN), ti.n_end), ti.n_begin + 1);
}

/* A tile row's query head (offset from the tile's first) and position (offset from m0): the rows
   are rows_per_head positions of each packed head in turn. */
template <int BM>
__device__ __forceinline__ void fa3_row_of(const fa3_fwd_args &A, int rr, int &head, int &pos) {
  if (A.pack_log2 == 0) {
    head = 0;
    pos = rr;
  } else {
    const int rows = BM >> A.pack_log2;
    head = rr / rows;
    pos = rr - head * rows;
  }
}

/* The block's j-th tile under the static deal: round j of gridDim.x tiles, in block order. */
__device__ __forceinline__ int fa3_tile_index(int j) {
  return j * (int)gridDim.x + (int)blockIdx.x;
}

/* The block's next tile (its first is blockIdx.x): from the counter (DYNAMIC, a grid's worth
   past the first tiles) or the static deal's next round (j: the rounds taken so far). */
template <bool DYNAMIC>
__device__ __forceinline__ int fa3_next_tile(const fa3_fwd_args &A, int &j) {
  return DYNAMIC ? (int)gridDim.x + atomicAdd(A.tile_counter, 1) : fa3_tile_index(++j);
}

#endif /* FA_CUDA_FA3_FWD_SCHEDULER_CUH */
