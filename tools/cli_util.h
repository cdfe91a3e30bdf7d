/*
 * cli_util.h: the small helpers fa-demo and fa-bench both need (argument parsing, a monotonic
 * clock, sorting times for a median). Header-only: the programs are single files.
 */
#ifndef FA_TOOLS_CLI_UTIL_H
#define FA_TOOLS_CLI_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flash_attn.h"

/* Parses a whole decimal integer in [lo, hi]; 0 on anything else. */
static inline int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || end == s || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* Parses a storage dtype: bf16, f16 (or fp16), f32 (or fp32); 0 on anything else. */
static inline int cli_parse_dtype(const char *s, fa_dtype *out) {
  if (!strcmp(s, "bf16"))
    *out = FA_BF16;
  else if (!strcmp(s, "f16") || !strcmp(s, "fp16"))
    *out = FA_F16;
  else if (!strcmp(s, "f32") || !strcmp(s, "fp32"))
    *out = FA_F32;
  else
    return 0;
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
