/*
 * test_cuda_fa3_schedule.c: the fa3 tile scheduler's orders (fa3_tile_scheduler.h), on the host:
 * every tile visited once in the documented order, the modelled makespan of the dynamic schedule,
 * the query blocks cut from either end, the deterministic backward's split count against brute
 * force.
 *
 * Usage: test_cuda_fa3_schedule [seed]
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/fa3_sm90/fa3_tile_scheduler.h"
#include "harness.h"

/* The makespan of a greedy dynamic schedule (each of `blocks` takes the next tile of the order
   when free) over the mean, for a causal forward of tile_m x tile_n tiles: a tile's cost is its
   key tiles plus a fixed 0.5 (its start and end). */
static double lpt_makespan_ratio(int seqlen, int pairs, int tile_m, int tile_n, int chunk,
                                 int blocks) {
  const int num_m = (seqlen + tile_m - 1) / tile_m;
  double busy[256] = {0}, total = 0.0;
  for (int k = 0; k < num_m * pairs; ++k) {
    int m_idx, pair;
    fa3_sched_lpt_tile(k, num_m, pairs, chunk, &m_idx, &pair);
    const int rows_end = (num_m - m_idx) * tile_m < seqlen ? (num_m - m_idx) * tile_m : seqlen;
    const double cost = (rows_end + tile_n - 1) / tile_n + 0.5;
    int free_block = 0;
    for (int b = 1; b < blocks; ++b)
      if (busy[b] < busy[free_block]) free_block = b;
    busy[free_block] += cost;
    total += cost;
  }
  double makespan = 0.0;
  for (int b = 0; b < blocks; ++b) makespan = busy[b] > makespan ? busy[b] : makespan;
  return makespan / (total / blocks);
}

static void test_sched_lpt(void) {
  test_case_begin(
      "fa3_sched_lpt_tile visits every tile once, largest first in chunks, remainder first");
  for (int t = 0; t < 2000; ++t) {
    const int num_m = (int)test_rng_range(1, 20), pairs = (int)test_rng_range(1, 40);
    const int chunk = (int)test_rng_range(1, pairs + 3);
    static unsigned char seen[20 * 40];
    memset(seen, 0, sizeof seen);
    const int rem = pairs % chunk; /* chunk > pairs: all of them */
    int prev_m = -1, prev_chunk = -1;
    for (int k = 0; k < num_m * pairs; ++k) {
      int m_idx = -1, pair = -1;
      fa3_sched_lpt_tile(k, num_m, pairs, chunk, &m_idx, &pair);
      if (m_idx < 0 || m_idx >= num_m || pair < 0 || pair >= pairs || seen[m_idx * pairs + pair]++)
        test_fail(
            "tile %d of %d x %d pairs (chunk %d): block %d pair %d out of range or seen twice", k,
            num_m, pairs, chunk, m_idx, pair);
      /* the chunk a pair belongs to: the remainder's pairs [0, rem) first, then chunk-sized */
      const int ck = pair < rem ? -1 : (pair - rem) / chunk;
      if (ck < prev_chunk || (ck == prev_chunk && m_idx < prev_m))
        test_fail("tile %d of %d x %d pairs (chunk %d): block %d of chunk %d after block %d of %d",
                  k, num_m, pairs, chunk, m_idx, ck, prev_m, prev_chunk);
      prev_chunk = ck;
      prev_m = m_idx;
    }
  }
  test_case_end();
  test_case_begin(
      "the dynamic schedule's makespan within 5% of the mean (H200, causal, 1k-8k keys)");
  /* The sweep's shapes (16k tokens; 2048 hidden: heads = 2048 / head dim) at the planned tiles
     with a dynamic schedule under a mask: head dim 128 (128 x 128) and 256 (128 x 80). */
  const int dims[2][3] = {{128, 128, 128}, {256, 128, 80}};
  for (int d = 0; d < 2; ++d)
    for (int seqlen = 1024; seqlen <= 8192; seqlen *= 2) {
      const int hd = dims[d][0], pairs = 16384 / seqlen * (2048 / hd);
      const int chunk = fa3_sched_chunk(pairs, 4 * (int64_t)seqlen * hd);
      const double ratio = lpt_makespan_ratio(seqlen, pairs, dims[d][1], dims[d][2], chunk, 132);
      if (ratio > 1.05)
        test_fail("head dim %d, %d keys, %d pairs in chunks of %d: makespan %.3f x the mean", hd,
                  seqlen, pairs, chunk, ratio);
    }
  test_case_end();
}

static void test_sched_query_block(void) {
  test_case_begin("fa3_sched_query_block: blocks cover the rows once, short block last or first");
  long n_short_first = 0;
  for (int t = 0; t < 20000; ++t) {
    const int slab = (int)test_rng_range(1, 3) * 32, per = (int)test_rng_range(1, 4),
              rows = slab * per;
    const int seqlen = (int)test_rng_range(1, 40 * rows), lead_short = (int)(t & 1);
    const int num_m = (seqlen + rows - 1) / rows, slabs = (seqlen + slab - 1) / slab;
    int covered_to = 0; /* blocks in row order: from_end num_m - 1 first */
    for (int f = num_m - 1; f >= 0; --f) {
      int m0 = -1, m_end = -1;
      fa3_sched_query_block(f, num_m, seqlen, rows, slab, lead_short, &m0, &m_end);
      /* the same cut, from the definition: block f of the end-aligned slab groups, or of the
         start-aligned row groups */
      int e0, e1;
      if (lead_short) {
        const int s0 = slabs - (f + 1) * per, s1 = slabs - f * per;
        e0 = (s0 < 0 ? 0 : s0) * slab;
        e1 = s1 * slab < seqlen ? s1 * slab : seqlen;
      } else {
        e0 = (num_m - 1 - f) * rows;
        e1 = e0 + rows < seqlen ? e0 + rows : seqlen;
      }
      if (m0 != e0 || m_end != e1 || m0 != covered_to || m_end <= m0 || m_end - m0 > rows)
        test_fail(
            "seqlen %d rows %d slab %d lead_short %d: block %d of %d is [%d, %d), want [%d, %d) "
            "after %d",
            seqlen, rows, slab, lead_short, f, num_m, m0, m_end, e0, e1, covered_to);
      if (lead_short && f == num_m - 1 && m_end - m0 < rows && m_end < seqlen) ++n_short_first;
      covered_to = m_end;
    }
    if (covered_to != seqlen)
      test_fail("seqlen %d rows %d lead_short %d: blocks end at %d", seqlen, rows, lead_short,
                covered_to);
  }
  if (n_short_first == 0)
    test_fail("no short first block drawn: the lead_short case proved nothing");
  test_case_end();
}

static void test_sched_det_splits(void) {
  test_case_begin("fa3_sched_det_splits: the least modelled time, the fewest splits of equals");
  /* The cases that set the rule: 32 pairs of 64 key tiles on 132 SMs take 4 splits (1 round of
     16 tiles), not the 9 of 2 x SMs blocks (3 rounds of 8); many pairs take one; one tile, one. */
  if (fa3_sched_det_splits(32, 64, 132) != 4)
    test_fail("32 pairs, 64 tiles, 132 slots: %d splits, expected 4",
              fa3_sched_det_splits(32, 64, 132));
  if (fa3_sched_det_splits(512, 8, 132) != 1)
    test_fail("512 pairs, 8 tiles: %d splits, expected 1", fa3_sched_det_splits(512, 8, 132));
  if (fa3_sched_det_splits(4, 1, 132) != 1)
    test_fail("one tile: %d splits", fa3_sched_det_splits(4, 1, 132));
  if (fa3_sched_det_splits(0, 5, 132) != 1 || fa3_sched_det_splits(4, 0, 132) != 1 ||
      fa3_sched_det_splits(4, 5, 0) != 1)
    test_fail("degenerate arguments must give 1 split");
  /* Against a brute force over random shapes: in range, minimal, and the smallest minimum. */
  for (int t = 0; t < 2000; ++t) {
    const int64_t parallel = test_rng_range(1, 600);
    const int n_tiles = (int)test_rng_range(1, 130), slots = (int)test_rng_range(1, 264);
    const int s = fa3_sched_det_splits(parallel, n_tiles, slots);
    int64_t best = -1;
    int first = 0;
    for (int k = 1; k <= n_tiles; ++k) {
      const int64_t c = (parallel * k + slots - 1) / slots * ((n_tiles + k - 1) / k);
      if (best < 0 || c < best) best = c, first = k;
    }
    if (s != first)
      test_fail("parallel %lld tiles %d slots %d: %d splits, the smallest best is %d",
                (long long)parallel, n_tiles, slots, s, first);
  }
  test_case_end();
}

int main(int argc, char **argv) {
  const uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
  test_rng_seed(seed);
  printf("seed %" PRIu64 "\n", seed);
  test_sched_lpt();
  test_sched_query_block();
  test_sched_det_splits();
  return test_summary("cuda.fa3_schedule");
}
