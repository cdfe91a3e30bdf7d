/*
 * fuzz_quantize.c: fa_quantize on the forward's q (x: its decoded and mutated description and
 * buffer) into y and descale (S_QY, S_QYD), with decoded block rows, rotation and seed. Oracles:
 * the status is an fa_status with a message on failure; a failed call writes nothing; a successful
 * one writes nothing but y and descale, on the CPU backend; the sanitizers watch the rest.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

void fuzz_quantize_check(call *c, const problem *pb) {
  slot *s = c->s;
  if (!s[S_QY].used || !s[S_Q].used) return;
  for (int i = 0; i < S_COUNT; ++i)
    if (s[i].snap) memcpy(s[i].snap, s[i].buf, s[i].bytes); /* as the calls before left them */
  fa_quantize_args args;
  fa_quantize_args_init(&args);
  args.block_rows = pb->quant_rows;
  args.rotate = pb->quant_rotate;
  args.rotate_seed = pb->quant_seed;
  fa_run_info info;
  fa_run_info_init(&info);
  fa_status st =
      fa_quantize(&args, &s[S_Q].t, &s[S_QY].t, s[S_QYD].used ? &s[S_QYD].t : NULL, &info);
  if (st < FA_OK || st > FA_ERR_INTERNAL) FAIL("fa_quantize returned %d, not an fa_status", st);
  if (st == FA_ERR_INTERNAL) FAIL("fa_quantize: FA_ERR_INTERNAL: %s", fa_last_error());
  if (st != FA_OK && fa_last_error()[0] == '\0')
    FAIL("fa_quantize failed (%d) without a message", st);
  if (st == FA_OK && strcmp(info.backend_name, "cpu") != 0)
    FAIL("fa_quantize ran on '%s' for host memory", info.backend_name);
  for (int i = 0; i < S_COUNT; ++i) {
    if (!s[i].snap || (st == FA_OK && (i == S_QY || i == S_QYD))) continue;
    if (memcmp(s[i].snap, s[i].buf, s[i].bytes) != 0)
      FAIL("fa_quantize (%s: %s) changed tensor slot %d", fa_status_string(st), fa_last_error(), i);
  }
}
