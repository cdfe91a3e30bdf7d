/*
 * strbuf.c: core/strbuf.h against snprintf, which it replaces on the per-call paths: the same
 * characters for strings and integers appended in any order, truncated the same way at every
 * capacity (0, 1 and those that cut a piece in its middle), INT64_MIN and INT64_MAX included.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/strbuf.h"
#include "test_core.h"

/* One random name of pieces (strings and integers), built both ways at capacity n. */
static void one_case(size_t n) {
  char want[96] = "", got[96], guard_want[96], guard_got[96];
  memset(got, 'x', sizeof got);
  size_t used = 0;
  fa_strbuf b = fa_strbuf_of(got, n);
  static const char *const words[] = {"cpu.flash.", "avx512", ".fwd", ".hd", "", "x", ".causal"};
  const int pieces = (int)test_rng_range(0, 8);
  for (int i = 0; i < pieces; ++i) {
    char piece[32];
    if (test_rng_range(0, 1)) {
      const char *w = words[test_rng_range(0, 6)];
      snprintf(piece, sizeof piece, "%s", w);
      fa_strbuf_put(&b, w);
    } else {
      int64_t v = (int64_t)test_rng_u64() >> test_rng_range(0, 63);
      const int64_t edge = test_rng_range(0, 9);
      if (edge == 0) v = INT64_MIN;
      if (edge == 1) v = INT64_MAX;
      if (edge == 2) v = 0;
      snprintf(piece, sizeof piece, "%" PRId64, v);
      fa_strbuf_int(&b, v);
    }
    used += strlen(piece);
    strncat(want, piece, sizeof want - strlen(want) - 1);
  }
  /* snprintf's truncation of the whole at capacity n */
  memset(guard_want, 'x', sizeof guard_want);
  if (n) snprintf(guard_want, n, "%s", want);
  memcpy(guard_got, got, sizeof got);
  if (memcmp(guard_want, guard_got, sizeof guard_got) != 0)
    test_fail(
        "capacity %zu: \"%.*s\" but snprintf gives \"%.*s\" (bytes past the end differ, or "
        "the text)",
        n, (int)(n ? n - 1 : 0), guard_got, (int)(n ? n - 1 : 0), guard_want);
  const size_t kept = n ? (used < n - 1 ? used : n - 1) : 0;
  if (b.len != kept) test_fail("capacity %zu: len %zu, %zu characters kept", n, b.len, kept);
}

void test_strbuf_matches_snprintf(void) {
  test_case_begin("strbuf: fa_strbuf_put/int and fa_str_copy equal snprintf, truncation included");
  for (int r = 0; r < 2000; ++r) one_case((size_t)test_rng_range(0, 80));
  char small[4];
  fa_str_copy(small, sizeof small, "cuda.fa3");
  if (strcmp(small, "cud") != 0) test_fail("fa_str_copy into 4 bytes: \"%s\"", small);
  fa_str_copy(small, 1, "x");
  if (small[0] != '\0') test_fail("fa_str_copy into 1 byte leaves \"%s\"", small);
  test_case_end();
}
