/*
 * check_tally.h: the GPU test programs' PASS / FAIL lines and their count (header-only, for the
 * programs in tests/gpu).
 */
#ifndef FA_TESTS_GPU_CHECK_TALLY_H
#define FA_TESTS_GPU_CHECK_TALLY_H

#include <stdio.h>

static int g_failed = 0, g_passed = 0;

/* One line, "PASS what" or "FAIL what: detail" (the detail only when there is one), flushed so
   that a crash later keeps it in the log. */
static void check(int ok, const char *what, const char *detail) {
  printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what, detail && *detail ? ": " : "",
         detail ? detail : "");
  fflush(stdout);
  if (ok)
    ++g_passed;
  else
    ++g_failed;
}

/* Prints "program: N passed, M failed"; returns the exit status (0 all passed, 1 otherwise). */
static int check_summary(const char *program) {
  printf("%s: %d passed, %d failed\n", program, g_passed, g_failed);
  return g_failed ? 1 : 0;
}

#endif /* FA_TESTS_GPU_CHECK_TALLY_H */
