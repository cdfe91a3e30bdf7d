/*
 * fa3_schedule.h: the order in which a persistent grid with a dynamic schedule (each block takes
 * the next tile from a counter) visits a forward pass's tiles (FA_HOST_DEVICE: host and device
 * code).
 *
 * The tiles are num_m query blocks of each of `pairs` (head, batch) pairs. Under a causal mask a
 * query block's cost grows with its index, so the largest go first (longest processing time
 * first: a block that is free takes the largest tile left, and the last tiles handed out are the
 * small ones). Taken over all pairs at once, though, the blocks running together would read the
 * K and V of every head, more than L2 holds; so the pairs go in chunks of `chunk` (whose K and V
 * fit in a share of L2), largest first within each chunk. The chunk that holds the remainder
 * (pairs % chunk pairs) goes first: last, its few largest tiles started when every other block
 * was nearly done, and the grid waited for them (a greedy simulation of the H200's 132 blocks put
 * the makespan 4-16% above the mean at head dim 128 and 256, 1k-8k keys; 1-4% with the remainder
 * first; tests/test_core.c checks the bound).
 */
#ifndef FA_CUDA_FA3_SCHEDULE_H
#define FA_CUDA_FA3_SCHEDULE_H

#include <stdint.h>

#include "core/math/host_device.h"

/* The chunk: the pairs whose K and V (kv_bytes_per_pair each) take about 24 MB, half the
   H100/H200 L2; at least 1, at most pairs (pairs >= 1: a batch and a head at least). */
FA_HOST_DEVICE int fa_sched_chunk(int64_t pairs, int64_t kv_bytes_per_pair) {
  const int64_t chunk = kv_bytes_per_pair > 0 ? ((int64_t)24 << 20) / kv_bytes_per_pair : pairs;
  return (int)(chunk < 1 ? 1 : chunk > pairs ? pairs : chunk);
}

/* Tile k (0 <= k < num_m * pairs) of the order: *m_idx, the query block counted from the last
   (0: the one with the most keys under a causal mask), and *pair, the (head, batch) pair.
   chunk >= 1. */
FA_HOST_DEVICE void fa_sched_lpt_tile(int k, int num_m, int pairs, int chunk, int *m_idx,
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
   tiles (bench/NOTES.md, session 24). The slabs stay at multiples of slab from row 0, so only
   the last block may end inside one. */
FA_HOST_DEVICE void fa_sched_query_block(int from_end, int num_m, int seqlen_q, int rows, int slab,
                                         int lead_short, int *m0, int *m_end) {
  const int idx = num_m - 1 - from_end, per = rows / slab;
  const int lead = lead_short ? ((seqlen_q + slab - 1) / slab) % per * slab : 0;
  const int start = lead == 0 ? idx * rows : idx == 0 ? 0 : lead + (idx - 1) * rows;
  const int end = lead != 0 && idx == 0 ? lead : start + rows;
  *m0 = start;
  *m_end = end < seqlen_q ? end : seqlen_q;
}

/* The balanced last wave of a static deal (stream-K): when `blocks` persistent blocks deal
   `total` equal tiles round by round, the last round holds tail = total % blocks tiles and the
   grid waits for it with blocks - tail of its blocks idle (2048 tiles on 132 SMs: 15.52 a block,
   16 for some: 3%). Cut into units (a tile's key tiles, nkt of them), the tail's tail * nkt units
   split evenly instead: block b takes units [*u0, *u1), tile-major, so that its piece is the end
   of one tail tile and the start of the next (or more, when a piece is longer than a tile);
   empty when there are fewer units than blocks. A tile cut into several pieces is finished from
   their partial outputs (core/math/softmax.h fa_softmax_merge_lse). */
FA_HOST_DEVICE void fa_sched_tail_piece(int b, int blocks, int tail, int nkt, int *u0, int *u1) {
  const int64_t units = (int64_t)tail * nkt;
  *u0 = (int)(units * b / blocks);
  *u1 = (int)(units * (b + 1) / blocks);
}

/* The block whose piece holds unit x of the tail (fa_sched_tail_piece): the last b whose piece
   starts at or before x. */
FA_HOST_DEVICE int fa_sched_tail_owner(int64_t x, int blocks, int tail, int nkt) {
  const int64_t units = (int64_t)tail * nkt;
  return (int)(((x + 1) * blocks - 1) / units);
}

/* The splits of a deterministic backward that visits key tiles in a fixed order: each of
   `parallel` (batch, K/V head) pairs runs s blocks, block i taking key tiles i, i + s, ... of
   n_tiles into an accumulator of its own, on a GPU that runs `slots` blocks at once. The s in
   1..n_tiles with the least modelled time, rounds of blocks times tiles a block,
   ceil(parallel s / slots) ceil(n_tiles / s); the smallest of equals (fewer accumulators). A
   rule of 2 x slots blocks (fa2's) gave 9 splits for 32 pairs of 64 tiles on 132 one-block SMs:
   288 blocks in 3 rounds of 8 tiles, 24 tile times against 16 for 4 splits (bench/NOTES.md,
   session 26). */
FA_HOST_DEVICE int fa_sched_det_splits(int64_t parallel, int n_tiles, int slots) {
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

#endif /* FA_CUDA_FA3_SCHEDULE_H */
