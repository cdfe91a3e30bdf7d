/*
 * cli_util.h: the small helpers fa-demo and fa-bench both need (argument parsing, a monotonic
 * clock, sorting times for a median). Header-only: the programs are single files.
 */
#ifndef FA_TOOLS_CLI_UTIL_H
#define FA_TOOLS_CLI_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Parses a whole decimal integer in [lo, hi]; 0 on anything else. */
static inline int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || end == s || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static inline double cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* qsort comparator for doubles, ascending. */
static inline int cli_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif /* FA_TOOLS_CLI_UTIL_H */
