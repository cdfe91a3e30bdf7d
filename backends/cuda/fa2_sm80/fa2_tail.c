/*
 * fa2_tail.c: the backward's balanced last wave (fa2_args.h, fa2_bwd_plan_tail).
 *
 * Each backward block holds one SM for the whole of its key tile, so T equal tiles on S SMs take
 * ceil(T / S) tile-times: with T mod S = R tiles left for the last wave, S - R SMs idle through
 * it (on the H200, 2048 tiles on 132 SMs: 15.5 waves run as 16, 3%; 1980 tiles ran 2.2-2.6%
 * faster per tile than 2048). Cutting the R tiles' R x steps units
 * into S equal runs ends the last wave after R / S of a tile-time instead of a whole one, for the
 * price of adding cut tiles' dK and dV in fp32 once per piece.
 */
#include <stdint.h>

#include "fa2_args.h"

/* A piece shorter than this pays more for its key tile's load and its dK/dV additions than it
   saves. */
#define FA2_BWD_TAIL_MIN_STEPS 4
/* A last wave fuller than this (in eighths of the SMs) leaves too little idle to win back. */
#define FA2_BWD_TAIL_MAX_FILL_EIGHTHS 7

void fa2_bwd_plan_tail(cuda_bwd_args *a, int32_t tile_n, int32_t slots) {
  a->tail_tiles = a->tail_first = a->tail_piece_steps = a->tail_pieces = 0;
  a->tile_n = tile_n;
  const cuda_problem *p = &a->p;
  if (a->deterministic || a->seqs || cuda_problem_masked(p)) return;
  if (slots <= 0 || tile_n <= 0 || a->tile_m <= 0 || p->seqlen_q <= 0 || p->seqlen_k <= 0 ||
      p->heads_kv <= 0 || p->batch <= 0)
    return;
  const int64_t n_blocks = ((int64_t)p->seqlen_k + tile_n - 1) / tile_n;
  const int64_t tiles = n_blocks * p->heads_kv * p->batch;
  const int64_t steps =
      (int64_t)(p->heads_q / p->heads_kv) * (((int64_t)p->seqlen_q + a->tile_m - 1) / a->tile_m);
  const int64_t rest = tiles % slots;
  if (rest == 0 || rest * 8 > (int64_t)slots * FA2_BWD_TAIL_MAX_FILL_EIGHTHS) return;
  if (steps < 2 * FA2_BWD_TAIL_MIN_STEPS) return; /* no tile would be cut */
  int64_t per = (rest * steps + slots - 1) / slots;
  if (per < FA2_BWD_TAIL_MIN_STEPS) per = FA2_BWD_TAIL_MIN_STEPS;
  const int64_t pieces = (rest * steps + per - 1) / per;
  /* The one-dimensional grid's size and the units' index are int32 in the kernel. */
  if (tiles - rest + pieces > INT32_MAX || rest * steps > INT32_MAX) return;
  a->tail_tiles = (int32_t)rest;
  a->tail_first = (int32_t)(tiles - rest);
  a->tail_piece_steps = (int32_t)per;
  a->tail_pieces = (int32_t)pieces;
}
