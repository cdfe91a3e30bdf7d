/*
 * test_numbers.c: non-finite inputs and empty problems on the CPU backend (the reference).
 *
 *   NaN in one query row: that row's output and LSE are NaN, every other row finite (and bitwise
 *     what the same call gives without the NaN); the backward pass runs (no crash) and the other
 *     sequences' gradients stay finite.
 *   +Inf in one key element: a query row whose score with that key is +Inf gets NaN (Inf - Inf in
 *     the softmax), one whose score is -Inf treats the key as masked (finite output); rows of other
 *     sequences are untouched by it.
 *   Inf in one value element under a causal mask: rows that see the key get a non-finite entry in
 *     that column only; rows that cannot see it stay finite.
 *   seqlen_q = 0: success, nothing written; backward: dK = dV = 0 (no query sees a key).
 *   seqlen_k = 0: every row sees no key: output 0, LSE -inf; backward: dQ = 0.
 *   batch = 0: success, nothing written, forward and backward, with NULL data pointers.
 * Inputs are fresh random values from the run seed (printed; FA_TEST_SEED replays it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attn.h"
#include "check_count.h"
#include "tensor_util.h"

typedef struct prob {
  int64_t b, sq, sk, hq, hkv, d;
  tu_tensor q, k, v, out, lse, dout, dq, dk, dv;
} prob;

/* tu_alloc wants positive extents: an empty tensor is a view with no memory (data NULL). */
static void alloc_n(tu_tensor *x, fa_dtype dt, int nd, const int64_t *s) {
  int empty = 0;
  for (int i = 0; i < nd; ++i) empty |= s[i] == 0;
  if (!empty) {
    if (tu_alloc(x, dt, nd, s, TU_CONTIGUOUS) != 0) exit(2);
    return;
  }
  memset(x, 0, sizeof *x);
  x->t.device.kind = FA_DEVICE_CPU;
  x->t.dtype = dt;
  x->t.ndim = nd;
  int64_t st = 1;
  for (int i = nd - 1; i >= 0; --i) {
    x->t.shape[i] = s[i];
    x->t.strides[i] = st;
    st *= s[i] > 0 ? s[i] : 1;
  }
}
static void alloc4(tu_tensor *x, fa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t s[4] = {a, b, c, d};
  alloc_n(x, dt, 4, s);
}
static void fill(tu_tensor *x, tu_rng *r) {
  if (x->buf) tu_fill_random(x, r);
}
static void poison(tu_tensor *x) {
  if (x->buf) tu_poison(x);
}

static void setup(prob *p, const char *name) {
  tu_rng r;
  tu_rng_init(&r, tu_seed_for(tu_run_seed(), name));
  alloc4(&p->q, FA_F32, p->b, p->sq, p->hq, p->d);
  alloc4(&p->k, FA_F32, p->b, p->sk, p->hkv, p->d);
  alloc4(&p->v, FA_F32, p->b, p->sk, p->hkv, p->d);
  alloc4(&p->out, FA_F32, p->b, p->sq, p->hq, p->d);
  alloc4(&p->dout, FA_F32, p->b, p->sq, p->hq, p->d);
  alloc4(&p->dq, FA_F32, p->b, p->sq, p->hq, p->d);
  alloc4(&p->dk, FA_F32, p->b, p->sk, p->hkv, p->d);
  alloc4(&p->dv, FA_F32, p->b, p->sk, p->hkv, p->d);
  int64_t ls[3] = {p->b, p->hq, p->sq};
  alloc_n(&p->lse, FA_F32, 3, ls);
  fill(&p->q, &r);
  fill(&p->k, &r);
  fill(&p->v, &r);
  fill(&p->dout, &r);
  poison(&p->out);
  poison(&p->lse);
  poison(&p->dq);
  poison(&p->dk);
  poison(&p->dv);
}

static void release(prob *p) {
  tu_tensor *all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv};
  for (int i = 0; i < 9; ++i) tu_free(all[i]);
}

static fa_run_info g_info;

static fa_status fwd(prob *p, int causal) {
  fa_params pa;
  fa_params_init(&pa);
  pa.backend = FA_BACKEND_CPU;
  pa.strict = 1;
  pa.causal = causal;
  pa.num_splits = 1;
  fa_run_info_init(&g_info);
  return fa_forward(&pa, &p->q.t, &p->k.t, &p->v.t, &p->out.t, &p->lse.t, &g_info);
}

static fa_status bwd(prob *p, int causal) {
  fa_params pa;
  fa_params_init(&pa);
  pa.backend = FA_BACKEND_CPU;
  pa.strict = 1;
  pa.causal = causal;
  return fa_backward(&pa, &p->q.t, &p->k.t, &p->v.t, &p->out.t, &p->lse.t, &p->dout.t, &p->dq.t,
                     &p->dk.t, &p->dv.t, NULL);
}

static double at4(const tu_tensor *x, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t idx[4] = {a, b, c, d};
  return tu_get(x, idx);
}
static double lse_at(const prob *p, int64_t b, int64_t h, int64_t i) {
  int64_t idx[3] = {b, h, i};
  return tu_get(&p->lse, idx);
}

/* Whether row (b, i, h) of out is all finite / all NaN. */
static int row_finite(const prob *p, const tu_tensor *x, int64_t b, int64_t i, int64_t h) {
  for (int64_t c = 0; c < p->d; ++c)
    if (!isfinite(at4(x, b, i, h, c))) return 0;
  return 1;
}
static int row_nan(const prob *p, const tu_tensor *x, int64_t b, int64_t i, int64_t h) {
  for (int64_t c = 0; c < p->d; ++c)
    if (!isnan(at4(x, b, i, h, c))) return 0;
  return 1;
}

static void nan_in_q(void) {
  prob p = {.b = 2, .sq = 33, .sk = 29, .hq = 4, .hkv = 2, .d = 16};
  setup(&p, "numbers.nan_q");
  prob clean = p;
  setup(&clean, "numbers.nan_q"); /* same values */
  const int64_t b0 = 1, i0 = 17, h0 = 2;
  int64_t idx[4] = {b0, i0, h0, 5};
  tu_set(&p.q, idx, NAN);
  CHECK(fwd(&p, 0) == FA_OK && fwd(&clean, 0) == FA_OK, "NaN in q: forward failed: %s",
        fa_last_error());
  int others_ok = 1, same = 1;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t i = 0; i < p.sq; ++i)
      for (int64_t h = 0; h < p.hq; ++h) {
        if (b == b0 && i == i0 && h == h0) continue;
        if (!row_finite(&p, &p.out, b, i, h) || !isfinite(lse_at(&p, b, h, i))) others_ok = 0;
        for (int64_t c = 0; c < p.d; ++c)
          if (at4(&p.out, b, i, h, c) != at4(&clean.out, b, i, h, c)) same = 0;
      }
  CHECK(row_nan(&p, &p.out, b0, i0, h0) && isnan(lse_at(&p, b0, h0, i0)),
        "NaN in q row: that row's output and LSE must be NaN");
  CHECK(others_ok, "NaN in one q row: every other row must stay finite");
  CHECK(same, "NaN in one q row: every other row must equal the NaN-free call bitwise");
  /* The backward pass: runs; sequence 0 (which never sees the NaN) keeps finite gradients. */
  CHECK(bwd(&p, 0) == FA_OK, "NaN in q: backward failed: %s", fa_last_error());
  int finite0 = 1;
  for (int64_t i = 0; i < p.sq; ++i)
    for (int64_t h = 0; h < p.hq; ++h) finite0 &= row_finite(&p, &p.dq, 0, i, h);
  for (int64_t j = 0; j < p.sk; ++j)
    for (int64_t h = 0; h < p.hkv; ++h)
      finite0 &= row_finite(&p, &p.dk, 0, j, h) && row_finite(&p, &p.dv, 0, j, h);
  CHECK(finite0, "NaN in sequence 1's q: sequence 0's gradients must stay finite");
  release(&p);
  release(&clean);
}

static void inf_in_k(void) {
  prob p = {.b = 2, .sq = 24, .sk = 31, .hq = 2, .hkv = 1, .d = 8};
  setup(&p, "numbers.inf_k");
  const int64_t j0 = 11;
  int64_t idx[4] = {0, j0, 0, 0};
  tu_set(&p.k, idx, INFINITY);
  CHECK(fwd(&p, 0) == FA_OK, "Inf in k: forward failed: %s", fa_last_error());
  int ok = 1;
  for (int64_t i = 0; i < p.sq; ++i)
    for (int64_t h = 0; h < p.hq; ++h) {
      double q0 = at4(&p.q, 0, i, h, 0); /* never 0: tu_fill_random draws no zeros */
      if (q0 > 0 && !row_nan(&p, &p.out, 0, i, h)) ok = 0;
      if (q0 < 0 && !row_finite(&p, &p.out, 0, i, h)) ok = 0;
      if (!row_finite(&p, &p.out, 1, i, h)) ok = 0;
    }
  CHECK(ok, "Inf in k: rows with score +Inf must be NaN, -Inf finite, other sequences finite");
  release(&p);
}

/* Inf in V at key j0 (causal, sq == sk: row i sees keys j <= i). Rows that see the key get a
   non-finite entry in its column (and only there). A row that cannot see it but shares its key
   tile may get NaN there too: P = 0 for the masked key times V = Inf in the tile product (as in
   FlashAttention); rows whose query tile never visits that key tile stay finite. */
static void inf_in_v(void) {
  prob p = {.b = 1, .sq = 300, .sk = 300, .hq = 2, .hkv = 2, .d = 8};
  setup(&p, "numbers.inf_v");
  const int64_t j0 = 290, c0 = 3;
  int64_t idx[4] = {0, j0, 1, c0};
  tu_set(&p.v, idx, INFINITY);
  CHECK(fwd(&p, 1) == FA_OK, "Inf in v: forward failed: %s", fa_last_error());
  const int64_t tm = g_info.tile_m, tn = g_info.tile_n, key_tile0 = j0 / tn * tn;
  int ok = 1, far_rows = 0;
  for (int64_t i = 0; i < p.sq; ++i) {
    const int far = (i / tm + 1) * tm - 1 < key_tile0; /* its tile never loads key j0 */
    far_rows += far && i % tm == 0;
    for (int64_t c = 0; c < p.d; ++c) {
      int fin = isfinite(at4(&p.out, 0, i, 1, c));
      if (i >= j0 && c == c0 && fin) ok = 0;          /* sees it: non-finite */
      if (c != c0 && !fin) ok = 0;                    /* other columns: finite */
      if (far && !fin) ok = 0;                        /* never near it: finite */
      if (!isfinite(at4(&p.out, 0, i, 0, c))) ok = 0; /* head 0 reads another KV head */
    }
  }
  CHECK(ok && far_rows > 0,
        "Inf in v: rows that see the key must be non-finite in its column only, rows of query "
        "tiles that never load its key tile finite (tiles %lldx%lld, %d such tiles)",
        (long long)tm, (long long)tn, far_rows);
  release(&p);
}

static int all_zero(const tu_tensor *x) {
  for (int64_t f = 0; f < tu_numel(x); ++f)
    if (tu_get_flat(x, f) != 0.0) return 0;
  return 1;
}

static void empty_seqlen_q(void) {
  prob p = {.b = 2, .sq = 0, .sk = 9, .hq = 2, .hkv = 1, .d = 8};
  setup(&p, "numbers.sq0");
  CHECK(fwd(&p, 1) == FA_OK, "seqlen_q 0: forward: %s", fa_last_error());
  CHECK(!p.out.t.data && !p.lse.t.data, "seqlen_q 0: outputs have no memory");
  CHECK(bwd(&p, 1) == FA_OK, "seqlen_q 0: backward: %s", fa_last_error());
  CHECK(all_zero(&p.dk) && all_zero(&p.dv), "seqlen_q 0: dK and dV must be 0");
  release(&p);
}

static void empty_seqlen_k(void) {
  prob p = {.b = 2, .sq = 7, .sk = 0, .hq = 2, .hkv = 2, .d = 8};
  setup(&p, "numbers.sk0");
  CHECK(fwd(&p, 0) == FA_OK, "seqlen_k 0: forward: %s", fa_last_error());
  int lse_ok = 1;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < p.hq; ++h)
      for (int64_t i = 0; i < p.sq; ++i)
        lse_ok &= isinf(lse_at(&p, b, h, i)) && lse_at(&p, b, h, i) < 0;
  CHECK(all_zero(&p.out) && lse_ok, "seqlen_k 0: output must be 0 and LSE -inf");
  CHECK(bwd(&p, 0) == FA_OK, "seqlen_k 0: backward: %s", fa_last_error());
  CHECK(all_zero(&p.dq), "seqlen_k 0: dQ must be 0");
  release(&p);
}

static void empty_batch(void) {
  /* Shapes with batch 0: no element anywhere, so data may be NULL. */
  fa_tensor q;
  memset(&q, 0, sizeof q);
  q.device.kind = FA_DEVICE_CPU;
  q.dtype = FA_BF16;
  q.ndim = 4;
  q.shape[0] = 0, q.shape[1] = 5, q.shape[2] = 2, q.shape[3] = 16;
  q.strides[3] = 1, q.strides[2] = 16, q.strides[1] = 32, q.strides[0] = 160;
  fa_tensor k = q, v = q, out = q, dout = q, dq = q, dk = q, dv = q, lse;
  memset(&lse, 0, sizeof lse);
  lse.device.kind = FA_DEVICE_CPU;
  lse.dtype = FA_F32;
  lse.ndim = 3;
  lse.shape[0] = 0, lse.shape[1] = 2, lse.shape[2] = 5;
  lse.strides[2] = 1, lse.strides[1] = 5, lse.strides[0] = 10;
  fa_run_info info;
  fa_run_info_init(&info);
  CHECK(
      fa_forward(NULL, &q, &k, &v, &out, &lse, &info) == FA_OK && !strcmp(info.backend_name, "cpu"),
      "batch 0: forward: %s", fa_last_error());
  CHECK(fa_backward(NULL, &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, NULL) == FA_OK,
        "batch 0: backward: %s", fa_last_error());
}

int main(void) {
  printf("test_numbers: seed 0x%llx (FA_TEST_SEED replays it)\n",
         (unsigned long long)tu_run_seed());
  nan_in_q();
  inf_in_k();
  inf_in_v();
  empty_seqlen_q();
  empty_seqlen_k();
  empty_batch();
  return check_count_summary("test_numbers");
}
