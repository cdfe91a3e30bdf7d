/*
 * mask.c: the causal and window mask of core/math/mask.h against brute force (key ranges, tile
 * classes, row ranges), and the two forms of the softcap's gradient in core/math/score.h.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/math/mask.h"
#include "flash_attn.h"
#include "core/math/score.h"
#include "test_core.h"

typedef struct mask_case {
  int64_t sq, sk;
  int32_t causal, align, window;
  int64_t left, right;
} mask_case;

/* The mask as the public header words it, element by element, with no range arithmetic. */
static int brute_keep(const mask_case *c, int64_t i, int64_t j) {
  if (j < 0 || j >= c->sk) return 0;
  int64_t diag = i + (c->align == FA_CAUSAL_TOP_LEFT ? 0 : c->sk - c->sq);
  if (c->causal && j > diag) return 0;
  if (c->window && c->left >= 0 && j < diag - c->left) return 0;
  if (c->window && c->right >= 0 && j > diag + c->right) return 0;
  return 1;
}

static void random_mask_case(mask_case *c) {
  c->sq = test_rng_range(1, 70);
  c->sk = test_rng_range(1, 70);
  if (test_rng_u32() % 4 == 0) c->sq = c->sk;
  c->causal = (int32_t)(test_rng_u32() % 2);
  c->align = (int32_t)(test_rng_u32() % 2);
  c->window = (int32_t)(test_rng_u32() % 2);
  c->left = test_rng_u32() % 3 == 0 ? -1 : test_rng_range(0, 80);
  c->right = test_rng_u32() % 3 == 0 ? -1 : test_rng_range(0, 80);
}

static fa_mask make_mask(const mask_case *c) {
  return fa_mask_make(c->causal, c->align, c->window, c->left, c->right, c->sq, c->sk);
}

void test_mask_key_range(void) {
  test_case_begin(
      "fa_mask_key_range equals the brute-force mask (causal both alignments, windows)");
  for (int t = 0; t < 20000; ++t) {
    mask_case c;
    random_mask_case(&c);
    fa_mask m = make_mask(&c);
    int64_t prev_lo = INT64_MIN, prev_hi = INT64_MIN;
    for (int64_t i = 0; i < c.sq; ++i) {
      int64_t lo, hi;
      fa_mask_key_range(&m, i, c.sk, &lo, &hi);
      int bad = 0;
      for (int64_t j = 0; j < c.sk; ++j)
        if (brute_keep(&c, i, j) != (j >= lo && j < hi) ||
            brute_keep(&c, i, j) != fa_mask_allows(&m, i, j, c.sk))
          bad = 1;
      if (lo < hi && (lo < 0 || hi > c.sk)) bad = 1;
      if (bad)
        test_fail("sq %" PRId64 " sk %" PRId64 " causal %d align %d window %d (%" PRId64
                  ", %" PRId64 ") row %" PRId64 ": range [%" PRId64 ", %" PRId64 ")",
                  c.sq, c.sk, c.causal, c.align, c.window, c.left, c.right, i, lo, hi);
      /* fa_mask_tile_class relies on both ends being non-decreasing in the row. */
      if (lo < prev_lo || hi < prev_hi) test_fail("range not monotone at row %" PRId64, i);
      prev_lo = lo;
      prev_hi = hi;
    }
  }
  /* Spot checks of the conventions themselves (FlashAttention >= 2.1). */
  mask_case br = {2, 5, 1, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1};
  if (!brute_keep(&br, 0, 3) || brute_keep(&br, 0, 4)) test_fail("bottom-right brute force wrong");
  fa_mask m = make_mask(&br);
  int64_t lo, hi;
  fa_mask_key_range(&m, 0, 5, &lo, &hi);
  if (lo != 0 || hi != 4)
    test_fail("bottom-right causal row 0 of 2x5: [%" PRId64 ", %" PRId64 ")", lo, hi);
  mask_case tl = {2, 5, 1, FA_CAUSAL_TOP_LEFT, 0, -1, -1};
  m = make_mask(&tl);
  fa_mask_key_range(&m, 0, 5, &lo, &hi);
  if (lo != 0 || hi != 1)
    test_fail("top-left causal row 0 of 2x5: [%" PRId64 ", %" PRId64 ")", lo, hi);
  mask_case empty = {5, 2, 1, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1}; /* rows 0..2 see nothing */
  m = make_mask(&empty);
  fa_mask_key_range(&m, 2, 2, &lo, &hi);
  if (lo < hi) test_fail("bottom-right causal 5x2 row 2 is not empty");
  test_case_end();
}

void test_mask_tile_class(void) {
  test_case_begin(
      "fa_mask_tile_class never EMPTY when a pair is kept, never FULL when one is masked");
  long n_empty = 0, n_full = 0, n_partial = 0;
  for (int t = 0; t < 200000; ++t) {
    mask_case c;
    random_mask_case(&c);
    fa_mask m = make_mask(&c);
    int64_t r0 = test_rng_range(0, c.sq - 1), r1 = test_rng_range(r0 + 1, c.sq);
    int64_t c0 = test_rng_range(0, c.sk - 1), c1 = test_rng_range(c0 + 1, c.sk);
    int64_t kept = 0;
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < c1; ++j) kept += brute_keep(&c, i, j);
    fa_tile_class cls = fa_mask_tile_class(&m, r0, r1, c0, c1, c.sk);
    if (cls == FA_TILE_EMPTY) ++n_empty;
    if (cls == FA_TILE_FULL) ++n_full;
    if (cls == FA_TILE_PARTIAL) ++n_partial;
    if ((cls == FA_TILE_EMPTY && kept != 0) ||
        (cls == FA_TILE_FULL && kept != (r1 - r0) * (c1 - c0)))
      test_fail("tile rows [%" PRId64 ", %" PRId64 ") keys [%" PRId64 ", %" PRId64
                ") class %d, kept %" PRId64 " (sq %" PRId64 " sk %" PRId64
                " causal %d align %d window %d %" PRId64 " %" PRId64 ")",
                r0, r1, c0, c1, (int)cls, kept, c.sq, c.sk, c.causal, c.align, c.window, c.left,
                c.right);
  }
  /* All three classes must actually occur, or the sampling above proved nothing. */
  if (n_empty == 0 || n_full == 0 || n_partial == 0)
    test_fail("classes seen: empty %ld full %ld partial %ld", n_empty, n_full, n_partial);
  test_case_end();
}

/* Checks a row-range function of core/math/mask.h against brute force: fa_mask_row_range (every_key
   0: the rows that keep some key of [c0, c1)) or fa_mask_full_rows (every_key 1: the rows that
   keep all of them; key tiles may then run past seqlen_k, as a kernel's last tile does). */
static void check_row_ranges(const char *name, int every_key) {
  test_case_begin(name);
  long n_empty = 0, n_some = 0;
  for (int t = 0; t < 100000; ++t) {
    mask_case c;
    random_mask_case(&c);
    fa_mask m = make_mask(&c);
    int64_t c0 = test_rng_range(0, c.sk - 1),
            c1 = test_rng_range(c0 + 1, every_key ? c.sk + 3 : c.sk);
    int64_t r0, r1;
    if (every_key)
      fa_mask_full_rows(&m, c0, c1, c.sq, c.sk, &r0, &r1);
    else
      fa_mask_row_range(&m, c0, c1, c.sq, &r0, &r1);
    if (r0 < r1)
      ++n_some;
    else
      ++n_empty;
    for (int64_t i = 0; i < c.sq; ++i) {
      int some = 0, all = 1;
      for (int64_t j = c0; j < c1; ++j) {
        const int keep = j < c.sk && brute_keep(&c, i, j);
        some |= keep;
        all &= keep;
      }
      const int brute = every_key ? all : some;
      if (brute != (i >= r0 && i < r1))
        test_fail("keys [%" PRId64 ", %" PRId64 ") row %" PRId64 ": brute %d, range [%" PRId64
                  ", %" PRId64 ") (sq %" PRId64 " sk %" PRId64
                  " causal %d align %d window %d %" PRId64 " %" PRId64 ")",
                  c0, c1, i, brute, r0, r1, c.sq, c.sk, c.causal, c.align, c.window, c.left,
                  c.right);
    }
  }
  if (n_empty == 0 || n_some == 0)
    test_fail("ranges seen: empty %ld non-empty %ld", n_empty, n_some);
  test_case_end();
}

void test_mask_row_range(void) {
  check_row_ranges("fa_mask_row_range is exactly the rows that keep a key of the key tile", 0);
}

void test_mask_full_rows(void) {
  check_row_ranges("fa_mask_full_rows is exactly the rows that keep every key of the key tile", 1);
}

void test_softcap_grad_forms(void) {
  test_case_begin("fa_score_softcap_grad_inv equals fa_score_softcap_grad (division-free form)");
  for (int t = 0; t < 100000; ++t) {
    float cap = (float)test_rng_range(1, 100) * 0.5f;
    float raw = ((float)test_rng_range(0, 2000000) / 1000000.0f - 1.0f) * 3.0f * cap;
    float z = fa_score_softcap(raw, cap);
    double want = fa_score_softcap_grad(z, cap), got = fa_score_softcap_grad_inv(z, 1.0f / cap);
    /* 1 - t^2 near t = 1 cancels: both forms carry an absolute error of a few ulp of 1. */
    if (fabs(got - want) > 1e-6)
      test_fail("cap %g z %g: division form %.9g, reciprocal form %.9g", cap, z, want, got);
    if (fa_score_softcap_grad_inv(raw, 0.0f) != 1.0f) test_fail("factor without softcap is not 1");
  }
  test_case_end();
}
