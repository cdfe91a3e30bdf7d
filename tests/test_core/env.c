/*
 * env.c: core/env.h's reading of the backends' integer knobs: what is a value, what is unset,
 * what is invalid (the caller then keeps its default or says why), the range's ends included,
 * *out written only for a value and errno left as it was.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "core/env.h"
#include "test_core.h"

#define VAR "FA_TEST_CORE_ENV_INT"

void test_env_int(void) {
  test_case_begin("fa_env_int: values, unset, invalid, range ends, *out and errno");
  static const struct {
    const char *value; /* NULL: unset */
    long long lo, hi;
    fa_env_result want;
    long long got;
  } cases[] = {
      {NULL, 0, 10, FA_ENV_UNSET, 0},
      {"", 0, 10, FA_ENV_UNSET, 0},
      {"7", 0, 10, FA_ENV_SET, 7},
      {"0", 0, 10, FA_ENV_SET, 0},
      {"10", 0, 10, FA_ENV_SET, 10},
      {"11", 0, 10, FA_ENV_INVALID, 0},
      {"-1", 0, 10, FA_ENV_INVALID, 0},
      {"-3", -5, 10, FA_ENV_SET, -3},
      {"+4", 0, 10, FA_ENV_SET, 4},
      {" 5", 0, 10, FA_ENV_SET, 5},
      {"5 ", 0, 10, FA_ENV_INVALID, 0},
      {"12abc", 0, 100, FA_ENV_INVALID, 0},
      {"0x10", 0, 100, FA_ENV_INVALID, 0},
      {"abc", 0, 100, FA_ENV_INVALID, 0},
      {"-", 0, 100, FA_ENV_INVALID, 0},
      {"9223372036854775807", 0, LLONG_MAX, FA_ENV_SET, LLONG_MAX},
      {"9223372036854775808", 0, LLONG_MAX, FA_ENV_INVALID, 0},
      {"-9223372036854775809", LLONG_MIN, 0, FA_ENV_INVALID, 0},
      {"67108864", 0, LLONG_MAX, FA_ENV_SET, 67108864},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (cases[i].value)
      setenv(VAR, cases[i].value, 1);
    else
      unsetenv(VAR);
    long long out = -42;
    errno = EDOM;
    const fa_env_result r = fa_env_int(VAR, cases[i].lo, cases[i].hi, &out);
    const char *shown = cases[i].value ? cases[i].value : "(unset)";
    if (r != cases[i].want)
      test_fail("'%s' in [%lld, %lld]: result %d, want %d", shown, cases[i].lo, cases[i].hi, (int)r,
                (int)cases[i].want);
    if (cases[i].want == FA_ENV_SET ? out != cases[i].got : out != -42)
      test_fail("'%s': *out %lld, want %lld", shown, out,
                cases[i].want == FA_ENV_SET ? cases[i].got : -42LL);
    if (errno != EDOM) test_fail("'%s': errno changed to %d", shown, errno);
  }
  unsetenv(VAR);
  test_case_end();
}
