/*
 * harness.c: see harness.h.
 */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int g_passed, g_failed;
static const char *g_case = "";
static long g_case_failures;
static uint64_t g_rng;

void test_case_begin(const char *name) {
  g_case = name;
  g_case_failures = 0;
}

void test_fail(const char *fmt, ...) {
  if (++g_case_failures > (getenv("FA_TEST_VERBOSE") ? 100000 : 5)) return;
  va_list ap;
  va_start(ap, fmt);
  printf("  %s: ", g_case);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

void test_add_failures(long n) {
  if (n > 0) g_case_failures += n;
}

int test_case_end(void) {
  const int ok = g_case_failures == 0;
  if (ok) {
    ++g_passed;
    printf("ok   %s\n", g_case);
  } else {
    ++g_failed;
    printf("FAIL %s (%ld failed checks)\n", g_case, g_case_failures);
  }
  fflush(stdout);
  return ok;
}

int test_summary(const char *program) {
  printf("%s: %d passed, %d failed\n", program, g_passed, g_failed);
  fflush(stdout);
  return g_failed == 0 ? 0 : 1;
}

void test_rng_seed(uint64_t seed) { g_rng = seed; }

uint64_t test_rng_u64(void) {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint32_t test_rng_u32(void) { return (uint32_t)(test_rng_u64() >> 32); }

double test_rng_unit(void) { return (double)(test_rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

int64_t test_rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(test_rng_u64() % (uint64_t)(hi - lo + 1));
}

double test_rng_uniform(double lo, double hi) { return lo + (hi - lo) * test_rng_unit(); }
