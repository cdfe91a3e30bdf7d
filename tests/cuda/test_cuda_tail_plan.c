/*
 * test_cuda_tail_plan.c: the CUDA backward's balanced last wave (backends/cuda/fa2_sm80/fa2_tail.c)
 * planned on the host, no GPU needed: when it is used and when not, the plan's numbers for shapes
 * worked out by hand, and for every plan that is used, that its pieces cover each (key tile,
 * query step) unit of the last wave exactly once, that no piece is longer than the longest the
 * plan allows, and that there are no more pieces than SMs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/fa2_sm80/fa2_args.h"
#include "host_test.h"

/* A backward's arguments as far as the plan reads them: no mask unless set after. */
static cuda_bwd_args shape(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                           int tile_m) {
  cuda_bwd_args a;
  memset(&a, 0, sizeof a);
  a.p.batch = batch, a.p.heads_q = heads_q, a.p.heads_kv = heads_kv;
  a.p.seqlen_q = seqlen_q, a.p.seqlen_k = seqlen_k, a.p.head_dim = 128;
  a.p.mask.shift = 0, a.p.mask.left = -1, a.p.mask.right = -1;
  a.tile_m = tile_m;
  return a;
}

/* Walks the pieces as the kernel decodes them, counting how often each unit is covered. */
static void check_cover(const cuda_bwd_args *a, int tile_n, int slots, const char *what) {
  const long n_blocks = (a->p.seqlen_k + tile_n - 1) / tile_n;
  const long tiles = n_blocks * a->p.heads_kv * a->p.batch;
  const long steps =
      (long)(a->p.heads_q / a->p.heads_kv) * ((a->p.seqlen_q + a->tile_m - 1) / a->tile_m);
  EXPECT(a->tail_first + a->tail_tiles == tiles, "%s: %d whole + %d cut tiles != %ld", what,
         a->tail_first, a->tail_tiles, tiles);
  EXPECT(a->tail_pieces <= slots, "%s: %d pieces > %d SMs", what, a->tail_pieces, slots);
  EXPECT(a->tail_pieces >= a->tail_tiles, "%s: fewer pieces than tiles", what);
  const long units = (long)a->tail_tiles * steps;
  unsigned char *seen = calloc((size_t)units, 1);
  if (!seen) {
    EXPECT(0, "out of memory");
    return;
  }
  for (long p = 0; p < a->tail_pieces; ++p) {
    const long u0 = p * a->tail_piece_steps;
    long u1 = u0 + a->tail_piece_steps;
    if (u1 > units) u1 = units;
    EXPECT(u1 > u0, "%s: piece %ld is empty", what, p);
    for (long u = u0; u < u1; ++u) seen[u]++;
  }
  long bad = 0;
  for (long u = 0; u < units; ++u) bad += seen[u] != 1;
  EXPECT(bad == 0, "%s: %ld of %ld units not covered exactly once", what, bad, units);
  free(seen);
  /* Balanced: the longest piece is at most the even share rounded up, or the minimum length. */
  const long even = (units + slots - 1) / slots;
  EXPECT(a->tail_piece_steps == (even > 4 ? even : 4), "%s: piece of %d steps, even share %ld",
         what, a->tail_piece_steps, even);
}

int main(void) {
  const int sms = 132; /* the H200 */

  /* The FlashAttention sweep's hd256 backward: 4 x 8 heads x 64 key tiles = 2048 tiles, 15 whole
     waves and 68 tiles left; 68 x 64 steps over 132 SMs: 33 steps each, 132 pieces. */
  cuda_bwd_args a = shape(4, 8, 8, 4096, 4096, 64);
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tile_n == 64, "tile_n %d", a.tile_n);
  EXPECT(a.tail_tiles == 68 && a.tail_first == 1980 && a.tail_piece_steps == 33 &&
             a.tail_pieces == 132,
         "hd256 4k: tail %d first %d per %d pieces %d", a.tail_tiles, a.tail_first,
         a.tail_piece_steps, a.tail_pieces);
  check_cover(&a, 64, sms, "hd256 4k");

  /* GQA: 16 query heads over 2 KV heads, so a tile's steps run over 8 heads x 8 query tiles. 8
     key tiles x 2 x 1 = 16 tiles, all in the last wave: 16 x 64 units, 8 steps per piece. */
  a = shape(1, 16, 2, 1024, 1024, 128);
  fa2_bwd_plan_tail(&a, 128, sms);
  EXPECT(a.tail_tiles == 16 && a.tail_first == 0 && a.tail_piece_steps == 8 && a.tail_pieces == 128,
         "gqa: tail %d first %d per %d pieces %d", a.tail_tiles, a.tail_first, a.tail_piece_steps,
         a.tail_pieces);
  check_cover(&a, 128, sms, "gqa");

  /* One tile of 256 steps: the even share (2) is below the minimum piece (4): 64 pieces. */
  a = shape(1, 1, 1, 256 * 64, 64, 64);
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 1 && a.tail_piece_steps == 4 && a.tail_pieces == 64,
         "one tile: tail %d per %d pieces %d", a.tail_tiles, a.tail_piece_steps, a.tail_pieces);
  check_cover(&a, 64, sms, "one tile");

  /* Sequences that are no multiple of the tiles: 333 keys = 6 tiles of 64 (the last short). */
  a = shape(3, 10, 5, 1000, 333, 64);
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 90 && a.tail_first == 0, "ragged: tail %d first %d", a.tail_tiles,
         a.tail_first);
  check_cover(&a, 64, sms, "ragged");

  /* Not used: */
  a = shape(4, 8, 8, 4096, 4096, 64);
  a.p.mask.left = -1, a.p.mask.right = 0; /* causal: tiles differ in cost */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 0, "causal: tail %d", a.tail_tiles);
  a = shape(4, 8, 8, 4096, 4096, 64);
  a.p.mask.left = 256, a.p.mask.right = 256; /* sliding window */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 0, "window: tail %d", a.tail_tiles);
  a = shape(4, 8, 8, 4096, 4096, 64);
  a.deterministic = 1; /* the deterministic path's fixed order */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 0, "deterministic: tail %d", a.tail_tiles);
  a = shape(1, 132, 132, 4096, 4096, 64); /* 132 x 64 tiles: whole waves */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 0, "whole waves: tail %d", a.tail_tiles);
  a = shape(1, 120, 120, 4096, 64, 64); /* 120 of 132 SMs busy in the last wave: > 7/8 */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 0, "nearly full wave: tail %d", a.tail_tiles);
  a = shape(1, 115, 115, 4096, 64, 64); /* 115 of 132: <= 7/8, used */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 115, "7/8 wave: tail %d", a.tail_tiles);
  a = shape(1, 4, 4, 7 * 64, 4096, 64); /* 7 steps per tile: too short to cut */
  fa2_bwd_plan_tail(&a, 64, sms);
  EXPECT(a.tail_tiles == 0, "short tiles: tail %d", a.tail_tiles);
  a = shape(1, 4, 4, 4096, 4096, 64);
  fa2_bwd_plan_tail(&a, 64, 0); /* no SM count known */
  EXPECT(a.tail_tiles == 0, "no SMs: tail %d", a.tail_tiles);

  printf("%s\n", g_failed ? "FAILED" : "all passed");
  return g_failed;
}
