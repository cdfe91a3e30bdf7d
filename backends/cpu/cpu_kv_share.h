/*
 * cpu_kv_share.h: the tiled bf16 forward's K and V tiles (cpu_tensor.h's tiled pair layouts),
 * packed once per (batch, KV head) into the workspace and read there by every query tile of the
 * query heads that share them, instead of each task packing its own copy of every tile.
 *
 * A (batch, KV head) pair is a unit, and a unit's packed tiles live in a slot. When every unit's
 * tiles fit CPU_KV_SHARE_BUDGET each unit has its own slot; otherwise unit u takes slot
 * u % slots once every task of the unit that held it is done (the forward runs its tasks head by
 * head, so few units are in flight at a time). Nothing waits: a task whose unit cannot take its
 * slot yet, or that finds a tile being packed by another task, packs that tile into its own
 * scratch, as without sharing. The packed words are the same whoever packs them, so the result
 * does not depend on the number of threads or on which task packed a tile.
 */
#ifndef FA_CPU_KV_SHARE_H
#define FA_CPU_KV_SHARE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_internal.h"

/* The packed tiles' bytes at most: beyond it the units take turns in fewer slots. */
#define CPU_KV_SHARE_BUDGET ((size_t)64 << 20)

typedef struct cpu_kv_share {
  _Atomic int64_t *owner; /* [slots] the unit whose tiles a slot holds */
  _Atomic int64_t *done;  /* [units] a unit's finished tasks */
  _Atomic int64_t *state; /* [slots][k_tiles] 2u + 1: unit u's tile being packed; 2u + 2: packed */
  uint32_t *packs;        /* [slots][k_tiles][tile_words]: a tile's K pairs, then its V pairs */
  int64_t slots;          /* 0: no sharing */
  int64_t units, k_tiles, tasks_per_unit;
  size_t tile_words, k_words;
} cpu_kv_share;

/* What cpu_kv_share_tile found. */
typedef enum cpu_kv_tile_mode {
  CPU_KV_PRIVATE = 0, /* pack the tile into the task's own scratch */
  CPU_KV_READY,       /* the tile is packed in the slot: read it there */
  CPU_KV_PACK         /* the caller packs it into the slot, then calls cpu_kv_share_publish */
} cpu_kv_tile_mode;

/* The workspace bytes the forward's sharing takes with at most `budget` bytes of packed tiles
   (the forward's: CPU_KV_SHARE_BUDGET); 0 where it does not apply (not the tiled forward, every
   unit's tiles read by one task, or not one unit's tiles within the budget). */
size_t cpu_kv_share_bytes(const cpu_problem *pb, size_t budget);

/* The sharing of a call in `base` (cpu_kv_share_bytes of the same budget, CPU_ALIGN-aligned;
   NULL: none), every slot and tile reset. Before the parallel loop, once per call. */
void cpu_kv_share_init(cpu_kv_share *sh, const cpu_problem *pb, size_t budget, void *base);

/* Whether the tasks of `unit` may read and pack their tiles in its slot now: it holds them
   already, or it is handed over from the unit that held it, every task of which is done. At a
   task's start; 0 when sharing is off. */
int cpu_kv_share_claim(cpu_kv_share *sh, int64_t unit);

/* Tile t of a claimed unit: its K pairs (V's follow k_words later) and what to do (mode). NULL
   with CPU_KV_PRIVATE while another task packs it. */
uint32_t *cpu_kv_share_tile(cpu_kv_share *sh, int64_t unit, int64_t t, cpu_kv_tile_mode *mode);

/* Tile t of unit packed (after CPU_KV_PACK): readable by every task of the unit. */
void cpu_kv_share_publish(cpu_kv_share *sh, int64_t unit, int64_t t);

/* One task of unit finished (every task, claimed or not, once). */
void cpu_kv_share_done(cpu_kv_share *sh, int64_t unit);

#endif /* FA_CPU_KV_SHARE_H */
