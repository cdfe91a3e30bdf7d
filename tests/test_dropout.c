/*
 * test_dropout.c: the dropout mask, held against a second Philox4x32-10.
 *
 *   test_dropout [--require]
 *
 * 1. tests/reference.c's Philox (written independently of core/math/philox.h) and the core's both
 *    reproduce the Random123 known-answer vectors, and their keep decisions agree element for
 *    element over random (seed, offset, bh, row, col, p).
 * 2. The kept fraction of the reference's draws matches 1 - p within 5 sigma for p = 0.1, 0.5, 0.9.
 * 3. Through the API, on the CPU backend: with q = 0 every score is equal (P = 1/seqlen_k) and with
 *    v = identity (head_dim_v = seqlen_k) out[i][j] = keep(i, j) / (seqlen_k (1 - p)), so out shows
 *    the library's mask bit for bit. It must equal the reference's mask, and its kept fraction 1 -
 * p within 5 sigma. That forward and backward draw the same mask is what the conformance suite's
 *    dropout cases check (their gradients against the float64 reference).
 * A backend without dropout skips step 3 with its reason (a failure with --require).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/philox.h"
#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"

static int g_pass = 0, g_fail = 0;

static void report(int ok, const char *what) {
  if (ok)
    ++g_pass;
  else
    ++g_fail;
  printf("%s %s\n", ok ? "PASS" : "FAIL", what);
}

/* Random123's kat_vectors for philox4x32_10: counter, key, expected output. */
static const uint32_t k_kat[3][10] = {
    {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
    {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x408f276du,
     0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
    {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0xd16cfe09u,
     0x94fdccebu, 0x5001e420u, 0x24126ea1u},
};

static void test_kat(void) {
  for (int v = 0; v < 3; ++v) {
    const uint32_t *k = k_kat[v];
    uint32_t out[4];
    ref_philox(k, k + 4, out);
    fa_philox4 ctr = {{k[0], k[1], k[2], k[3]}};
    fa_philox4 core = fa_philox4x32_10(ctr, k[4], k[5]);
    char what[160];
    snprintf(what, sizeof what, "Philox KAT %d: reference %08x %08x %08x %08x", v, out[0], out[1],
             out[2], out[3]);
    report(!memcmp(out, k + 6, sizeof out), what);
    snprintf(what, sizeof what, "Philox KAT %d: core/math/philox.h %08x %08x %08x %08x", v,
             core.v[0], core.v[1], core.v[2], core.v[3]);
    report(!memcmp(core.v, k + 6, sizeof out), what);
  }
}

static void test_agree(tu_rng *rng) {
  long long differ = 0, n = 200000;
  for (long long t = 0; t < n; ++t) {
    uint64_t seed = tu_rng_u64(rng), offset = tu_rng_u64(rng) >> (tu_rng_u64(rng) % 64);
    uint64_t bh = tu_rng_u64(rng) % 4096, row = tu_rng_u64(rng) % 100000,
             col = tu_rng_u64(rng) % 100000;
    float p = (float)tu_rng_uniform(rng);
    int a = ref_dropout_keep(seed, offset, bh, row, col, p);
    int b = fa_dropout_keep(seed, offset, bh, row, col, fa_dropout_threshold(p));
    differ += a != b;
  }
  char what[160];
  snprintf(what, sizeof what, "reference and core keep decisions agree (%lld of %lld differ)",
           differ, n);
  report(differ == 0, what);
}

/* |kept/n - (1 - p)| within 5 standard deviations of a binomial. */
static int fraction_ok(long long kept, long long n, double p, char *what, size_t wn,
                       const char *label) {
  double frac = (double)kept / (double)n, sigma = sqrt(p * (1.0 - p) / (double)n);
  double z = (frac - (1.0 - p)) / sigma;
  snprintf(what, wn, "%s p=%.1f: kept %.5f of %lld, expected %.5f (%.2f sigma)", label, p, frac, n,
           1.0 - p, z);
  return fabs(z) <= 5.0;
}

static void test_fraction(void) {
  static const float ps[3] = {0.1f, 0.5f, 0.9f};
  for (int i = 0; i < 3; ++i) {
    long long kept = 0, n = 0;
    for (uint64_t bh = 0; bh < 8; ++bh)
      for (uint64_t row = 0; row < 256; ++row)
        for (uint64_t col = 0; col < 512; ++col, ++n)
          kept += ref_dropout_keep(0x1234abcdULL, 77, bh, row, col, ps[i]);
    char what[200];
    int ok = fraction_ok(kept, n, ps[i], what, sizeof what, "reference draws");
    report(ok, what);
  }
}

/* Returns 0 when run, 1 when the backend refused dropout (reason printed). */
static int test_api(float p, int require) {
  enum { B = 2, SQ = 100, SK = 128, HQ = 4, HKV = 2, D = 32 };
  const int64_t qs[4] = {B, SQ, HQ, D}, ks[4] = {B, SK, HKV, D}, vs[4] = {B, SK, HKV, SK},
                os[4] = {B, SQ, HQ, SK}, ls[3] = {B, HQ, SQ};
  tu_tensor q, k, v, out, lse;
  int rc = 0;
  if (tu_alloc(&q, FA_F32, 4, qs, TU_CONTIGUOUS) || tu_alloc(&k, FA_F32, 4, ks, TU_PADDED) ||
      tu_alloc(&v, FA_F32, 4, vs, TU_CONTIGUOUS) || tu_alloc(&out, FA_F32, 4, os, TU_STRIDED) ||
      tu_alloc(&lse, FA_F32, 3, ls, TU_CONTIGUOUS)) {
    report(0, "out of memory");
    return 0;
  }
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "test_dropout.api"));
  tu_fill_random(&k, &rng);
  for (int64_t f = 0; f < tu_numel(&q); ++f) tu_set_flat(&q, f, 0.0);
  for (int64_t f = 0; f < tu_numel(&v); ++f) {
    int64_t idx[4];
    tu_unflatten(&v, f, idx);
    tu_set(&v, idx, idx[1] == idx[3] ? 1.0 : 0.0);
  }
  fa_params params;
  fa_params_init(&params);
  params.backend = FA_BACKEND_CPU;
  params.strict = 1;
  params.dropout_p = p;
  params.dropout_seed = 0xfeedbeefcafe1234ULL;
  params.dropout_offset = 1000;
  fa_status st = fa_forward(&params, &q.t, &k.t, &v.t, &out.t, &lse.t, NULL);
  char what[300];
  if (st == FA_ERR_UNSUPPORTED && !require) {
    printf("SKIP API mask p=%.1f: %s\n", (double)p, fa_last_error());
    rc = 1;
    goto done;
  }
  if (st != FA_OK) {
    snprintf(what, sizeof what, "fa_forward with dropout_p %.1f: %s: %s", (double)p,
             fa_status_string(st), fa_last_error());
    report(0, what);
    goto done;
  }
  long long kept = 0, n = 0, mismatch = 0, bad_value = 0;
  const double scale = 1.0 / ((double)SK * (1.0 - (double)p));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < SQ; ++i)
        for (int64_t j = 0; j < SK; ++j, ++n) {
          const int64_t idx[4] = {b, i, h, j};
          const double o = tu_get(&out, idx);
          const int lib = o != 0.0;
          const int want = ref_dropout_keep(params.dropout_seed, params.dropout_offset,
                                            (uint64_t)(b * HQ + h), (uint64_t)i, (uint64_t)j, p);
          kept += lib;
          mismatch += lib != want;
          if (!(fabs(o - (lib ? scale : 0.0)) <= 1e-6 * scale)) ++bad_value;
        }
  snprintf(what, sizeof what,
           "API mask p=%.1f equals the reference's Philox mask (%lld of %lld differ, %lld values "
           "not 0 or 1/(sk(1-p)))",
           (double)p, mismatch, n, bad_value);
  report(mismatch == 0 && bad_value == 0, what);
  int ok = fraction_ok(kept, n, p, what, sizeof what, "API kept fraction");
  report(ok, what);
done:
  tu_free(&q);
  tu_free(&k);
  tu_free(&v);
  tu_free(&out);
  tu_free(&lse);
  return rc;
}

int main(int argc, char **argv) {
  int require = argc > 1 && !strcmp(argv[1], "--require");
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "test_dropout"));
  test_kat();
  test_agree(&rng);
  test_fraction();
  static const float ps[3] = {0.1f, 0.5f, 0.9f};
  int skipped = 0;
  for (int i = 0; i < 3; ++i) skipped += test_api(ps[i], require);
  fa_release();
  printf("test_dropout: %d passed, %d failed, %d skipped\n", g_pass, g_fail, skipped);
  return g_fail ? 1 : 0;
}
