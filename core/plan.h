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

#endif /* FA_CORE_PLAN_H */
