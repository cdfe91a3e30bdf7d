/*
 * plan.c: the tile plan of core/plan.h (fa_plan_tiles): its properties over many limits, head
 * dims and budgets, each reported as its own case.
 */
#include <inttypes.h>
#include <stdio.h>

#include "core/plan.h"
#include "test_core.h"

/* The plan's properties, each reported as its own case so a failure names the one that broke. */
enum { PLAN_SHAPE, PLAN_BUDGET, PLAN_BR_LE_BC, PLAN_MONOTONE, PLAN_PROPS };

static const char *const plan_case_names[PLAN_PROPS] = {
    "fa_plan_tiles: tiles >= one granule, multiples of it, <= the kernel's maxima",
    "fa_plan_tiles: 4 * tile_n * head_dim words fit the budget whenever one granule does",
    "fa_plan_tiles: tile_m <= tile_n whenever a granule allows it (Br = min(Bc, d))",
    "fa_plan_tiles: a larger budget never gives smaller tiles"};

void test_plan_invariants(void) {
  /* Limits shaped like the backends': scalar CPU loops (granule 1), SIMD widths, MMA tiles with
     different query and key granules. */
  static const fa_tile_limits shapes[] = {{0, 4, 1, 1, 1024, 1024},  {0, 4, 8, 8, 256, 256},
                                          {0, 4, 16, 16, 128, 256},  {0, 2, 16, 64, 128, 128},
                                          {0, 2, 64, 64, 192, 256},  {0, 4, 4, 32, 64, 512},
                                          {0, 2, 128, 128, 128, 128}};
  long fails[PLAN_PROPS] = {0};
  char first[PLAN_PROPS][5][200];
  long checked = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    fa_tile_limits lim = shapes[s];
    int32_t cap_m = lim.max_m >= lim.granule_m ? lim.max_m : lim.granule_m;
    int32_t cap_n = lim.max_n >= lim.granule_n ? lim.max_n : lim.granule_n;
    for (int64_t d = 1; d <= 512; ++d) {
      int32_t prev_n = 0, prev_m = 0;
      /* 16 KiB .. 4 MiB in steps of 2^(1/4), so budgets that are not powers of two occur. */
      for (double budget = 16384.0; budget <= 4194304.0 * 1.0001; budget *= 1.189207115) {
        lim.fast_memory_bytes = (size_t)budget;
        fa_tile_plan p = fa_plan_tiles(&lim, d);
        ++checked;
        double words = (double)lim.fast_memory_bytes / lim.word_bytes;
        int bad[PLAN_PROPS] = {0};
        bad[PLAN_SHAPE] = p.tile_m < lim.granule_m || p.tile_n < lim.granule_n ||
                          p.tile_m % lim.granule_m || p.tile_n % lim.granule_n ||
                          p.tile_m > cap_m || p.tile_n > cap_n ||
                          p.tile_m > (d > lim.granule_m ? d : lim.granule_m);
        /* The FlashAttention budget (paper, Algorithm 1): the K, V tiles and the Q, O tiles no
           larger than them take 4 * Bc * d words of fast memory. */
        bad[PLAN_BUDGET] =
            4.0 * lim.granule_n * (double)d <= words && 4.0 * p.tile_n * (double)d > words;
        bad[PLAN_BR_LE_BC] = lim.granule_m <= p.tile_n && p.tile_m > p.tile_n;
        bad[PLAN_MONOTONE] = p.tile_n < prev_n || p.tile_m < prev_m;
        for (int k = 0; k < PLAN_PROPS; ++k)
          if (bad[k] && fails[k]++ < 5)
            snprintf(first[k][fails[k] - 1], sizeof first[k][0],
                     "limits #%zu (granule %d/%d, max %d/%d, %d-byte words), budget %zu bytes, "
                     "d %" PRId64 " -> %d x %d (4 * tile_n * d words = %.0f bytes)",
                     s, lim.granule_m, lim.granule_n, lim.max_m, lim.max_n, lim.word_bytes,
                     lim.fast_memory_bytes, d, p.tile_m, p.tile_n,
                     4.0 * p.tile_n * (double)d * lim.word_bytes);
        prev_n = p.tile_n;
        prev_m = p.tile_m;
      }
    }
  }
  for (int k = 0; k < PLAN_PROPS; ++k) {
    test_case_begin(plan_case_names[k]);
    for (long i = 0; i < fails[k] && i < 5; ++i) test_fail("%s", first[k][i]);
    test_add_failures(fails[k] - 5); /* the rest, counted, not printed */
    if (k == PLAN_SHAPE) {
      /* Degenerate inputs still give usable tiles (the header's promise). */
      fa_tile_limits tiny = {1, 4, 16, 16, 64, 64};
      fa_tile_plan p = fa_plan_tiles(&tiny, 0);
      if (p.tile_m != 16 || p.tile_n != 16)
        test_fail("budget 1, d 0 -> %d x %d", p.tile_m, p.tile_n);
      fa_tile_limits zero = {1 << 20, 0, 0, 0, 0, 0};
      p = fa_plan_tiles(&zero, 64);
      if (p.tile_m < 1 || p.tile_n < 1) test_fail("zero limits -> %d x %d", p.tile_m, p.tile_n);
      printf("  (%ld plans checked)\n", checked);
    }
    test_case_end();
  }
}
