/*
 * cpu_kv_share.c: the sizes and places of the tiled forward's shared K/V tiles (cpu_kv_share.h);
 * cpu_forward.c packs and reads them.
 */
#include "cpu_kv_share.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/env.h"

static size_t budget_value = CPU_KV_SHARE_BUDGET;
static pthread_once_t budget_once = PTHREAD_ONCE_INIT;

static void read_budget(void) {
  long long b;
  if (fa_env_int("FA_CPU_KV_SHARE_BUDGET", 0, LLONG_MAX, &b) == FA_ENV_SET)
    budget_value = (size_t)b;
}

size_t cpu_kv_share_budget(void) {
  pthread_once(&budget_once, read_budget);
  return budget_value;
}

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

size_t cpu_kv_share_bytes(const cpu_problem *pb, size_t budget) {
  const size_t bytes =
      (size_t)slots_of(pb, budget) * (size_t)pb->k_tiles * tile_words_of(pb) * sizeof(uint32_t);
  return (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
}

void cpu_kv_share_init(cpu_kv_share *sh, const cpu_problem *pb, size_t budget, void *base) {
  sh->packs = (uint32_t *)base;
  sh->slots = base ? slots_of(pb, budget) : 0;
  sh->units = pb->batch * pb->heads_kv;
  sh->k_tiles = pb->k_tiles;
  sh->k_words = k_words_of(pb);
  sh->tile_words = tile_words_of(pb);
}

uint32_t *cpu_kv_share_tile(const cpu_kv_share *sh, int64_t unit, int64_t t) {
  return sh->packs +
         ((size_t)(unit % sh->slots) * (size_t)sh->k_tiles + (size_t)t) * sh->tile_words;
}
