/*
 * test_cpu_kv_share.c: the sizes and places of the tiled forward's shared K/V tiles
 * (backends/cpu/cpu_kv_share.c, compiled in). The forward's use of them (the packing pass, the
 * chunks of units when they do not all fit) is checked by the conformance suite on the emulated
 * AMX plugin, with the default budget and with FA_CPU_KV_SHARE_BUDGET small enough that its
 * problems run in chunks (conformance.cpu.amx_emulated.chunks).
 *
 * 1. When sharing applies: the tiled forward with two or more query tiles reading a unit's
 *    tiles, and one unit's tiles within the budget.
 * 2. The slots: as many units as fit the budget, at most one per unit; the region's bytes cover
 *    them; a unit's tiles are consecutive, tile_words apart, K's words first; units a chunk apart
 *    share a slot, adjacent units do not.
 * 3. No region: no sharing.
 */
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

/* A tiled forward problem: batch x kv_heads units, group query heads a KV head, q_tiles query
   tiles of each, k_tiles key tiles of 256 keys at head dim hd. */
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

/* Bytes of one unit's packed tiles: k_tiles x 256 keys x (d + dv) bf16. */
static size_t unit_bytes(const cpu_problem *pb) {
  return (size_t)pb->k_tiles * 256 * (size_t)(pb->d + pb->dv) * 2;
}

static void when_it_applies(void) {
  const size_t budget = CPU_KV_SHARE_BUDGET;
  cpu_problem pb = problem(2, 4, 1, 4, 8, 128);
  CHECK(cpu_kv_share_bytes(&pb, budget) == 8 * unit_bytes(&pb), "every unit its own slot");
  pb.q_tiles = 1;
  CHECK(cpu_kv_share_bytes(&pb, budget) == 0, "one query tile a unit: nothing to share");
  pb.group = 4; /* GQA: the query heads of a KV head read its tiles */
  pb.heads_q = 16;
  CHECK(cpu_kv_share_bytes(&pb, budget) == 8 * unit_bytes(&pb), "GQA heads share a unit's tiles");
  pb.pack = 4; /* stacked into one task */
  CHECK(cpu_kv_share_bytes(&pb, budget) == 0, "stacked GQA heads: one task a unit");
  pb = problem(2, 4, 1, 4, 8, 128);
  pb.pairs_tiled = 0;
  CHECK(cpu_kv_share_bytes(&pb, budget) == 0, "not the tiled forward");
  pb = problem(2, 4, 1, 4, 8, 128);
  CHECK(cpu_kv_share_bytes(&pb, unit_bytes(&pb) - 1) == 0, "not one unit within the budget");
  CHECK(cpu_kv_share_budget() == CPU_KV_SHARE_BUDGET || getenv("FA_CPU_KV_SHARE_BUDGET"),
        "the forward's budget is the default without the test knob");
}

static void slots(void) {
  /* 6 units (3 x 2) of 100 tiles at head dim 256 (25 MiB a unit): two fit 64 MiB. */
  cpu_problem pb = problem(3, 2, 1, 4, 100, 256);
  const size_t bytes = cpu_kv_share_bytes(&pb, CPU_KV_SHARE_BUDGET);
  CHECK(bytes == 2 * unit_bytes(&pb), "two slots (%zu bytes)", bytes);
  static uint32_t fake[1]; /* only addresses are computed */
  cpu_kv_share sh;
  cpu_kv_share_init(&sh, &pb, CPU_KV_SHARE_BUDGET, fake);
  CHECK(sh.slots == 2 && sh.units == 6 && sh.k_tiles == 100, "slots %lld units %lld",
        (long long)sh.slots, (long long)sh.units);
  CHECK(sh.k_words == (size_t)256 * 256 / 2 && sh.tile_words == 2 * sh.k_words,
        "K's words then V's");
  const uint32_t *t00 = cpu_kv_share_tile(&sh, 0, 0), *t01 = cpu_kv_share_tile(&sh, 0, 1);
  const uint32_t *t10 = cpu_kv_share_tile(&sh, 1, 0), *t20 = cpu_kv_share_tile(&sh, 2, 0);
  const uint32_t *last = cpu_kv_share_tile(&sh, 5, 99);
  CHECK(t01 - t00 == (ptrdiff_t)sh.tile_words, "a unit's tiles consecutive");
  CHECK(t10 - t00 == (ptrdiff_t)(100 * sh.tile_words), "the next unit in the next slot");
  CHECK(t20 == t00, "units a chunk apart share a slot");
  CHECK((size_t)(last - t00 + (ptrdiff_t)sh.tile_words) * sizeof(uint32_t) <= bytes,
        "the last tile inside the region");
  cpu_kv_share_init(&sh, &pb, CPU_KV_SHARE_BUDGET, NULL);
  CHECK(sh.slots == 0, "no region: no sharing");
}

int main(void) {
  when_it_applies();
  slots();
  if (fails) {
    printf("test_cpu_kv_share: %d failed\n", fails);
    return 1;
  }
  printf("test_cpu_kv_share: passed\n");
  return 0;
}
