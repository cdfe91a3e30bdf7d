/*
 * test_cpu_kv_share.c: the tiled forward's shared K/V tiles (backends/cpu/cpu_kv_share.c,
 * compiled in), outside the forward pass, where the conformance suite's small problems never make
 * units take turns in fewer slots than there are units.
 *
 * 1. When sharing applies: the tiled forward with two or more query tiles reading a unit's tiles;
 *    the slot count is what fits CPU_KV_SHARE_BUDGET, at most one per unit.
 * 2. The protocol, step by step, with two slots for six units: a unit takes its slot only once
 *    every task of the unit holding it is done, never from a later unit (a straggler packs its
 *    own); the first task asking for a tile packs it, a second one asking meanwhile is sent to its
 *    own scratch, and after the publish every task reads the slot; a slot's new unit packs over
 *    the old unit's tiles; init resets a reused workspace.
 * 3. Under threads: tasks of many units, in the forward's head-by-head order, write each tile
 *    they are told to pack with a pattern of (unit, tile) and check every tile they are told to
 *    read; any tile read before it was published or packed over while a task of its unit still
 *    ran shows as a wrong word.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_kv_share.h"

static int fails;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      ++fails;                                    \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

/* A tiled forward problem: batch x kv_heads units, group query heads a KV head, q_tiles query tiles
   of each, k_tiles key tiles of 256 keys at head dim hd. */
static cpu_problem problem(int64_t batch, int64_t kv_heads, int64_t group, int64_t q_tiles,
                           int64_t k_tiles, int hd) {
  cpu_problem pb = {0};
  pb.op = FA_OP_FORWARD;
  pb.batch = batch;
  pb.heads_kv = kv_heads;
  pb.heads_q = kv_heads * group;
  pb.group = group;
  pb.pack = 1;
  pb.q_tiles = q_tiles;
  pb.k_tiles = k_tiles;
  pb.seqlen_k = k_tiles * 256;
  pb.tm = pb.tn = 256;
  pb.d = pb.dv = hd;
  pb.splits = 1;
  pb.bf16dp = pb.pairs_tiled = 1;
  return pb;
}

/* Bytes of one unit's packed tiles. */
static size_t unit_bytes(const cpu_problem *pb) {
  return (size_t)pb->k_tiles * (size_t)pb->tn * (size_t)(pb->d + pb->dv) / 2 * sizeof(uint32_t);
}

static void when_it_applies(void) {
  cpu_problem pb = problem(2, 4, 1, 4, 8, 128);
  CHECK(cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET) >= 8 * unit_bytes(&pb),
        "every unit its own slot");
  pb.q_tiles = 1;
  CHECK(cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET) == 0,
        "one query tile a unit: nothing to share");
  pb.group = 4; /* GQA: the query heads of a KV head read its tiles */
  pb.heads_q = 16;
  CHECK(cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET) > 0, "GQA heads share a unit's tiles");
  pb.pack = 4; /* stacked into one task */
  CHECK(cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET) == 0, "stacked GQA heads: one task a unit");
  pb = problem(2, 4, 1, 4, 8, 128);
  pb.pairs_tiled = 0;
  CHECK(cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET) == 0, "not the tiled forward");
  /* 100 tiles of 256 keys at head dim 256: 25 MiB a unit, two fit the budget. */
  pb = problem(3, 2, 1, 4, 100, 256);
  cpu_kv_share sh;
  cpu_kv_share_init(&sh, &pb, CPU_KV_SHARE_BUDGET, NULL);
  CHECK(sh.slots == 0, "no region: no sharing");
  CHECK(cpu_kv_share_claim(&sh, 0) == 0, "no region: no claim");
  size_t bytes = cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET);
  CHECK(bytes >= 2 * unit_bytes(&pb) && bytes < 3 * unit_bytes(&pb),
        "two slots of 25.6 MiB in the 64 MiB budget (%zu bytes)", bytes);
}

static void protocol(void) {
  /* Six units (3 x 2), two slots, 4 tasks a unit. */
  cpu_problem pb = problem(3, 2, 1, 4, 100, 256);
  size_t bytes = cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET);
  void *base = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!base) {
    CHECK(0, "no memory for %zu bytes", bytes);
    return;
  }
  cpu_kv_share sh;
  cpu_kv_share_init(&sh, &pb, CPU_KV_SHARE_BUDGET, base);
  CHECK(sh.slots == 2 && sh.tasks_per_unit == 4, "slots %lld tasks %lld", (long long)sh.slots,
        (long long)sh.tasks_per_unit);
  CHECK(cpu_kv_share_claim(&sh, 0) && cpu_kv_share_claim(&sh, 1), "units 0 and 1 own slots");
  CHECK(!cpu_kv_share_claim(&sh, 2), "unit 2 while unit 0's tasks run");

  cpu_kv_tile_mode m1, m2, m3;
  uint32_t *t1 = cpu_kv_share_tile(&sh, 0, 5, &m1);
  uint32_t *t2 = cpu_kv_share_tile(&sh, 0, 5, &m2);
  CHECK(m1 == CPU_KV_PACK && t1, "the first asker packs");
  CHECK(m2 == CPU_KV_PRIVATE && !t2, "a second asker meanwhile packs its own");
  cpu_kv_share_publish(&sh, 0, 5);
  uint32_t *t3 = cpu_kv_share_tile(&sh, 0, 5, &m3);
  CHECK(m3 == CPU_KV_READY && t3 == t1, "published: read from the slot");
  uint32_t *other = cpu_kv_share_tile(&sh, 1, 5, &m3);
  CHECK(m3 == CPU_KV_PACK && other != t1, "unit 1's tile 5 is its own");
  cpu_kv_share_publish(&sh, 1, 5);
  CHECK(other - t1 == (ptrdiff_t)(pb.k_tiles * (int64_t)sh.tile_words) ||
            t1 - other == (ptrdiff_t)(pb.k_tiles * (int64_t)sh.tile_words),
        "slots a unit's tiles apart");
  CHECK(sh.k_words == (size_t)256 * 256 / 2 && sh.tile_words == 2 * sh.k_words,
        "K's words then V's");

  for (int i = 0; i < 3; ++i) cpu_kv_share_done(&sh, 0);
  CHECK(!cpu_kv_share_claim(&sh, 2), "unit 2 with one task of unit 0 running");
  cpu_kv_share_done(&sh, 0);
  CHECK(cpu_kv_share_claim(&sh, 2), "unit 2 once unit 0 is done");
  CHECK(cpu_kv_share_claim(&sh, 2), "and again for its other tasks");
  CHECK(!cpu_kv_share_claim(&sh, 0), "unit 0 never takes it back");
  uint32_t *t4 = cpu_kv_share_tile(&sh, 2, 5, &m1);
  CHECK(m1 == CPU_KV_PACK && t4 == t1, "unit 2 packs over unit 0's tile");
  cpu_kv_share_publish(&sh, 2, 5);

  /* Unit 4 after unit 2, and unit 5 skipping unit 3, which never took slot 1. */
  CHECK(!cpu_kv_share_claim(&sh, 4), "unit 4 while unit 2 has not finished");
  for (int i = 0; i < 4; ++i) cpu_kv_share_done(&sh, 2);
  CHECK(cpu_kv_share_claim(&sh, 4), "unit 4 once unit 2 is done");
  for (int i = 0; i < 4; ++i) cpu_kv_share_done(&sh, 1);
  CHECK(cpu_kv_share_claim(&sh, 5), "unit 5 once unit 1 is done (unit 3 never claimed)");
  CHECK(!cpu_kv_share_claim(&sh, 3), "unit 3 after unit 5 took the slot");

  /* A reused workspace: init resets owners, counts and tiles. */
  cpu_kv_share_init(&sh, &pb, CPU_KV_SHARE_BUDGET, base);
  CHECK(cpu_kv_share_claim(&sh, 0) && !cpu_kv_share_claim(&sh, 2), "owners reset");
  cpu_kv_share_tile(&sh, 0, 5, &m1);
  CHECK(m1 == CPU_KV_PACK, "tiles reset");
  free(base);
}

/* The words a packer writes into tile t of unit u, and a reader expects. */
static uint32_t pattern(int64_t u, int64_t t, size_t i) {
  return (uint32_t)(u * 7919 + t * 104729) ^ (uint32_t)i;
}

static void under_threads(void) {
  /* 48 units of 6 tiles at head dim 64 (64 KiB a tile), 8 query tiles a unit, and a budget of
     three units: the units take turns in three slots. */
  cpu_problem pb = problem(12, 4, 1, 8, 6, 64);
  const size_t budget = 3 * unit_bytes(&pb) + unit_bytes(&pb) / 2;
  size_t bytes = cpu_kv_share_bytes(&pb, budget);
  void *base = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!base) {
    CHECK(0, "no memory for %zu bytes", bytes);
    return;
  }
  int bad = 0;
  int64_t shared_reads = 0, private_packs = 0, slots = 0;
  for (int round = 0; round < 20; ++round) {
    cpu_kv_share sh;
    cpu_kv_share_init(&sh, &pb, budget, base);
    slots = sh.slots;
    const int64_t tasks = sh.units * sh.tasks_per_unit, per_unit = sh.tasks_per_unit;
#pragma omp parallel for schedule(dynamic, 1) num_threads(4) \
    reduction(+ : bad, shared_reads, private_packs)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t u = task / per_unit;
      if (cpu_kv_share_claim(&sh, u)) {
        for (int pass = 0; pass < 2; ++pass) /* the second: a slot handed over early shows */
          for (int64_t t = 0; t < sh.k_tiles; ++t) {
            cpu_kv_tile_mode mode;
            uint32_t *tile = cpu_kv_share_tile(&sh, u, t, &mode);
            if (mode == CPU_KV_PACK) {
              for (size_t i = 0; i < sh.tile_words; ++i) tile[i] = pattern(u, t, i);
              cpu_kv_share_publish(&sh, u, t);
            } else if (mode == CPU_KV_READY) {
              ++shared_reads;
              for (size_t i = 0; i < sh.tile_words; i += 61) bad += tile[i] != pattern(u, t, i);
            } else {
              ++private_packs;
            }
          }
      }
      cpu_kv_share_done(&sh, u);
    }
  }
  CHECK(slots == 3, "three slots (%lld)", (long long)slots);
  CHECK(bad == 0, "%d words read wrong", bad);
  CHECK(shared_reads > 0, "no tile was read from a slot");
  printf("under threads: %lld tiles read from slots, %lld packed privately\n",
         (long long)shared_reads, (long long)private_packs);
  free(base);
}

int main(void) {
  when_it_applies();
  protocol();
  under_threads();
  if (fails) {
    printf("test_cpu_kv_share: %d failed\n", fails);
    return 1;
  }
  printf("test_cpu_kv_share: passed\n");
  return 0;
}
