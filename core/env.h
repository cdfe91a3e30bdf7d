/*
 * env.h: the backends' integer knobs from the environment (FA_CPU_KV_SHARE_BUDGET,
 * FA_CUDA_SMEM_LIMIT, FA_CUDA_FA3_GRID, FA_OPENCL_DEVICE, FA_HIPGEN_LDS), read by one rule.
 * Header-only, so that the plugins use it without a new symbol.
 */
#ifndef FA_CORE_ENV_H
#define FA_CORE_ENV_H

#include <errno.h>
#include <stdlib.h>

typedef enum fa_env_result {
  FA_ENV_INVALID = -1, /* set, but no integer in the range: the caller says what follows */
  FA_ENV_UNSET = 0,    /* unset or empty */
  FA_ENV_SET = 1       /* *out holds the value */
} fa_env_result;

/* The environment variable `name` as a decimal integer in [lo, hi]: strtoll's reading (leading
   blanks and a sign allowed), which must take the whole value ("12abc", "0x10" and values past
   long long are invalid). *out is written only with FA_ENV_SET; errno is left as it was. */
static inline fa_env_result fa_env_int(const char *name, long long lo, long long hi,
                                       long long *out) {
  const char *v = getenv(name);
  if (!v || !*v) return FA_ENV_UNSET;
  const int saved = errno;
  char *end = NULL;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  const int range = errno == ERANGE;
  errno = saved;
  if (end == v || *end != '\0' || range || x < lo || x > hi) return FA_ENV_INVALID;
  *out = x;
  return FA_ENV_SET;
}

#endif /* FA_CORE_ENV_H */
