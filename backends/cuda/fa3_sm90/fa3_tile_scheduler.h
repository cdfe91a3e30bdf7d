/*
 * fa3_tile_scheduler.h: the order in which the FlashAttention-3 kernels' blocks visit their
 * tiles, and the grid that visits them (FA_HOST_DEVICE functions: the host plans with them, the
 * kernels' schedulers (fa3_fwd_scheduler.cuh, fa3_bwd_scheduler.cuh) follow them).
 *
 * A persistent grid with a dynamic schedule (each block takes the next tile from a counter) under
 * a causal mask: the tiles are num_m query blocks of each of `pairs` (head, batch) pairs, and a
 * query block's cost grows with its index, so the largest go first (longest processing time
 * first: a block that is free takes the largest tile left, and the last tiles handed out are the
 * small ones). Taken over all pairs at once, though, the blocks running together would read the
 * K and V of every head, more than L2 holds; so the pairs go in chunks of `chunk` (whose K and V
 * fit in a share of L2), largest first within each chunk. The chunk that holds the remainder
 * (pairs % chunk pairs) goes first: last, its few largest tiles would start when every other
 * block is nearly done, and the grid would wait for them (in a greedy simulation of the H200's 132
 * blocks the makespan is 1-4% above the mean this way, 4-16% with the remainder last;
 * tests/cuda/test_cuda_fa3_schedule.c checks the bound).
 */
#ifndef FA_CUDA_FA3_TILE_SCHEDULER_H
#define FA_CUDA_FA3_TILE_SCHEDULER_H

#include <stdint.h>

#include "core/math/host_device.h"
#include "fa3_tile_size.h"

/* The chunk: the pairs whose K and V (kv_bytes_per_pair each) take about 24 MB, half the
   H100/H200 L2; at least 1, at most pairs (pairs >= 1: a batch and a head at least). */
FA_HOST_DEVICE int fa3_sched_chunk(int64_t pairs, int64_t kv_bytes_per_pair) {
  const int64_t chunk = kv_bytes_per_pair > 0 ? ((int64_t)24 << 20) / kv_bytes_per_pair : pairs;
  return (int)(chunk < 1 ? 1 : chunk > pairs ? pairs : chunk);
}

/* Tile k (0 <= k < num_m * pairs) of the order: *m_idx, the query block counted from the last
   (0: the one with the most keys under a causal mask), and *pair, the (head, batch) pair.
   chunk >= 1. */
FA_HOST_DEVICE void fa3_sched_lpt_tile(int k, int num_m, int pairs, int chunk, int *m_idx,
                                       int *pair) {
  const int rem = pairs % chunk, first = rem * num_m; /* the remainder chunk's tiles */
  int base = 0, size = rem, within = k;
  if (k >= first) {
    const int per = chunk * num_m;
    within = (k - first) % per;
    base = rem + (k - first) / per * chunk;
    size = chunk;
  }
  *m_idx = within / size;
  *pair = base + within % size;
}

/* Query block `from_end` (0: the last, the one with the most keys under a causal mask) of the
   num_m = ceil(seqlen_q / rows) blocks of rows rows (rows a multiple of slab): rows [*m0,
   *m_end). Without lead_short, block i is rows [i rows, (i + 1) rows), so the short block (when
   rows do not divide seqlen_q) is the last, which under a causal mask is the one that sees every
   key. With lead_short, the blocks are cut from the end in whole slabs and the short one, its
   slabs the rest of ceil(seqlen_q / slab) by rows / slab, comes first, where it sees the fewest
   keys: a kernel whose warpgroups take a slab each leaves fewer of them idle for fewer key
   tiles. The slabs stay at multiples of slab from row 0, so only
   the last block may end inside one. */
FA_HOST_DEVICE void fa3_sched_query_block(int from_end, int num_m, int seqlen_q, int rows, int slab,
                                          int lead_short, int *m0, int *m_end) {
  const int idx = num_m - 1 - from_end, per = rows / slab;
  const int lead = lead_short ? ((seqlen_q + slab - 1) / slab) % per * slab : 0;
  const int start = lead == 0 ? idx * rows : idx == 0 ? 0 : lead + (idx - 1) * rows;
  const int end = lead != 0 && idx == 0 ? lead : start + rows;
  *m0 = start;
  *m_end = end < seqlen_q ? end : seqlen_q;
}

/* The splits of a deterministic backward that visits key tiles in a fixed order: each of
   `parallel` (batch, K/V head) pairs runs s blocks, block i taking key tiles i, i + s, ... of
   n_tiles into an accumulator of its own, on a GPU that runs `slots` blocks at once. The s in
   1..n_tiles with the least modelled time, rounds of blocks times tiles a block,
   ceil(parallel s / slots) ceil(n_tiles / s); the smallest of equals (fewer accumulators). (fa2's
   rule of 2 x slots blocks gives 9 splits for 32 pairs of 64 tiles on 132 one-block SMs: 288
   blocks in 3 rounds of 8 tiles, 24 tile times against 16 for 4 splits.) */
FA_HOST_DEVICE int fa3_sched_det_splits(int64_t parallel, int n_tiles, int slots) {
  if (parallel < 1 || n_tiles < 1 || slots < 1) return 1;
  int best = 1;
  int64_t best_cost = -1;
  for (int s = 1; s <= n_tiles; ++s) {
    const int64_t rounds = (parallel * s + slots - 1) / slots;
    const int64_t cost = rounds * ((n_tiles + s - 1) / s);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

/* The backward's persistent grid (fa3_bwd_args.grid_blocks): requested blocks (the SM count, or
   fewer for tests; <= 0: none) where it pays, 0 (a block per key tile) elsewhere. It pays in the
   narrow kernels (hd64 with two K/V buffers; hd128 with one: +0.1..+2.8% on the H200), its blocks
   taking their tiles by the dynamic schedule; not in the wide kernel (a fixed deal measured
   -0.1..+0.7% there), nor in deterministic mode (which has its own grid, of splits). At most one
   block per tile. */
static inline int32_t fa3_bwd_grid_blocks(const cuda_bwd_args *a, int padded_head_dim,
                                          int32_t requested) {
  const cuda_problem *p = &a->p;
  if (requested <= 0 || FA3_BWD_WIDE(padded_head_dim) || a->deterministic || p->seqlen_k <= 0)
    return 0;
  const int64_t tile_n = FA3_BWD_TILE_N(padded_head_dim);
  const int64_t n_tiles = (p->seqlen_k + tile_n - 1) / tile_n;
  const int64_t items = n_tiles * p->heads_kv * p->batch;
  if (items > INT32_MAX) return 0;
  return requested < items ? requested : (int32_t)items;
}

/* The backward's persistent grid's order (fa3_bwd_args.sched_chunk, sched_reverse): under a mask,
   chunks of (K/V head, batch) pairs whose Q and dO take about half of L2 (fa3_sched_chunk), the
   longest key tiles first within each, so that blocks taking tiles in turn get tiles of about
   the same lengths (the key tile fastest gave some blocks twice the work of others); without a
   mask, 0 (the key tile fastest, the blocks running together on one head's Q and dO). */
static inline void fa3_bwd_sched(const cuda_bwd_args *a, int padded_head_dim, int32_t *chunk,
                                 int32_t *reverse) {
  const cuda_problem *p = &a->p;
  *chunk = *reverse = 0;
  if (!cuda_problem_masked(p)) return;
  const int64_t pairs = (int64_t)p->heads_kv * p->batch;
  const int64_t qdo_bytes = (int64_t)(p->heads_q / (p->heads_kv > 0 ? p->heads_kv : 1)) *
                            p->seqlen_q * padded_head_dim * 2 * 2;
  *chunk = fa3_sched_chunk(pairs > 0 ? pairs : 1, qdo_bytes);
  *reverse = p->mask.right < 0; /* a left bound only: later keys are seen by more rows */
}

#endif /* FA_CUDA_FA3_TILE_SCHEDULER_H */
