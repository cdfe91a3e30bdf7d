/*
 * test_overlap.c: the rule that no output shares memory with an input (core/validate_overlap.c),
 * against brute force. Random layouts of k and out in one host buffer (packed side by side as in
 * [batch, seqlen, n, heads, dim], padded, shifted by a few elements, or placed at random) are
 * given to fa_plan_forward; the test marks every byte of k's elements and looks for one of out's.
 * Where they share a byte the call must fail with FA_ERR_INVALID_ARGUMENT naming out and k;
 * where they do not, it must not fail for that reason. Both outcomes must occur, many times.
 *
 * Usage: test_overlap [seed]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flash_attn.h"
#include "harness.h"

enum { POOL = 1 << 16 }; /* floats in the shared buffer */

static float pool[POOL];
static unsigned char used[POOL * 4];

/* A [b, s, h, d] float32 view of the pool at element offset off with strides st. */
static fa_tensor view(int64_t b, int64_t s, int64_t h, int64_t d, const int64_t *st, int64_t off) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = pool;
  t.byte_offset = (uint64_t)off * 4;
  t.device.kind = FA_DEVICE_CPU;
  t.dtype = FA_F32;
  t.ndim = 4;
  const int64_t shape[4] = {b, s, h, d};
  for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.strides[i] = st[i];
  return t;
}

/* The last element's offset + 1 (the view must fit the pool). */
static int64_t reach(const fa_tensor *t) {
  int64_t r = (int64_t)t->byte_offset / 4;
  for (int i = 0; i < 4; ++i) r += (t->shape[i] - 1) * t->strides[i];
  return r + 1;
}

static void mark(const fa_tensor *t, int set, int *hit) {
  const int64_t base = (int64_t)t->byte_offset / 4;
  for (int64_t a = 0; a < t->shape[0]; ++a)
    for (int64_t b = 0; b < t->shape[1]; ++b)
      for (int64_t c = 0; c < t->shape[2]; ++c)
        for (int64_t d = 0; d < t->shape[3]; ++d) {
          const int64_t e =
              base + a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + d * t->strides[3];
          for (int byte = 0; byte < 4; ++byte) {
            if (set)
              used[e * 4 + byte] = 1;
            else if (used[e * 4 + byte])
              *hit = 1;
          }
        }
}

int main(int argc, char **argv) {
  const uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
  test_rng_seed(seed);
  printf("seed %" PRIu64 "\n", seed);
  static float qbuf[1 << 14], vbuf[1 << 14];
  long n_apart = 0, n_shared = 0, n_interleaved = 0;
  test_case_begin("out and k: refused exactly when they share a byte (brute force)");
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t B = test_rng_range(1, 2), S = test_rng_range(1, 6), H = test_rng_range(1, 3);
    const int64_t D = 4 * test_rng_range(1, 4);
    /* k's layout: packed with P slots per row (slot a k's, slot b out's) and a gap per head. */
    const int64_t P = test_rng_range(1, 3), gap = test_rng_range(0, 1) * test_rng_range(0, 4);
    const int64_t hs = D + gap, rs = P * H * hs, bs = S * rs;
    int64_t ks[4] = {bs, rs, hs, 1}, os[4] = {bs, rs, hs, 1};
    int64_t koff = 0, ooff = 0;
    switch (test_rng_range(0, 3)) {
      case 0: /* packed side by side, maybe the same slot */
        koff = test_rng_range(0, P - 1) * H * hs;
        ooff = test_rng_range(0, P - 1) * H * hs;
        break;
      case 1: /* shifted by a few elements */
        ooff = test_rng_range(0, 2 * D);
        break;
      case 2: /* out with a layout of its own somewhere in k's range */
        os[3] = 1, os[2] = D * test_rng_range(1, 2), os[1] = os[2] * H * test_rng_range(1, 2);
        os[0] = os[1] * S;
        ooff = test_rng_range(0, B * bs);
        break;
      default: /* heads interleaved: out's heads between k's */
        ks[2] = 2 * hs, os[2] = 2 * hs;
        ks[1] = os[1] = 2 * H * hs * P;
        ks[0] = os[0] = S * ks[1];
        ooff = test_rng_range(0, 1) ? hs : 0;
        break;
    }
    fa_tensor k = view(B, S, H, D, ks, koff), out = view(B, S, H, D, os, ooff);
    if (reach(&k) > POOL || reach(&out) > POOL) continue;
    const int64_t qs[4] = {S * H * D, H * D, D, 1};
    fa_tensor q = view(B, S, H, D, qs, 0), v = q;
    q.data = qbuf, v.data = vbuf;
    memset(used, 0, sizeof used);
    int shared = 0;
    mark(&k, 1, NULL);
    mark(&out, 0, &shared);
    fa_params p;
    fa_params_init(&p);
    fa_run_info info;
    fa_run_info_init(&info);
    const fa_status st = fa_plan_forward(&p, &q, &k, &v, &out, NULL, &info);
    const char *msg = fa_last_error();
    const int refused = st == FA_ERR_INVALID_ARGUMENT && strstr(msg, "out and k") != NULL;
    if (shared && !refused)
      test_fail("trial %d: out and k share a byte but the plan says %s: %s", trial,
                fa_status_string(st), msg);
    if (!shared && (refused || st != FA_OK))
      test_fail("trial %d: out and k are apart but the plan says %s: %s", trial,
                fa_status_string(st), msg);
    if (shared)
      ++n_shared;
    else {
      ++n_apart;
      /* apart although their address ranges overlap: what only the search tells */
      const int64_t k0 = koff, k1 = reach(&k), o0 = ooff, o1 = reach(&out);
      if (k0 < o1 && o0 < k1) ++n_interleaved;
    }
  }
  if (n_shared < 200 || n_apart < 200 || n_interleaved < 100)
    test_fail("too few cases of a kind: %ld sharing, %ld apart (%ld of them interleaved)", n_shared,
              n_apart, n_interleaved);
  printf("  %ld sharing, %ld apart (%ld of them within each other's address range)\n", n_shared,
         n_apart, n_interleaved);
  test_case_end();
  return test_summary("test_overlap");
}
