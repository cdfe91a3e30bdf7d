/*
 * plan.h: tile sizes from a device's fast-memory budget and the head dim, as in the FlashAttention
 * paper (Algorithm 1): with M words of on-chip memory, Bc = M / (4d) key rows (rounded down, so the
 * tiles fit) and Br = min(Bc, d) query rows, then rounded down to what the backend's kernels can
 * use, never below one granule.
 */
#ifndef FA_CORE_PLAN_H
#define FA_CORE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "flash_attn.h"

typedef struct fa_tile_limits {
  size_t fast_memory_bytes; /* the budget M, in bytes (L1/L2 share for a CPU, SMEM for a GPU) */
  int32_t word_bytes;       /* bytes of one element held in fast memory (4 for fp32 tiles) */
  int32_t granule_m;        /* Br is a multiple of this (>= 1) */
  int32_t granule_n;        /* Bc is a multiple of this (>= 1) */
  int32_t max_m, max_n;     /* the kernel's largest tiles */
} fa_tile_limits;

typedef struct fa_tile_plan {
  int32_t tile_m; /* Br: query rows per tile */
  int32_t tile_n; /* Bc: key rows per tile */
} fa_tile_plan;

/* Always returns tiles >= one granule and <= the maxima, whatever the budget and head dim. */
FA_API fa_tile_plan fa_plan_tiles(const fa_tile_limits *limits, int64_t head_dim);

/*
 * The backward's tiles, for FlashAttention-2's backward: a block keeps Bc key rows (K and V) and
 * steps through the query rows Br at a time (Q and dO), with the Br x Bc tile of score gradients
 * dS between them in fast memory too (dK and dQ both read it, along different axes), at
 * score_bytes per element (0: not held there). Bc is the forward's (fa_plan_tiles: the four
 * d-wide tiles within M); Br is the largest multiple of granule_m, at most Bc and max_m, for
 * which the four tiles, (2 Bc + 2 Br) d words, and the Br Bc score elements fit M. The paper's
 * Br = min(Bc, d) is left out: it sizes the forward's output tile, which the backward's query
 * step does not hold. Where not even one granule of rows fits, Bc steps down a granule at a time
 * (not below one). As fa_plan_tiles, never below one granule nor above the maxima, so a budget
 * too small for even that gives tiles that overflow it: the caller checks its exact layout.
 * Header-only (on fa_plan_tiles): no new symbol in libflashattn's ABI (tests/abi).
 */
static inline fa_tile_plan fa_plan_tiles_bwd(const fa_tile_limits *limits, int64_t head_dim,
                                             int32_t score_bytes) {
  fa_tile_plan plan = fa_plan_tiles(limits, head_dim);
  /* In double: exact for any budget and head dim a device has, and no overflow for the rest. */
  const double d = head_dim > 0 ? (double)head_dim : 1.0;
  const double word = limits->word_bytes > 0 ? limits->word_bytes : 4;
  const double score = score_bytes > 0 ? score_bytes : 0;
  const double budget = (double)limits->fast_memory_bytes;
  const int32_t gm = limits->granule_m > 0 ? limits->granule_m : 1;
  const int32_t gn = limits->granule_n > 0 ? limits->granule_n : 1;
  const int32_t max_m = limits->max_m >= gm ? limits->max_m : gm;
  for (;;) {
    const int32_t bc = plan.tile_n;
    const double rows = (budget - 2.0 * bc * d * word) / (2.0 * d * word + bc * score);
    int32_t cap = bc < max_m ? bc : max_m;
    int32_t br = rows < (double)cap ? (rows > 0.0 ? (int32_t)rows : 0) : cap;
    br = br / gm * gm;
    if (br >= gm || bc - gn < gn) {
      plan.tile_m = br >= gm ? br : gm;
      return plan;
    }
    plan.tile_n = bc - gn;
  }
}

#endif /* FA_CORE_PLAN_H */
