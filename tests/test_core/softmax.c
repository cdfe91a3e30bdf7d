/*
 * softmax.c: the online softmax of core/math/softmax.h: the merge algebra, a row split into tiles
 * in any order, rows without keys.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/math/softmax.h"
#include "test_core.h"

/* Relative difference that treats two equal infinities (and two zeros) as equal. */
static double rel_diff(double a, double b) {
  if (a == b) return 0.0;
  double scale = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
  return fabs(a - b) / (scale > 1e-30 ? scale : 1e-30);
}

/* A partial result of one row: (m, l) of softmax.h plus a 2-vector o = sum exp(s - m) v. */
typedef struct partial {
  float m, l, o[2];
} partial;

static partial partial_empty(void) {
  partial p = {-INFINITY, 0.0f, {0.0f, 0.0f}};
  return p;
}

static partial merge(partial a, partial b) {
  partial r;
  float a1, a2;
  fa_softmax_merge(a.m, a.l, b.m, b.l, &r.m, &r.l, &a1, &a2);
  for (int c = 0; c < 2; ++c) r.o[c] = a1 * a.o[c] + a2 * b.o[c];
  return r;
}

/* Runs the online algorithm over scores s[lo, hi) (masked entries are -inf) in tiles of `tile`
   keys, exactly as a kernel does: step with the tile max, then accumulate the tile. */
static partial online_row(const float *s, const float (*v)[2], int lo, int hi, int tile) {
  partial p = partial_empty();
  for (int t0 = lo; t0 < hi; t0 += tile) {
    int t1 = t0 + tile < hi ? t0 + tile : hi;
    float tmax = -INFINITY;
    for (int j = t0; j < t1; ++j) tmax = s[j] > tmax ? s[j] : tmax;
    float alpha = fa_softmax_online_step(&p.m, &p.l, tmax);
    p.o[0] *= alpha;
    p.o[1] *= alpha;
    float base = fa_softmax_safe_max(p.m);
    for (int j = t0; j < t1; ++j) {
      float e = expf(s[j] - base);
      p.l += e;
      p.o[0] += e * v[j][0];
      p.o[1] += e * v[j][1];
    }
  }
  return p;
}

/* A partial built from a random set of scores, sometimes empty (the split-KV chunk that saw only
   masked keys). */
static partial random_partial(void) {
  int n = (int)test_rng_range(0, 6);
  if (test_rng_u32() % 4 == 0) n = 0;
  float s[6], v[6][2];
  float shift = (float)test_rng_uniform(-30.0, 30.0);
  for (int j = 0; j < n; ++j) {
    s[j] = shift + (float)test_rng_uniform(-8.0, 8.0);
    v[j][0] = (float)test_rng_uniform(-1.0, 1.0);
    v[j][1] = (float)test_rng_uniform(-1.0, 1.0);
  }
  return online_row(s, (const float(*)[2])v, 0, n, 2);
}

static int partial_bad(const partial *p) {
  return isnan(p->m) || isnan(p->l) || isnan(p->o[0]) || isnan(p->o[1]) || isinf(p->l) ||
         isinf(p->o[0]) || isinf(p->o[1]);
}

/* Normalised views must agree; m itself is the same maximum whatever the order. */
static int partial_close(const partial *a, const partial *b, double tol) {
  if (a->m != b->m) return 0;
  if (rel_diff(a->l, b->l) > tol) return 0;
  for (int c = 0; c < 2; ++c) {
    double x = a->l > 0 ? a->o[c] / a->l : a->o[c];
    double y = b->l > 0 ? b->o[c] / b->l : b->o[c];
    if (fabs(x - y) > tol) return 0;
  }
  return 1;
}

void test_softmax_merge_algebra(void) {
  test_case_begin("fa_softmax_merge is commutative and associative (incl. empty partials)");
  for (int t = 0; t < 200000; ++t) {
    partial a = random_partial(), b = random_partial(), c = random_partial();
    partial ab = merge(a, b), ba = merge(b, a);
    if (!partial_close(&ab, &ba, 1e-6) || partial_bad(&ab))
      test_fail("merge(a,b) != merge(b,a): a=(%g,%g) b=(%g,%g)", (double)a.m, (double)a.l,
                (double)b.m, (double)b.l);
    partial l3 = merge(merge(a, b), c), r3 = merge(a, merge(b, c));
    if (!partial_close(&l3, &r3, 1e-5) || partial_bad(&l3) || partial_bad(&r3))
      test_fail("(ab)c != a(bc): a=(%g,%g) b=(%g,%g) c=(%g,%g) -> l %g/%g", (double)a.m,
                (double)a.l, (double)b.m, (double)b.l, (double)c.m, (double)c.l, (double)l3.l,
                (double)r3.l);
    /* The empty partial is the identity. */
    partial ae = merge(a, partial_empty()), ea = merge(partial_empty(), a);
    if (!partial_close(&ae, &a, 0.0) || !partial_close(&ea, &a, 0.0))
      test_fail("empty partial is not the identity for a=(%g,%g)", (double)a.m, (double)a.l);
  }
  partial ee = merge(partial_empty(), partial_empty());
  if (ee.m != -INFINITY || ee.l != 0.0f || ee.o[0] != 0.0f || partial_bad(&ee))
    test_fail("merge(empty, empty) = (%g, %g, %g)", (double)ee.m, (double)ee.l, (double)ee.o[0]);
  test_case_end();
}

/* One row of random scores with a random contiguous mask; the float64 softmax is the truth. */
typedef struct row_case {
  int n;
  float s[300];
  float v[300][2];
  double lse, out[2]; /* lse -inf when every key is masked */
} row_case;

static void make_row(row_case *r) {
  r->n = (int)test_rng_range(1, 300);
  double spread = test_rng_uniform(0.1, 40.0), shift = test_rng_uniform(-50.0, 50.0);
  for (int j = 0; j < r->n; ++j) {
    r->s[j] = (float)(shift + spread * test_rng_uniform(-1.0, 1.0));
    r->v[j][0] = (float)test_rng_uniform(-1.0, 1.0);
    r->v[j][1] = (float)test_rng_uniform(-1.0, 1.0);
  }
  /* Mask a random prefix and suffix (sometimes everything) the way causal/window masks do. */
  int lo = test_rng_u32() % 3 == 0 ? (int)test_rng_range(0, r->n) : 0;
  int hi = test_rng_u32() % 3 == 0 ? (int)test_rng_range(lo, r->n) : r->n;
  if (test_rng_u32() % 10 == 0) lo = hi = (int)test_rng_range(0, r->n);
  for (int j = 0; j < r->n; ++j)
    if (j < lo || j >= hi) r->s[j] = -INFINITY;
  double m = -INFINITY;
  for (int j = 0; j < r->n; ++j) m = r->s[j] > m ? r->s[j] : m;
  if (m == -INFINITY) {
    r->lse = -INFINITY;
    r->out[0] = r->out[1] = 0.0;
    return;
  }
  double l = 0, o0 = 0, o1 = 0;
  for (int j = 0; j < r->n; ++j) {
    double e = exp((double)r->s[j] - m);
    l += e;
    o0 += e * r->v[j][0];
    o1 += e * r->v[j][1];
  }
  r->lse = m + log(l);
  r->out[0] = o0 / l;
  r->out[1] = o1 / l;
}

static void check_row_result(const row_case *r, double lse, const float out[2], const char *how) {
  if (isnan(lse) || isnan(out[0]) || isnan(out[1])) {
    test_fail("%s: NaN (n = %d)", how, r->n);
    return;
  }
  if (r->lse == -INFINITY) {
    if (lse != -INFINITY || out[0] != 0.0f || out[1] != 0.0f)
      test_fail("%s: empty row gave lse %g out %g %g", how, lse, (double)out[0], (double)out[1]);
    return;
  }
  /* fp32 accumulation of up to 300 terms: a few hundred ulps at most in the worst case. */
  if (fabs(lse - r->lse) > 1e-5 * (1.0 + fabs(r->lse)) || fabs(out[0] - r->out[0]) > 2e-5 ||
      fabs(out[1] - r->out[1]) > 2e-5)
    test_fail("%s: lse %.9g vs %.9g, out %.7g %.7g vs %.7g %.7g (n = %d)", how, lse, r->lse,
              (double)out[0], (double)out[1], r->out[0], r->out[1], r->n);
}

void test_softmax_split_row(void) {
  test_case_begin("online softmax over a random split, merged, equals the whole row (and float64)");
  static row_case r;
  for (int t = 0; t < 20000; ++t) {
    make_row(&r);
    int tile = (int)test_rng_range(1, 64);
    /* Whole row, one pass. */
    partial whole = online_row(r.s, (const float(*)[2])r.v, 0, r.n, tile);
    float out[2] = {whole.o[0] * fa_softmax_out_scale(whole.l),
                    whole.o[1] * fa_softmax_out_scale(whole.l)};
    check_row_result(&r, fa_softmax_lse(whole.m, whole.l), out, "whole row");

    /* Random split into chunks (some empty or fully masked), merged left to right with
       fa_softmax_merge (unnormalised) and, separately, with fa_softmax_merge_lse (normalised
       chunks, split-KV's final step). */
    int cuts[10], nc = (int)test_rng_range(0, 8);
    for (int c = 0; c < nc; ++c) cuts[c] = (int)test_rng_range(0, r.n);
    for (int a = 0; a < nc; ++a) /* sort: chunk bounds must be increasing */
      for (int b = a + 1; b < nc; ++b)
        if (cuts[b] < cuts[a]) {
          int x = cuts[a];
          cuts[a] = cuts[b];
          cuts[b] = x;
        }
    partial acc = partial_empty();
    float lse_acc = -INFINITY, o_acc[2] = {0.0f, 0.0f};
    int start = 0;
    for (int c = 0; c <= nc; ++c) {
      int end = c < nc ? cuts[c] : r.n;
      partial p = online_row(r.s, (const float(*)[2])r.v, start, end, tile);
      acc = merge(acc, p);
      float lse_p = fa_softmax_lse(p.m, p.l), w1, w2;
      float sc = fa_softmax_out_scale(p.l);
      lse_acc = fa_softmax_merge_lse(lse_acc, lse_p, &w1, &w2);
      for (int k = 0; k < 2; ++k) o_acc[k] = w1 * o_acc[k] + w2 * (p.o[k] * sc);
      start = end;
    }
    float out2[2] = {acc.o[0] * fa_softmax_out_scale(acc.l),
                     acc.o[1] * fa_softmax_out_scale(acc.l)};
    check_row_result(&r, fa_softmax_lse(acc.m, acc.l), out2, "split + fa_softmax_merge");
    check_row_result(&r, lse_acc, o_acc, "split + fa_softmax_merge_lse");
    /* The two merge routes give the same LSE up to rounding. */
    if (r.lse != -INFINITY &&
        fabs((double)lse_acc - (double)fa_softmax_lse(acc.m, acc.l)) > 1e-5 * (1 + fabs(r.lse)))
      test_fail("merge_lse %g vs merge %g", (double)lse_acc, (double)fa_softmax_lse(acc.m, acc.l));
  }
  test_case_end();
}

void test_softmax_empty_rows(void) {
  test_case_begin("fully masked rows: lse -inf, out scale 0, P 0, never NaN");
  float s[8], v[8][2];
  for (int j = 0; j < 8; ++j) {
    s[j] = -INFINITY;
    v[j][0] = 1.0f;
    v[j][1] = -1.0f;
  }
  for (int tile = 1; tile <= 8; ++tile) {
    partial p = online_row(s, (const float(*)[2])v, 0, 8, tile);
    if (partial_bad(&p) || p.l != 0.0f || p.o[0] != 0.0f)
      test_fail("tile %d: l %g", tile, (double)p.l);
    if (fa_softmax_lse(p.m, p.l) != -INFINITY) test_fail("lse is not -inf");
    float sc = fa_softmax_out_scale(p.l);
    if (sc != 0.0f || isnan(p.o[0] * sc)) test_fail("out scale %g", (double)sc);
  }
  if (fa_softmax_safe_max(-INFINITY) != 0.0f) test_fail("safe_max(-inf) != 0");
  float w1 = -1, w2 = -1;
  float lse = fa_softmax_merge_lse(-INFINITY, -INFINITY, &w1, &w2);
  if (lse != -INFINITY || w1 != 0.0f || w2 != 0.0f) test_fail("merge_lse(-inf, -inf) gave weights");
  lse = fa_softmax_merge_lse(-INFINITY, 2.5f, &w1, &w2);
  if (lse != 2.5f || w1 != 0.0f || w2 != 1.0f) test_fail("merge_lse(-inf, x) != x");
  if (fa_softmax_prob_from_lse(3.0f, -INFINITY) != 0.0f) test_fail("P from lse -inf is not 0");
  if (fa_softmax_prob_from_lse(-INFINITY, 1.0f) != 0.0f) test_fail("P of a masked score is not 0");
  /* A row whose first tiles are masked and later ones are not must not carry a NaN over. */
  float s2[8] = {-INFINITY, -INFINITY, -INFINITY, 1.0f, 2.0f, -INFINITY, 0.5f, -INFINITY};
  partial p2 = online_row(s2, (const float(*)[2])v, 0, 8, 2);
  double want = 2.0 + log(exp(-1.0) + 1.0 + exp(-1.5));
  if (partial_bad(&p2) || fabs(fa_softmax_lse(p2.m, p2.l) - want) > 1e-6)
    test_fail("masked-then-live row: lse %g, want %g", (double)fa_softmax_lse(p2.m, p2.l), want);
  test_case_end();
}
