/*
 * test_core.c: unit tests of the backend-neutral algebra in core/ (Philox and dropout, the
 * online-softmax merge, the mask, the storage conversions, the tile plan, the string builder of
 * the per-call paths, the reading of integer knobs; one file each in
 * tests/test_core/) and of the public name functions. No plugin is loaded: these are the
 * definitions every backend is held to, so they are checked against independent formulations
 * (published known answers, brute force, float64 arithmetic), never against themselves.
 *
 * Usage: test_core [seed]   (the seed of the random cases; printed so a failure can be replayed)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flash_attn.h"
#include "test_core/test_core.h"

static void test_enum_names(void) {
  test_case_begin("fa_dtype_name / fa_dtype_size / fa_device_kind_name / fa_status_string");
  static const struct {
    int32_t dtype;
    const char *name;
    size_t size;
  } dt[] = {{FA_F32, "f32", 4},
            {FA_F16, "f16", 2},
            {FA_BF16, "bf16", 2},
            {FA_I32, "i32", 4},
            {FA_F8E4M3, "f8e4m3", 1},
            {FA_F8E5M2, "f8e5m2", 1},
            {FA_DTYPE_INVALID, "invalid", 0},
            {77, "invalid", 0},
            {-1, "invalid", 0}};
  for (size_t i = 0; i < sizeof dt / sizeof dt[0]; ++i) {
    if (strcmp(fa_dtype_name(dt[i].dtype), dt[i].name) != 0)
      test_fail("fa_dtype_name(%d) = %s, want %s", (int)dt[i].dtype, fa_dtype_name(dt[i].dtype),
                dt[i].name);
    if (fa_dtype_size(dt[i].dtype) != dt[i].size)
      test_fail("fa_dtype_size(%d) = %zu, want %zu", (int)dt[i].dtype, fa_dtype_size(dt[i].dtype),
                dt[i].size);
  }
  static const char *const kinds[] = {"invalid", "cpu", "cuda", "hip", "opencl", "invalid"};
  for (int32_t k = 0; k <= 5; ++k)
    if (strcmp(fa_device_kind_name(k), kinds[k]) != 0)
      test_fail("fa_device_kind_name(%d) = %s, want %s", (int)k, fa_device_kind_name(k), kinds[k]);
  if (strcmp(fa_status_string(FA_ERR_UNSUPPORTED), "FA_ERR_UNSUPPORTED") != 0 ||
      strcmp(fa_status_string(FA_OK), "FA_OK") != 0 ||
      strcmp(fa_status_string((fa_status)99), "FA_ERR_UNKNOWN") != 0)
    test_fail("fa_status_string names");
  test_case_end();
}

int main(int argc, char **argv) {
  /* Fresh cases every run; the seed is printed so a failure can be replayed. */
  uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0)
                           : ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock() ^ (uint64_t)getpid();
  test_rng_seed(seed);
  printf("test_core: seed %" PRIu64 "\n", seed);

  test_philox_kat();
  test_dropout_counter_layout();
  test_dropout_threshold();
  test_dropout_rate();
  test_softmax_merge_algebra();
  test_softmax_split_row();
  test_softmax_empty_rows();
  test_mask_key_range();
  test_mask_tile_class();
  test_mask_row_range();
  test_mask_full_rows();
  test_softcap_grad_forms();
  test_dtype_rounding();
  test_dtype_round_trip();
  test_fp8_conversions();
  test_hadamard_rotation();
  test_enum_names();
  test_plan_invariants();
  test_strbuf_matches_snprintf();
  test_env_int();

  return test_summary("test_core");
}
