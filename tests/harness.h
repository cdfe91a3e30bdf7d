/*
 * harness.h: the small harness the unit-test programs share (test_ prefix; tests/harness.c, in
 * the fa_testutil library).
 *
 * One case is one property: test_case_begin(name), checks that call test_fail(...) when they do
 * not hold, test_case_end(). A case passes when no check inside it failed; it prints "ok   <name>"
 * or "FAIL <name> (<n> failed checks)", and under it only the first five failures (every one with
 * FA_TEST_VERBOSE set), so a broken property does not flood the log. test_summary prints
 * "<program>: N passed, M failed" and returns the exit status.
 *
 * test_rng_*: splitmix64, a test's own random cases, seeded from its command line (or the clock)
 * and printed so a failure can be replayed. One stream per program.
 */
#ifndef FA_TESTS_HARNESS_H
#define FA_TESTS_HARNESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void test_case_begin(const char *name);
/* A failed check of the current case: "  <case>: <message>". */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void test_fail(const char *fmt, ...);
/* Counts n more failed checks of the current case without printing them (a case that printed
   its first failures itself). */
void test_add_failures(long n);
/* Ends the current case; returns 1 when it passed. */
int test_case_end(void);
/* Prints "<program>: N passed, M failed"; returns 0 when nothing failed, else 1. */
int test_summary(const char *program);

void test_rng_seed(uint64_t seed);
uint64_t test_rng_u64(void);
uint32_t test_rng_u32(void);
double test_rng_unit(void);                     /* uniform in [0, 1) */
int64_t test_rng_range(int64_t lo, int64_t hi); /* uniform integer in [lo, hi] */
double test_rng_uniform(double lo, double hi);  /* uniform in [lo, hi) */

#ifdef __cplusplus
}
#endif

#endif /* FA_TESTS_HARNESS_H */
