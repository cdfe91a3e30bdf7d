/*
 * reference.c: naive attention (scores materialised row by row) in float64 and in the storage
 * dtype: the mask, Philox, and the driver that runs the (batch, kv head) units on threads. The
 * units themselves are in tests/reference/ (unit_f64.c, unit_storage.c), with the pass rule
 * (pass_rule.c). Written for clarity first.
 */
/* sysconf() is POSIX; the build is strict C11, so ask for it explicitly. */
#define _POSIX_C_SOURCE 200809L

#include "reference/reference_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if !defined(__STDC_NO_THREADS__)
#include <threads.h>
#endif

#include "core/math/mask.h"

const char *ref_which_name(ref_which w) {
  static const char *names[REF_NUM_OUTPUTS] = {"out", "lse", "dq", "dk", "dv"};
  return (w >= 0 && w < REF_NUM_OUTPUTS) ? names[w] : "?";
}

double ref_resolve_scale(float softmax_scale, int64_t head_dim) {
  float s = softmax_scale != 0.0f ? softmax_scale : (float)(1.0 / sqrt((double)head_dim));
  return (double)s;
}

int ref_default_threads(void) {
  const char *env = getenv("FA_TEST_THREADS");
  if (env && *env) {
    int n = atoi(env);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)(n > 64 ? 64 : n) : 1;
}

/* ----------------------------------------------------------------------------------------------
 * Mask: which (row, key) pairs are kept, decided by core/math/mask.h so the convention is the
 * core's.
 * -------------------------------------------------------------------------------------------- */

void ref_mask_free(ref_mask *m) {
  free(m->allow);
  free(m->lo);
  free(m->hi);
  memset(m, 0, sizeof *m);
}

static int64_t len_q(const ref_problem *p, const ref_ext *x, int64_t b) {
  return x->lens_q ? x->lens_q[b] : p->seqlen_q;
}
static int64_t len_k(const ref_problem *p, const ref_ext *x, int64_t b) {
  return x->lens_k ? x->lens_k[b] : p->seqlen_k;
}

int ref_mask_build(const ref_problem *p, const ref_ext *x, int64_t b, ref_mask *m) {
  int64_t sq = p->seqlen_q, sk = p->seqlen_k, sqb = len_q(p, x, b), skb = len_k(p, x, b);
  m->allow = (unsigned char *)malloc((size_t)(sq * sk));
  m->lo = (int64_t *)malloc(sizeof(int64_t) * (size_t)sq);
  m->hi = (int64_t *)malloc(sizeof(int64_t) * (size_t)sq);
  if (!m->allow || !m->lo || !m->hi) {
    ref_mask_free(m);
    return -1;
  }
  const int masked = p->causal || x->window;
  fa_mask fm = fa_mask_make(p->causal ? 1 : 0, p->causal_align, x->window ? 1 : 0, x->window_left,
                            x->window_right, sqb, skb);
  for (int64_t i = 0; i < sq; ++i) {
    int64_t lo = sk, hi = 0;
    for (int64_t j = 0; j < sk; ++j) {
      /* Asked pair by pair (not through the key range) so the reference does not depend on the
         range being contiguous. */
      unsigned char a = 0;
      if (i < sqb && j < skb) a = masked ? (unsigned char)fa_mask_allows(&fm, i, j, skb) : 1;
      m->allow[i * sk + j] = a;
      if (a) {
        if (j < lo) lo = j;
        hi = j + 1;
      }
    }
    m->lo[i] = lo;
    m->hi[i] = hi;
  }
  return 0;
}

int64_t ref_seq_shift(const ref_problem *p, const ref_ext *x, int64_t b) {
  return p->causal_align == 1 ? 0 : len_k(p, x, b) - len_q(p, x, b);
}

double ref_alibi_slope(const ref_problem *p, const ref_ext *x, int64_t b, int64_t h) {
  if (!x->alibi) return 0.0;
  return x->alibi_per_batch ? x->alibi[b * p->heads_q + h] : x->alibi[h];
}

static const ref_ext k_no_ext;

unsigned char *ref_masked_map(const ref_problem *p, ref_which which) {
  return ref_masked_map_ext(p, &k_no_ext, which);
}

unsigned char *ref_masked_map_ext(const ref_problem *p, const ref_ext *x, ref_which which) {
  const int64_t sq = p->seqlen_q, sk = p->seqlen_k, B = p->batch;
  unsigned char *row_empty = (unsigned char *)malloc((size_t)(B * sq));
  unsigned char *key_unseen = (unsigned char *)malloc((size_t)(B * sk));
  unsigned char *map = NULL;
  int64_t inner = 1, rows = sq, count = 0;
  const unsigned char *per = row_empty;
  if (!row_empty || !key_unseen) goto done;
  memset(key_unseen, 1, (size_t)(B * sk));
  for (int64_t b = 0; b < B; ++b) {
    ref_mask m;
    memset(&m, 0, sizeof m);
    if (ref_mask_build(p, x, b, &m)) {
      free(row_empty);
      row_empty = NULL;
      goto done;
    }
    for (int64_t i = 0; i < sq; ++i) {
      row_empty[b * sq + i] = m.lo[i] >= m.hi[i];
      for (int64_t j = m.lo[i]; j < m.hi[i]; ++j)
        if (m.allow[i * sk + j]) key_unseen[b * sk + j] = 0;
    }
    ref_mask_free(&m);
  }
  /* Each output is [batch, rows, heads, dim] (lse: [batch, heads, rows]); the map depends only on
     the sequence and the row (or key) index, found from the flat index. */
  switch (which) {
    case REF_OUT:
      inner = p->heads_q * p->head_dim_v;
      break;
    case REF_DQ:
      inner = p->heads_q * p->head_dim;
      break;
    case REF_LSE:
      inner = 1;
      break;
    case REF_DK:
      inner = p->heads_kv * p->head_dim, rows = sk, per = key_unseen;
      break;
    case REF_DV:
      inner = p->heads_kv * p->head_dim_v, rows = sk, per = key_unseen;
      break;
  }
  count = which == REF_LSE ? B * p->heads_q * sq : B * rows * inner;
  map = (unsigned char *)malloc((size_t)count);
  if (map) {
    for (int64_t f = 0; f < count; ++f) {
      if (which == REF_LSE) {
        int64_t b = f / (p->heads_q * sq), i = f % sq;
        map[f] = row_empty[b * sq + i];
      } else {
        int64_t b = f / (rows * inner), r = (f / inner) % rows;
        map[f] = per[b * rows + r];
      }
    }
  }
done:
  free(row_empty);
  free(key_unseen);
  return map;
}

/* ----------------------------------------------------------------------------------------------
 * Philox4x32-10, written from the paper: two 32x32->64 multiplications per round, the high halves
 * xored with the other counter words and the round key, the key bumped by the Weyl constants.
 * -------------------------------------------------------------------------------------------- */

void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  static const uint64_t mul[2] = {0xD2511F53ull, 0xCD9E8D57ull};
  static const uint32_t weyl[2] = {0x9E3779B9u, 0xBB67AE85u};
  uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k[2] = {key[0], key[1]};
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += weyl[0];
      k[1] += weyl[1];
    }
    uint64_t p0 = mul[0] * x[0], p1 = mul[1] * x[2];
    uint32_t y[4];
    y[0] = (uint32_t)(p1 >> 32) ^ x[1] ^ k[0];
    y[1] = (uint32_t)p1;
    y[2] = (uint32_t)(p0 >> 32) ^ x[3] ^ k[1];
    y[3] = (uint32_t)p0;
    memcpy(x, y, sizeof x);
  }
  memcpy(out, x, sizeof x);
}

int ref_dropout_keep(uint64_t seed, uint64_t offset, uint64_t bh, uint64_t row, uint64_t col,
                     double p) {
  double t = floor(p * 4294967296.0);
  uint32_t thr = t <= 0.0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
  uint64_t stream = bh + offset;
  uint32_t ctr[4] = {(uint32_t)(col / 4), (uint32_t)row, (uint32_t)(stream & 0xffffffffu),
                     (uint32_t)(stream >> 32)};
  uint32_t key[2] = {(uint32_t)(seed & 0xffffffffu), (uint32_t)(seed >> 32)};
  uint32_t w[4];
  ref_philox(ctr, key, w);
  return w[col % 4] >= thr;
}

/* ----------------------------------------------------------------------------------------------
 * The driver, one (batch, kv head) unit at a time: the unit owns its kv head's dk/dv and the
 * out/lse/dq of the query heads reading it, so units run in parallel without sharing writes.
 * -------------------------------------------------------------------------------------------- */

static int worker(void *arg) {
  ref_job *J = (ref_job *)arg;
  const long long units = (long long)(J->p->batch * J->p->heads_kv);
  for (;;) {
    long long u = atomic_fetch_add(&J->next, 1);
    if (u >= units || atomic_load(&J->failed)) break;
    int64_t b = u / J->p->heads_kv, g = u % J->p->heads_kv;
    int rc = J->prec == REF_F64 ? ref_unit_f64(J, b, g) : ref_unit_storage(J, b, g);
    if (rc) atomic_store(&J->failed, 1);
  }
  return 0;
}

static int shape_is(const tu_tensor *x, int64_t a, int64_t b, int64_t c, int64_t d) {
  return x && x->t.ndim == 4 && x->t.shape[0] == a && x->t.shape[1] == b && x->t.shape[2] == c &&
         x->t.shape[3] == d;
}

void ref_result_free(ref_result *r) {
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) {
    free(r->t[w]);
    free(r->mag[w]);
  }
  memset(r, 0, sizeof *r);
}

int ref_attention(const ref_problem *p, ref_precision prec, const tu_tensor *q, const tu_tensor *k,
                  const tu_tensor *v, const tu_tensor *dout, ref_result *r, int threads) {
  return ref_attention_ext(p, &k_no_ext, prec, q, k, v, dout, r, threads);
}

int ref_attention_ext(const ref_problem *p, const ref_ext *x, ref_precision prec,
                      const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                      const tu_tensor *dout, ref_result *r, int threads) {
  memset(r, 0, sizeof *r);
  if (p->batch < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->heads_kv < 1 ||
      p->heads_q % p->heads_kv || p->head_dim < 1 || p->head_dim_v < 1)
    return -1;
  for (int64_t b = 0; b < p->batch; ++b)
    if (len_q(p, x, b) < 0 || len_q(p, x, b) > p->seqlen_q || len_k(p, x, b) < 0 ||
        len_k(p, x, b) > p->seqlen_k)
      return -1;
  if (!shape_is(q, p->batch, p->seqlen_q, p->heads_q, p->head_dim) ||
      !shape_is(k, p->batch, p->seqlen_k, p->heads_kv, p->head_dim) ||
      !shape_is(v, p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v) ||
      (dout && !shape_is(dout, p->batch, p->seqlen_q, p->heads_q, p->head_dim_v)))
    return -1;
  r->n[REF_OUT] = p->batch * p->seqlen_q * p->heads_q * p->head_dim_v;
  r->n[REF_LSE] = p->batch * p->heads_q * p->seqlen_q;
  if (dout) {
    r->n[REF_DQ] = p->batch * p->seqlen_q * p->heads_q * p->head_dim;
    r->n[REF_DK] = p->batch * p->seqlen_k * p->heads_kv * p->head_dim;
    r->n[REF_DV] = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_v;
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) {
    if (!r->n[w]) continue;
    r->t[w] = (double *)malloc(sizeof(double) * (size_t)r->n[w]);
    if (prec == REF_F64) r->mag[w] = (double *)malloc(sizeof(double) * (size_t)r->n[w]);
    if (!r->t[w] || (prec == REF_F64 && !r->mag[w])) {
      ref_result_free(r);
      return -1;
    }
  }

  ref_job J;
  memset(&J, 0, sizeof J);
  J.p = p;
  J.x = x;
  J.prec = prec;
  J.dtype = q->t.dtype;
  J.q = q;
  J.k = k;
  J.v = v;
  J.dout = dout;
  J.r = r;
  atomic_init(&J.next, 0);
  atomic_init(&J.failed, 0);
  if (threads <= 0) threads = ref_default_threads();
  long long units = (long long)(p->batch * p->heads_kv);
  if (threads > units) threads = (int)units;
#if !defined(__STDC_NO_THREADS__)
  thrd_t tids[64];
  int started = 0;
  for (int t = 1; t < threads && t < 64; ++t) {
    if (thrd_create(&tids[started], worker, &J) != thrd_success) break;
    ++started;
  }
  worker(&J); /* this thread works too; with no thread started it does everything */
  for (int t = 0; t < started; ++t) thrd_join(tids[t], NULL);
#else
  (void)threads;
  worker(&J);
#endif
  if (atomic_load(&J.failed)) {
    ref_result_free(r);
    return -1;
  }
  return 0;
}
