/*
 * check_count.h: the CPU test programs' CHECK(cond, fmt, ...): a failed check prints "FAIL: " and
 * the message on stderr; both outcomes are counted, and check_count_summary prints the tally and
 * gives the exit status. Header-only (one copy per program). The GPU programs' form, with a line
 * per check, is tests/gpu/check_tally.h.
 */
#ifndef FA_TESTS_CHECK_COUNT_H
#define FA_TESTS_CHECK_COUNT_H

#include <stdio.h>

static int g_fail, g_pass;

#define CHECK(cond, ...)                     \
  do {                                       \
    if (cond) {                              \
      ++g_pass;                              \
    } else {                                 \
      ++g_fail;                              \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fprintf(stderr, "\n");                 \
    }                                        \
  } while (0)

/* Prints "program: N passed, M failed"; 0 when every check passed, else 1. */
static inline int check_count_summary(const char *program) {
  printf("%s: %d passed, %d failed\n", program, g_pass, g_fail);
  return g_fail ? 1 : 0;
}

#endif /* FA_TESTS_CHECK_COUNT_H */
