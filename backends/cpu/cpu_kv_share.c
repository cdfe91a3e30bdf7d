/*
 * cpu_kv_share.c: the tiled forward's shared K/V tiles (cpu_kv_share.h). The slots' owners, the
 * units' finished tasks and the tiles' states are C11 atomics: a tile's words are written before
 * its state says "packed" (release) and read after a task saw that (acquire); a slot changes
 * hands only after every task of its previous unit counted itself done (release), which the new
 * unit's claim reads (acquire) before it packs over the old tiles.
 */
#include "cpu_kv_share.h"

static size_t align_up(size_t bytes) { return (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN; }

/* The query tiles that read a unit's K/V tiles: its query heads' (stacked GQA heads are one
   task) times their query tiles. */
static int64_t readers_per_unit(const cpu_problem *pb) {
  return pb->group / pb->pack * pb->q_tiles;
}

/* Words of one packed tile: K's round32(keys) x d / 2 and V's round32(keys) / 2 x dv pairs, at
   most a whole tile's (tn is a multiple of 32 on the tiled path). */
static size_t k_words_of(const cpu_problem *pb) { return (size_t)pb->tn * (size_t)pb->d / 2; }
static size_t tile_words_of(const cpu_problem *pb) {
  return k_words_of(pb) + (size_t)pb->tn * (size_t)pb->dv / 2;
}

static int64_t slots_of(const cpu_problem *pb, size_t budget) {
  if (!pb->pairs_tiled || readers_per_unit(pb) < 2 || pb->k_tiles < 1) return 0;
  const int64_t units = pb->batch * pb->heads_kv;
  const size_t unit_bytes = (size_t)pb->k_tiles * tile_words_of(pb) * sizeof(uint32_t);
  const int64_t fit = (int64_t)(budget / unit_bytes);
  return fit < units ? fit : units;
}

/* The one layout of the region; with base NULL it only counts the bytes. */
static size_t carve(const cpu_problem *pb, size_t budget, char *base, cpu_kv_share *sh) {
  const int64_t slots = slots_of(pb, budget), units = pb->batch * pb->heads_kv;
  sh->slots = slots;
  sh->units = units;
  sh->k_tiles = pb->k_tiles;
  sh->tasks_per_unit = readers_per_unit(pb) * pb->splits;
  sh->k_words = k_words_of(pb);
  sh->tile_words = tile_words_of(pb);
  if (slots == 0) return 0;
  size_t at = 0;
  sh->owner = base ? (_Atomic int64_t *)(void *)(base + at) : NULL;
  at += align_up((size_t)slots * sizeof(int64_t));
  sh->done = base ? (_Atomic int64_t *)(void *)(base + at) : NULL;
  at += align_up((size_t)units * sizeof(int64_t));
  sh->state = base ? (_Atomic int64_t *)(void *)(base + at) : NULL;
  at += align_up((size_t)slots * (size_t)pb->k_tiles * sizeof(int64_t));
  sh->packs = base ? (uint32_t *)(void *)(base + at) : NULL;
  at += align_up((size_t)slots * (size_t)pb->k_tiles * sh->tile_words * sizeof(uint32_t));
  return at;
}

size_t cpu_kv_share_bytes(const cpu_problem *pb, size_t budget) {
  cpu_kv_share unused;
  return carve(pb, budget, NULL, &unused);
}

void cpu_kv_share_init(cpu_kv_share *sh, const cpu_problem *pb, size_t budget, void *base) {
  carve(pb, budget, base, sh);
  if (!base) sh->slots = 0;
  for (int64_t s = 0; s < sh->slots; ++s) atomic_init(&sh->owner[s], s);
  for (int64_t u = 0; sh->slots && u < sh->units; ++u) atomic_init(&sh->done[u], 0);
  for (int64_t i = 0; i < sh->slots * sh->k_tiles; ++i) atomic_init(&sh->state[i], 0);
}

int cpu_kv_share_claim(cpu_kv_share *sh, int64_t unit) {
  if (sh->slots == 0) return 0;
  _Atomic int64_t *owner = &sh->owner[unit % sh->slots];
  int64_t held = atomic_load_explicit(owner, memory_order_acquire);
  if (held == unit) return 1;
  /* A later unit has it (this is a straggler of an earlier one), or the unit holding it still
     has tasks that may read it. */
  if (held > unit ||
      atomic_load_explicit(&sh->done[held], memory_order_acquire) < sh->tasks_per_unit)
    return 0;
  if (atomic_compare_exchange_strong_explicit(owner, &held, unit, memory_order_acq_rel,
                                              memory_order_acquire))
    return 1;
  return held == unit; /* another task of this unit took it first */
}

uint32_t *cpu_kv_share_tile(cpu_kv_share *sh, int64_t unit, int64_t t, cpu_kv_tile_mode *mode) {
  const int64_t slot = unit % sh->slots, packing = 2 * unit + 1, packed = 2 * unit + 2;
  _Atomic int64_t *state = &sh->state[slot * sh->k_tiles + t];
  uint32_t *tile = sh->packs + ((size_t)slot * (size_t)sh->k_tiles + (size_t)t) * sh->tile_words;
  int64_t seen = atomic_load_explicit(state, memory_order_acquire);
  if (seen == packed) {
    *mode = CPU_KV_READY;
    return tile;
  }
  /* Not this unit's yet (another unit's tile, or never packed): the first task to mark it packs
     it. */
  if (seen != packing && atomic_compare_exchange_strong_explicit(
                             state, &seen, packing, memory_order_acquire, memory_order_acquire)) {
    *mode = CPU_KV_PACK;
    return tile;
  }
  if (seen == packed) {
    *mode = CPU_KV_READY;
    return tile;
  }
  *mode = CPU_KV_PRIVATE;
  return NULL;
}

void cpu_kv_share_publish(cpu_kv_share *sh, int64_t unit, int64_t t) {
  atomic_store_explicit(&sh->state[(unit % sh->slots) * sh->k_tiles + t], 2 * unit + 2,
                        memory_order_release);
}

void cpu_kv_share_done(cpu_kv_share *sh, int64_t unit) {
  if (sh->slots) atomic_fetch_add_explicit(&sh->done[unit], 1, memory_order_release);
}
