#include "plan.h"

static int32_t round_to_granule(int64_t x, int32_t granule, int32_t max) {
  int64_t g = granule > 0 ? granule : 1;
  int64_t m = max >= g ? max : g;
  if (x > m) x = m;
  x = (x / g) * g;
  return (int32_t)(x < g ? g : x);
}

fa_tile_plan fa_plan_tiles(const fa_tile_limits *limits, int64_t head_dim) {
  int64_t d = head_dim > 0 ? head_dim : 1;
  int64_t words = (int64_t)(limits->fast_memory_bytes /
                            (size_t)(limits->word_bytes > 0 ? limits->word_bytes : 4));
  /* The paper writes Bc = ceil(M / 4d); the floor keeps the four d-wide tiles within the budget
     (the ceiling can overshoot it by up to 4d words). */
  int64_t bc = words / (4 * d);
  fa_tile_plan plan;
  plan.tile_n = round_to_granule(bc, limits->granule_n, limits->max_n);
  /* Br = min(Bc, d) with the Bc actually used, so a clamped Bc also bounds Br. */
  int64_t br = plan.tile_n < d ? plan.tile_n : d;
  plan.tile_m = round_to_granule(br, limits->granule_m, limits->max_m);
  return plan;
}
