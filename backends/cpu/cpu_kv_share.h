/*
 * cpu_kv_share.h: the tiled bf16 forward's K and V tiles (cpu_tensor.h's tiled pair layouts),
 * packed once per (batch, KV head) into the workspace by a parallel pass before the attention,
 * and read there by every query tile of the query heads that share them, instead of each task
 * packing its own copy of every tile it sees.
 *
 * A (batch, KV head) pair is a unit; a unit's packed tiles fill a slot. When every unit's tiles
 * fit CPU_KV_SHARE_BUDGET there is a slot per unit and one packing pass; otherwise the forward
 * runs the units in chunks of `slots` (cpu_forward.c): pack the chunk's tiles, attend its tasks,
 * then the next chunk into the same slots.
 */
#ifndef FA_CPU_KV_SHARE_H
#define FA_CPU_KV_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_internal.h"

/* The packed tiles' bytes at most: beyond it the units run in chunks that fit. */
#define CPU_KV_SHARE_BUDGET ((size_t)64 << 20)

/* The budget the forward uses: CPU_KV_SHARE_BUDGET, or FA_CPU_KV_SHARE_BUDGET=<bytes> (a test
   knob, read once: a small budget makes the tests' problems run in chunks). */
size_t cpu_kv_share_budget(void);

typedef struct cpu_kv_share {
  uint32_t *packs; /* [slots][k_tiles][tile_words]: a tile's K pairs, then its V pairs */
  int64_t slots;   /* units a chunk; 0: no sharing */
  int64_t units, k_tiles;
  size_t tile_words, k_words;
} cpu_kv_share;

/* The workspace bytes the sharing takes with at most `budget` bytes of packed tiles (the
   forward's: cpu_kv_share_budget()); 0 where it does not apply: not the tiled forward, every unit's
   tiles read by one query tile, or not one unit's tiles within the budget. */
size_t cpu_kv_share_bytes(const cpu_problem *pb, size_t budget);

/* The sharing of a call with its packed tiles at `base` (cpu_kv_share_bytes of the same budget;
   NULL: none, slots 0). */
void cpu_kv_share_init(cpu_kv_share *sh, const cpu_problem *pb, size_t budget, void *base);

/* Tile t of `unit`'s slot: its K pairs, V's k_words later. */
uint32_t *cpu_kv_share_tile(const cpu_kv_share *sh, int64_t unit, int64_t t);

#endif /* FA_CPU_KV_SHARE_H */
