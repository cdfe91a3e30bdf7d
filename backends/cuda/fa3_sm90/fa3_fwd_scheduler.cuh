/*
 * fa3_fwd_scheduler.cuh: which tile a FlashAttention-3 forward block works on. One block per tile
 * (64 x consumers query rows of one query head and batch; with GQA packing, rows of 2^pack_log2
 * query heads sharing a K/V head), or with a persistent grid at most one per SM looping over
 * tiles: the static deal (block b: tiles b, b + grid, ...) or the dynamic schedule (the next tile
 * from a global counter, in fa3_tile_scheduler.h's order). The producer computes each tile's
 * record and publishes it to the consumers with the tile's Q. Over sequences (SEQS), the tiles are
 * each sequence's in turn (fa3_seq_tile_of), and each tile's rows and keys are those of the
 * sequence's own lengths and places (fa3_rows_at: the coordinates of fa3_seq_tensor_map's views).
 */
#ifndef FA_CUDA_FA3_FWD_SCHEDULER_CUH
#define FA_CUDA_FA3_FWD_SCHEDULER_CUH

#include <cuda_runtime.h>

#include "../common/attn_common.cuh"
#include "../common/seq_index.cuh"
#include "core/math/mask.h"
#include "fa3_args.h"
#include "fa3_tile_scheduler.h"

/* One tile of the grid's work: query block m0.. (rows_per_head positions) of query heads h ..
   h + 2^pack_log2 - 1 (GQA packing: heads of one K/V head, the tile's rows head-major), K/V head
   hk, batch b, and the key tiles n_begin..n_end that hold keys for any of its rows; m_end: the
   end of its rows (per packed head), seqlen_q at most. SEQS: sequence b's own lengths (sq rows,
   sk keys) and where its packed rows and keys start (q_start, k_start; 0 where the tensor is
   padded); elsewhere sq and sk are the problem's, the starts 0. */
struct fa3_tile {
  int m0, m_end, h, hk, b, n_begin, n_end;
  int sq, sk, q_start, k_start;
};
/* The grid's tiles: (query heads / pack) x batch head groups, each of ceil(seqlen_q / rows per
   head) query blocks. */
template <int BM>
__device__ __forceinline__ void fa3_grid_of(const fa3_fwd_args &A, int &hb_count, int &total) {
  const int rows = BM >> A.pack_log2;
  hb_count = (A.a.p.heads_q >> A.pack_log2) * A.a.p.batch;
  total = (A.a.p.seqlen_q + rows - 1) / rows * hb_count;
}
/* SEQS: the count is the sequences' (fa3_seq_tile_of finds the end): no tile index reaches it. */
#define FA3_SEQS_TOTAL 0x7fffffff

/* The key tiles n_begin..n_end of tile ti that hold keys for any of its rows, under mask over
   seqlen_k keys. */
template <int BN>
__device__ __forceinline__ void fa3_key_tiles(const fa_mask &mask, int seqlen_k, fa3_tile &ti) {
  int64_t lo, hi;
  fa_mask_key_range(&mask, ti.m0, seqlen_k, &lo, &hi);
  const int lo_first = (int)lo; /* key indices fit int: seqlen_k is one */
  fa_mask_key_range(&mask, ti.m_end - 1, seqlen_k, &lo, &hi);
  const int hi_last = (int)hi;
  ti.n_begin = lo_first / BN;
  ti.n_end = hi_last > lo_first ? (hi_last + BN - 1) / BN : ti.n_begin;
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
  ti.sq = p.seqlen_q;
  ti.sk = p.seqlen_k;
  ti.q_start = ti.k_start = 0;
  fa3_key_tiles<BN>(mask, p.seqlen_k, ti);
}

/* SEQS: the sequence a block's producer has reached in the order of fa3_seq_tile_of (its tile
   indices only grow, under the static deal and the dynamic schedule alike): sequence b, whose
   first tile is tile `base`. */
struct fa3_seq_cursor {
  int b, base;
};

/* SEQS: tile k of the sequences' tiles, the cursor moved forward to its sequence: sequence by
   sequence, each its (head group, query block) pairs, a head group's blocks from the last (the
   largest under a causal mask) on, so that the blocks running together share a head's K and V.
   A sequence of sq rows has ceil(sq / rows per head) blocks: none where it is empty. false where
   k is past the last sequence's tiles. */
template <int BM, int BN>
__device__ __forceinline__ bool fa3_seq_tile_of(int k, fa3_seq_cursor &cur, const fa3_fwd_args &A,
                                                fa3_tile &ti) {
  const cuda_problem &p = A.a.p;
  const int rows = BM >> A.pack_log2, groups = p.heads_q >> A.pack_log2;
  int q_start, sq, num_m;
  for (;;) {
    if (cur.b >= p.batch) return false;
    seq_q_rows_of(A.ix, cur.b, p.seqlen_q, q_start, sq);
    num_m = (sq + rows - 1) / rows;
    if (k - cur.base < groups * num_m) break;
    cur.base += groups * num_m;
    ++cur.b;
  }
  const int r = k - cur.base;
  const seq_rows sr = seq_rows_of(A.ix, cur.b, p.seqlen_q, p.seqlen_k, A.ix.cu_k != nullptr);
  fa3_sched_query_block(r % num_m, num_m, sq, rows, 64, 0, &ti.m0, &ti.m_end);
  ti.h = (r / num_m) << A.pack_log2;
  ti.b = cur.b;
  ti.hk = ti.h / (p.heads_q / p.heads_kv);
  ti.sq = sq;
  ti.sk = sr.sk;
  ti.q_start = q_start;
  ti.k_start = sr.k_start;
  fa3_key_tiles<BN>(seq_mask_of(A.ix, sq, sr.sk), sr.sk, ti);
  return true;
}

/* The tile's mask and key count: its sequence's (SEQS) or the problem's. */
template <bool SEQS>
__device__ __forceinline__ fa_mask fa3_mask_of(const fa3_fwd_args &A, const fa3_tile &ti) {
  return SEQS ? seq_mask_of(A.ix, ti.sq, ti.sk) : cuda_mask_of(A.a.p);
}

/* Tensor map coordinates (row, outermost) of a tile's query rows from m0 + at (Q and O: their
   maps differ in rows per batch) and of its keys from key `at` (K, V): the batch's where the map
   is the tensor's (a batch, its rows), else those of the sequence's own map view
   (fa3_seq_tensor_map: rows ext - len + i of the outermost coordinate start + len, which ends
   the rows at the sequence's end). */
template <bool SEQS>
__device__ __forceinline__ void fa3_rows_at(const fa3_tile &ti, int ext, int batch_rows, bool keys,
                                            int at, int &row, int &outer) {
  if (!SEQS) {
    row = at;
    outer = ti.b;
    return;
  }
  const int len = keys ? ti.sk : ti.sq, start = keys ? ti.k_start : ti.q_start;
  row = ext - len + at;
  outer = start + ti.b * batch_rows + len;
}

/* OWN_KEY_END: the end of consumer c's key tiles in tile ti: past the last key its 64 rows see
   (each row's end grows with the row), at least one tile (rows that see no key take the masked
   path and write zeros). The whole tile where its rows are packed heads or all past the tile's
   (the idle consumer releases its stages itself), or where the tile has no key tile. */
template <int BN, bool SEQS>
__device__ __forceinline__ int fa3_own_end(const fa3_fwd_args &A, const fa3_tile &ti, int c) {
  const int first = ti.m0 + 64 * c;
  if (A.pack_log2 != 0 || first >= ti.m_end || ti.n_end == ti.n_begin) return ti.n_end;
  const fa_mask mask = fa3_mask_of<SEQS>(A, ti);
  int64_t lo, hi;
  fa_mask_key_range(&mask, min(first + 63, ti.m_end - 1), ti.sk, &lo, &hi);
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

/* DYNAMIC, on the host before a launch: the counter pair zeroed in stream order, unless it is a
   stream's kept one that the last launch's blocks left at zero (a->counter_zeroed);
   cudaErrorInvalidValue without a counter. */
static inline cudaError_t fa3_tile_counter_ready(const fa3_fwd_args *a) {
  if (!a->tile_counter) return cudaErrorInvalidValue;
  return a->counter_zeroed ? cudaSuccess
                           : cudaMemsetAsync(a->tile_counter, 0, FA3_TILE_COUNTER_BYTES,
                                             static_cast<cudaStream_t>(a->a.p.stream));
}

/* DYNAMIC: called by each block's producer once it has taken its last tile. The last block to
   call it zeroes the counter pair (tile_counter[0]: tiles taken; [1]: blocks done), so that the
   next launch in stream order finds zeros without a memset (cuda_stream_counters.c). Every block
   counts itself done only after its last atomicAdd on [0], and the fences order the two. */
__device__ __forceinline__ void fa3_sched_finish(const fa3_fwd_args &A) {
  __threadfence();
  if (atomicAdd(A.tile_counter + 1, 1) == (int)gridDim.x - 1) {
    __threadfence();
    atomicExch(A.tile_counter, 0);
    atomicExch(A.tile_counter + 1, 0);
  }
}

#endif /* FA_CUDA_FA3_FWD_SCHEDULER_CUH */
