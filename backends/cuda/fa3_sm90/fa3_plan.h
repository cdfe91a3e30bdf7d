#ifndef FA_CUDA_FA3_PLAN_H
#define FA_CUDA_FA3_PLAN_H

#include <stdint.h>

/*
 * The FlashAttention-3 forward's plan on Hopper (sm_90a, 227 KiB of shared memory per block): tile,
 * consumer warpgroups and schedule per padded head dim (64, 128, 256), mask (causal or window) and
 * key count, as measured against cuDNN in the same runs on an H200 (bench/NOTES.md, 2026-12-01;
 * FlashAttention-3's published 192 x 128 / 128 x 176 / 128 x 80 were the starting points). The
 * CUDA backend maps it onto one of its compiled kernels (backends/cuda/fa3_sm90). Without a mask
 * every tile costs the same and a persistent grid hides the per-tile start; under a mask the
 * persistent blocks take their tiles from a global counter, largest first (a static deal left
 * some blocks ~15% more work than the mean). A head dim without a plan gets a tile_m of 0.
 * Header-only: no ABI symbol.
 */
typedef struct fa_hopper_fwd_plan {
  int32_t tile_m, tile_n; /* query rows per block (64 per consumer warpgroup), keys per tile */
  int32_t consumers;      /* consumer warpgroups */
  int32_t persistent;     /* one block per SM looping over tiles (0: one block per tile) */
  int32_t q_buffers;      /* 2: the next tile's Q loads while this tile still reads its own */
  int32_t smem_epilogue;  /* O written through shared memory and stored by TMA */
  int32_t dynamic;        /* persistent blocks take tiles from a global counter (a workspace) */
  int32_t pinned;         /* the softmax kept under its own warpgroup's previous P V */
  int32_t o_in_stage;     /* O written into the tile's last K/V stage (Q freed after its last S) */
  int32_t kv_stages;      /* K/V tiles in flight in shared memory (the producer's lead) */
  int32_t mma_row_sum;    /* the rows' sums of P formed by P V on the tensor core (8 more
                             columns, of ones) instead of by the softmax's additions */
  int32_t split_max;      /* the softmax's second row's max computed under the first row's
                             exps (the XU pipe busy while the FMNMX chain runs) */
  int32_t own_key_end;    /* each consumer's key tiles end at the last its own rows see (it
                             passes the block's later ones without work) */
  int32_t short_block_first; /* the query blocks cut from the sequence's end, so that the short
                                one (its rows not a whole block) comes first, where a causal
                                mask gives it the fewest keys (core/schedule.h) */
} fa_hopper_fwd_plan;

static inline fa_hopper_fwd_plan fa_plan_hopper_fwd(int64_t padded_head_dim, int masked,
                                                    int64_t seqlen_k) {
  fa_hopper_fwd_plan p = {0, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0};
  switch (padded_head_dim) {
    case 64: /* three consumers: the softmax is a large share at 64 columns */
      p.tile_m = 192, p.tile_n = 128, p.consumers = 3, p.persistent = 1, p.q_buffers = 2;
      p.dynamic = masked;
      p.kv_stages = 3; /* the room is there (147 KB of 227): +0-3% at 1k-16k keys */
      /* +1-1.6% at 512-1k keys (both masks), +-0.5% at 2k-8k (bench/NOTES.md, session 20) */
      p.mma_row_sum = 1;
      /* +3-4% without a mask at 1k and 8k keys, +1.4% under one at 1k (bench/NOTES.md, session
         20), +1.4-2.5% under one at 2k-8k (session 21) */
      p.split_max = 1;
      /* (The consumers always take turns now: the two staggered consumers without turns of
         session 18, FA3_STAGGER, are a twin for A/B only.)
         Under a mask a 192-row block's first consumers skip the key tiles only its last one's
         rows reach: 72 of 80 64 x 128 slab-tiles per head at causal 1k (the 128-row blocks'
         count, with three consumers). Against the two staggered consumers of 128-row blocks
         (session 18's pick up to 1k keys) +1.6% at 512 and +2.8% at 1k; against three without
         it +4.6% at 1k, +2-3% at 2k-4k, +0.6-1.1% at 8k-16k (bench/NOTES.md, session 22). */
      p.own_key_end = masked;
      /* At 1k rows a head's sixth 192-row block holds 64: last, its one consumer works through
         all 8 key tiles while two idle; first, it has one key tile. +4.4% at causal 1k keys,
         +0.5-1.5% at 2k-16k, -1.6% at 512 (bench/NOTES.md, session 24). */
      p.short_block_first = masked && seqlen_k >= 1024;
      break;
    case 128:
      p.tile_m = 128, p.tile_n = 128, p.consumers = 2, p.q_buffers = 2, p.persistent = 1;
      /* The softmax pinned under P V: +3-5% at 4k-16k keys without a mask. Pinned, 128 x 128
         with two Q buffers beat 128 x 176 (one Q buffer, no room for the epilogue through it) at
         every length, 16k +3%, and 128 x 128 with a third K/V stage and one Q buffer (-5..-12%;
         bench/NOTES.md, session 12); 128 x 176 with O through the last K/V stage (one Q buffer)
         still lost, -8% at 1k to -0.4% at 16k (session 23). Under a mask, pinned with the
         second row's max split off and the dynamic schedule: +1.1% at 1k keys, +4.5% at 4k and
         +2.6% at 16k against the dynamic schedule unpinned (to 8k) and one block per tile pinned
         (above), the picks before (session 23). Without a mask the dynamic schedule lost
         2-6% against the static deal (session 23). */
      p.pinned = 1;
      p.split_max = 1; /* without a mask +1.3% at 1k keys, +0.6% at 8k (session 21) */
      p.dynamic = masked;
      break;
    case 256:
      /* One Q buffer (no room for two): O through the last K/V stage, so that the next tile's Q
         loads during this one's last P V (+5% at 1k without a mask, +7% under one: then a
         dynamic schedule beats one block per tile, which it did not while the next Q waited for
         the store). Pinned without a mask: +4-6% at 4k-16k keys (under one within +-1.5%). */
      p.tile_m = 128, p.tile_n = 80, p.consumers = 2, p.persistent = 1, p.o_in_stage = 1;
      p.dynamic = masked;
      p.pinned = !masked;
      p.split_max = 1; /* +1.5-1.9% without a mask at 1k-8k, +0.8-2% under one (session 21) */
      /* Consumer 0's rows end before the block's last 80-key tile in 7 of 8 blocks under a
         causal mask: +4.2% at 1k keys, +2% at 2k, +0.6% at 4k; -0.9% at 8k and -1.6% at 16k
         (bench/NOTES.md, session 22). */
      p.own_key_end = masked && seqlen_k <= 4096;
      break;
    default:
      p.q_buffers = 0, p.smem_epilogue = 0, p.kv_stages = 0;
      break;
  }
  return p;
}

#endif
