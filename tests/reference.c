/*
 * reference.c: naive attention (scores materialised row by row) in float64 and in the storage
 * dtype, plus the pass rule. Written for clarity first; the loops are ordered so that every inner
 * loop is an independent multiply-add over a contiguous row (no reductions in the innermost
 * loop), which lets the compiler vectorise without reassociating sums, so the float64 reference of
 * the larger cases stays affordable.
 */
/* sysconf() is POSIX; the build is strict C11, so ask for it explicitly. */
#define _POSIX_C_SOURCE 200809L

#include "reference.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if !defined(__STDC_NO_THREADS__)
#include <threads.h>
#endif

#include "core/math/dtype.h"
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

typedef struct ref_mask {
  unsigned char *allow; /* [sq * sk] */
  int64_t *lo, *hi;     /* per row: smallest and one past the largest kept key (lo >= hi: none) */
} ref_mask;

static void mask_free(ref_mask *m) {
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

/* The mask of sequence b (its own lengths), over the padded [seqlen_q, seqlen_k] grid. */
static int mask_build(const ref_problem *p, const ref_ext *x, int64_t b, ref_mask *m) {
  int64_t sq = p->seqlen_q, sk = p->seqlen_k, sqb = len_q(p, x, b), skb = len_k(p, x, b);
  m->allow = (unsigned char *)malloc((size_t)(sq * sk));
  m->lo = (int64_t *)malloc(sizeof(int64_t) * (size_t)sq);
  m->hi = (int64_t *)malloc(sizeof(int64_t) * (size_t)sq);
  if (!m->allow || !m->lo || !m->hi) {
    mask_free(m);
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

/* The diagonal offset of sequence b (as core/math/mask.h), for ALiBi's distance. */
static int64_t seq_shift(const ref_problem *p, const ref_ext *x, int64_t b) {
  return p->causal_align == 1 ? 0 : len_k(p, x, b) - len_q(p, x, b);
}

static double alibi_slope(const ref_problem *p, const ref_ext *x, int64_t b, int64_t h) {
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
    if (mask_build(p, x, b, &m)) {
      free(row_empty);
      row_empty = NULL;
      goto done;
    }
    for (int64_t i = 0; i < sq; ++i) {
      row_empty[b * sq + i] = m.lo[i] >= m.hi[i];
      for (int64_t j = m.lo[i]; j < m.hi[i]; ++j)
        if (m.allow[i * sk + j]) key_unseen[b * sk + j] = 0;
    }
    mask_free(&m);
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
 * The computation, one (batch, kv head) unit at a time: the unit owns its kv head's dk/dv and the
 * out/lse/dq of the query heads reading it, so units run in parallel without sharing writes.
 * -------------------------------------------------------------------------------------------- */

typedef struct ref_job {
  const ref_problem *p;
  const ref_ext *x;
  ref_precision prec;
  fa_dtype dtype; /* storage dtype (REF_STORAGE) */
  const tu_tensor *q, *k, *v, *dout;
  ref_result *r;
  atomic_llong next;
  atomic_int failed;
} ref_job;

static void load_f64(const tu_tensor *x, int64_t b, int64_t h, int64_t rows, int64_t cols,
                     double *dst) {
  tu_read_rows_f64(x, b, h, rows, cols, dst);
}

static void load_f32(const tu_tensor *x, int64_t b, int64_t h, int64_t rows, int64_t cols,
                     float *dst) {
  tu_read_rows_f32(x, b, h, rows, cols, dst);
}

static void transpose_f64(const double *a, int64_t rows, int64_t cols, double *t) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
}

static void transpose_f32(const float *a, int64_t rows, int64_t cols, float *t) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
}

/* Rounds an fp32 value to the storage dtype and back: what storing an intermediate tensor in that
   dtype does. fp32 storage keeps the value. */
static float rnd(fa_dtype dt, float x) {
  switch (dt) {
    case FA_F16:
      return fa_f16_to_f32(fa_f32_to_f16(x));
    case FA_BF16:
      return fa_bf16_to_f32(fa_f32_to_bf16(x));
    default:
      return x;
  }
}

/* Offsets into the contiguous result arrays. */
static int64_t at_row(int64_t b, int64_t s, int64_t heads, int64_t h, int64_t rows, int64_t dim) {
  return ((b * rows + s) * heads + h) * dim;
}

/*
 * The float64 computation, and beside it the magnitudes behind the pass rule's fp32 term
 * (ref_result.mag): per output element, an estimate of how far fp32 arithmetic lands from the
 * exact value, in units of the fp32 unit roundoff u, every source taken as an independent random
 * error so they add in quadrature:
 *   - each addition of a sum rounds by up to u times the running partial sum, each product by u
 *     times itself: sqrt(sum_k (partial_k^2 + term_k^2)), the partial sums taken in index order
 *     (query rows, keys, heads from the first): the order in which the large early terms of causal
 *     and single-key rows make them largest, so blocked or tree sums of a kernel stay below;
 *   - S = scale q.k errs by about u |S|, |S| = scale |q|.|k|; through softmax, P_j moves by
 *     u P_j sigma_j, sigma_j = (1 - P_j)|S|_j + sum_{k != j} P_k |S|_k (zero when one key takes all
 *     the probability: P = 1 whatever S is);
 *   - dS = P (dP - D) loses, besides P's error, the rounding of dP and D, which cancel where the
 *     result is small: u P (|dO|.|v_j| + sum_k P_k |dO|.|v_k|).
 * These are estimates, not bounds: what matters is that they grow as the errors of legitimate fp32
 * kernels do (long sums, cancellation); ref_floor turns them into a tolerance.
 */
static int unit_f64(ref_job *J, int64_t b, int64_t g) {
  const ref_problem *p = J->p;
  const ref_ext *x = J->x;
  const int64_t sq = p->seqlen_q, sk = p->seqlen_k, d = p->head_dim, dv = p->head_dim_v;
  const int64_t group = p->heads_q / p->heads_kv;
  const int bwd = J->dout != NULL;
  const double scale = p->scale;
  ref_result *r = J->r;
  int rc = -1;
  double *K = malloc(sizeof(double) * (size_t)(sk * d));
  double *KT = malloc(sizeof(double) * (size_t)(sk * d));
  double *V = malloc(sizeof(double) * (size_t)(sk * dv));
  double *VT = malloc(sizeof(double) * (size_t)(sk * dv));
  double *Q = malloc(sizeof(double) * (size_t)(sq * d));
  double *dO = malloc(sizeof(double) * (size_t)(sq * dv));
  double *s = malloc(sizeof(double) * (size_t)sk);
  double *P = malloc(sizeof(double) * (size_t)sk);
  double *dp = malloc(sizeof(double) * (size_t)sk);
  double *dK = calloc((size_t)(sk * d), sizeof(double));
  double *dV = calloc((size_t)(sk * dv), sizeof(double));
  /* for the magnitudes: |k|ᵀ, |v|ᵀ, per-row |S|, P sigma, |dO|.|v|, and the squared sums */
  double *KaT = malloc(sizeof(double) * (size_t)(sk * d));
  double *VaT = malloc(sizeof(double) * (size_t)(sk * dv));
  double *sa = malloc(sizeof(double) * (size_t)sk);
  double *Ps = malloc(sizeof(double) * (size_t)sk);
  double *dpa = malloc(sizeof(double) * (size_t)sk);
  double *dKv = calloc((size_t)(sk * d), sizeof(double));
  double *dVv = calloc((size_t)(sk * dv), sizeof(double));
  /* dropout's scale per key (keep / (1 - p), or 1) and the softcap's derivative per key */
  double *Z = malloc(sizeof(double) * (size_t)sk);
  double *G = malloc(sizeof(double) * (size_t)sk);
  ref_mask mask;
  memset(&mask, 0, sizeof mask);
  if (!K || !KT || !V || !VT || !Q || !dO || !s || !P || !dp || !dK || !dV || !KaT || !VaT || !sa ||
      !Ps || !dpa || !dKv || !dVv || !Z || !G || mask_build(p, x, b, &mask))
    goto out;
  const int64_t shift = seq_shift(p, x, b);
  const double cap = x->softcap, keep_scale = 1.0 / (1.0 - x->dropout_p);
  load_f64(J->k, b, g, sk, d, K);
  load_f64(J->v, b, g, sk, dv, V);
  transpose_f64(K, sk, d, KT);
  transpose_f64(V, sk, dv, VT);
  for (int64_t t = 0; t < sk * d; ++t) KaT[t] = fabs(KT[t]);
  for (int64_t t = 0; t < sk * dv; ++t) VaT[t] = fabs(VT[t]);

  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    load_f64(J->q, b, h, sq, d, Q);
    if (bwd) load_f64(J->dout, b, h, sq, dv, dO);
    const double slope = alibi_slope(p, x, b, h);
    for (int64_t i = 0; i < sq; ++i) {
      const unsigned char *allow = mask.allow + i * sk;
      const int64_t lo = mask.lo[i], hi = mask.hi[i];
      const int64_t o_at = at_row(b, i, p->heads_q, h, sq, dv);
      const int64_t q_at = at_row(b, i, p->heads_q, h, sq, d);
      const int64_t l_at = (b * p->heads_q + h) * sq + i;
      /* The magnitude arrays hold the squared sums until the row (or unit) is done. */
      double *o = r->t[REF_OUT] + o_at, *ov = r->mag[REF_OUT] + o_at;
      double *lse = r->t[REF_LSE] + l_at, *lsem = r->mag[REF_LSE] + l_at;
      double *dq = bwd ? r->t[REF_DQ] + q_at : NULL, *dqv = bwd ? r->mag[REF_DQ] + q_at : NULL;
      const double *qi = Q + i * d, *doi = dO + i * dv;
      for (int64_t c = 0; c < dv; ++c) o[c] = ov[c] = 0.0;
      if (bwd)
        for (int64_t c = 0; c < d; ++c) dq[c] = dqv[c] = 0.0;
      *lsem = 0.0;
      if (lo >= hi) { /* no key: output 0, lse -inf, gradients 0 (the library's convention) */
        *lse = -INFINITY;
        continue;
      }
      /* S_ij = scale * q_i . k_j, and |S|_ij = scale * |q_i| . |k_j| */
      for (int64_t j = lo; j < hi; ++j) s[j] = sa[j] = 0.0;
      for (int64_t e = 0; e < d; ++e) {
        const double qe = qi[e], qa = fabs(qi[e]), *kt = KT + e * sk, *kat = KaT + e * sk;
        for (int64_t j = lo; j < hi; ++j) s[j] += qe * kt[j];
        for (int64_t j = lo; j < hi; ++j) sa[j] += qa * kat[j];
      }
      double m = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) {
        s[j] *= scale;
        sa[j] *= scale;
        G[j] = 1.0;
        if (cap > 0.0) { /* softcap, then its derivative from the capped value */
          s[j] = cap * tanh(s[j] / cap);
          G[j] = 1.0 - (s[j] / cap) * (s[j] / cap);
        }
        if (x->alibi) s[j] -= slope * fabs((double)(i + shift - j));
        Z[j] = 1.0;
        if (x->dropout_p > 0.0)
          Z[j] =
              ref_dropout_keep(x->dropout_seed, x->dropout_offset, (uint64_t)(b * p->heads_q + h),
                               (uint64_t)i, (uint64_t)j, x->dropout_p)
                  ? keep_scale
                  : 0.0;
        if (allow[j] && s[j] > m) m = s[j];
      }
      double l = 0.0, lv = 0.0; /* lv: squared partial sums of l */
      for (int64_t j = lo; j < hi; ++j) {
        P[j] = allow[j] ? exp(s[j] - m) : 0.0;
        l += P[j];
        lv += l * l;
      }
      double sbar = 0.0; /* sum_k P_k |S|_k */
      for (int64_t j = lo; j < hi; ++j) {
        P[j] /= l;
        sbar += P[j] * sa[j];
      }
      for (int64_t j = lo; j < hi; ++j) {
        double sigma = (1.0 - P[j]) * sa[j] + (sbar - P[j] * sa[j]);
        Ps[j] = P[j] * (sigma > 0.0 ? sigma : 0.0);
      }
      *lse = m + log(l);
      *lsem = fabs(m) + fabs(log(l)) + sqrt(lv) / l + sbar;
      for (int64_t j = lo; j < hi; ++j) {
        const double pj = P[j] * Z[j], ps = Ps[j] * Z[j], *vj = V + j * dv;
        for (int64_t c = 0; c < dv; ++c) {
          const double t = pj * vj[c], e = ps * vj[c];
          o[c] += t;
          ov[c] += o[c] * o[c] + t * t + e * e;
        }
      }
      for (int64_t c = 0; c < dv; ++c) ov[c] = sqrt(ov[c]);
      if (!bwd) continue;
      /* dP = dO·Vᵀ, D = rowsum(P∘dP) (= rowsum(dO∘O)), dS = P∘(dP − D) */
      for (int64_t j = lo; j < hi; ++j) dp[j] = dpa[j] = 0.0;
      for (int64_t e = 0; e < dv; ++e) {
        const double de = doi[e], dea = fabs(doi[e]), *vt = VT + e * sk, *vat = VaT + e * sk;
        for (int64_t j = lo; j < hi; ++j) dp[j] += de * vt[j];
        for (int64_t j = lo; j < hi; ++j) dpa[j] += dea * vat[j];
      }
      /* With dropout, D = rowsum(dO∘O) = sum P Z dP, and dS = P∘(dP∘Z − D); the softcap's
         derivative multiplies dS. */
      double D = 0.0, Da = 0.0;
      for (int64_t j = lo; j < hi; ++j) {
        D += P[j] * Z[j] * dp[j];
        Da += P[j] * Z[j] * dpa[j];
      }
      for (int64_t j = lo; j < hi; ++j) {
        /* masked keys: P = 0, so ds = 0 */
        const double ds = scale * G[j] * P[j] * (dp[j] * Z[j] - D);
        const double eds =
            scale * G[j] * (Ps[j] * fabs(dp[j] * Z[j] - D) + P[j] * (dpa[j] * Z[j] + Da));
        const double pj = P[j] * Z[j], ps = Ps[j] * Z[j], *kj = K + j * d;
        double *dkj = dK + j * d, *dvj = dV + j * dv, *dkvj = dKv + j * d, *dvvj = dVv + j * dv;
        for (int64_t c = 0; c < d; ++c) {
          const double t = ds * kj[c], e = eds * kj[c];
          dq[c] += t;
          dqv[c] += dq[c] * dq[c] + t * t + e * e;
        }
        for (int64_t c = 0; c < d; ++c) {
          const double t = ds * qi[c], e = eds * qi[c];
          dkj[c] += t;
          dkvj[c] += dkj[c] * dkj[c] + t * t + e * e;
        }
        for (int64_t c = 0; c < dv; ++c) {
          const double t = pj * doi[c], e = ps * doi[c];
          dvj[c] += t;
          dvvj[c] += dvj[c] * dvj[c] + t * t + e * e;
        }
      }
      for (int64_t c = 0; c < d; ++c) dqv[c] = sqrt(dqv[c]);
    }
  }
  if (bwd) {
    for (int64_t j = 0; j < sk; ++j) {
      const int64_t k_at = at_row(b, j, p->heads_kv, g, sk, d);
      const int64_t v_at = at_row(b, j, p->heads_kv, g, sk, dv);
      memcpy(r->t[REF_DK] + k_at, dK + j * d, sizeof(double) * (size_t)d);
      memcpy(r->t[REF_DV] + v_at, dV + j * dv, sizeof(double) * (size_t)dv);
      for (int64_t c = 0; c < d; ++c) r->mag[REF_DK][k_at + c] = sqrt(dKv[j * d + c]);
      for (int64_t c = 0; c < dv; ++c) r->mag[REF_DV][v_at + c] = sqrt(dVv[j * dv + c]);
    }
  }
  rc = 0;
out:
  free(K);
  free(KT);
  free(V);
  free(VT);
  free(Q);
  free(dO);
  free(s);
  free(P);
  free(dp);
  free(dK);
  free(dV);
  free(KaT);
  free(VaT);
  free(sa);
  free(Ps);
  free(dpa);
  free(dKv);
  free(dVv);
  free(Z);
  free(G);
  mask_free(&mask);
  return rc;
}

/*
 * The storage-dtype computation, modelled on FlashAttention's reference with upcast=False (PyTorch
 * ops on fp16/bf16 tensors): each matrix product accumulates in fp32 and its result is stored in
 * the dtype; softmax and its backward run in fp32 on stored inputs and store their result; GQA's
 * repeated k/v sum their per-head gradients in fp32 and store once.
 */
static int unit_storage(ref_job *J, int64_t b, int64_t g) {
  const ref_problem *p = J->p;
  const ref_ext *x = J->x;
  const fa_dtype dt = J->dtype;
  const int64_t sq = p->seqlen_q, sk = p->seqlen_k, d = p->head_dim, dv = p->head_dim_v;
  const int64_t group = p->heads_q / p->heads_kv;
  const int bwd = J->dout != NULL;
  const float scale = (float)p->scale;
  ref_result *r = J->r;
  int rc = -1;
  float *K = malloc(sizeof(float) * (size_t)(sk * d));
  float *KT = malloc(sizeof(float) * (size_t)(sk * d));
  float *V = malloc(sizeof(float) * (size_t)(sk * dv));
  float *VT = malloc(sizeof(float) * (size_t)(sk * dv));
  float *Q = malloc(sizeof(float) * (size_t)(sq * d));
  float *dO = malloc(sizeof(float) * (size_t)(sq * dv));
  float *s = malloc(sizeof(float) * (size_t)sk);
  float *P = malloc(sizeof(float) * (size_t)sk);
  float *dp = malloc(sizeof(float) * (size_t)sk);
  float *o = malloc(sizeof(float) * (size_t)dv);
  float *dqa = malloc(sizeof(float) * (size_t)d);
  float *dKh = malloc(sizeof(float) * (size_t)(sk * d));
  float *dVh = malloc(sizeof(float) * (size_t)(sk * dv));
  float *dKg = calloc((size_t)(sk * d), sizeof(float));
  float *dVg = calloc((size_t)(sk * dv), sizeof(float));
  float *Z = malloc(sizeof(float) * (size_t)sk);
  float *Pd = malloc(sizeof(float) * (size_t)sk);
  float *C = malloc(sizeof(float) * (size_t)sk);
  ref_mask mask;
  memset(&mask, 0, sizeof mask);
  if (!K || !KT || !V || !VT || !Q || !dO || !s || !P || !dp || !o || !dqa || !dKh || !dVh ||
      !dKg || !dVg || !Z || !Pd || !C || mask_build(p, x, b, &mask))
    goto out;
  const int64_t shift = seq_shift(p, x, b);
  const float cap = (float)x->softcap, keep_scale = (float)(1.0 / (1.0 - x->dropout_p));
  load_f32(J->k, b, g, sk, d, K);
  load_f32(J->v, b, g, sk, dv, V);
  transpose_f32(K, sk, d, KT);
  transpose_f32(V, sk, dv, VT);

  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    load_f32(J->q, b, h, sq, d, Q);
    /* FlashAttention's reference scales q before the product and stores the scaled q. */
    for (int64_t t = 0; t < sq * d; ++t) Q[t] = rnd(dt, Q[t] * scale);
    if (bwd) {
      load_f32(J->dout, b, h, sq, dv, dO);
      memset(dKh, 0, sizeof(float) * (size_t)(sk * d));
      memset(dVh, 0, sizeof(float) * (size_t)(sk * dv));
    }
    const float slope = (float)alibi_slope(p, x, b, h);
    for (int64_t i = 0; i < sq; ++i) {
      const unsigned char *allow = mask.allow + i * sk;
      const int64_t lo = mask.lo[i], hi = mask.hi[i];
      double *out = r->t[REF_OUT] + at_row(b, i, p->heads_q, h, sq, dv);
      double *lse = r->t[REF_LSE] + (b * p->heads_q + h) * sq + i;
      double *dq = bwd ? r->t[REF_DQ] + at_row(b, i, p->heads_q, h, sq, d) : NULL;
      for (int64_t c = 0; c < dv; ++c) out[c] = 0.0;
      if (bwd)
        for (int64_t c = 0; c < d; ++c) dq[c] = 0.0;
      if (lo >= hi) {
        *lse = -INFINITY;
        continue;
      }
      for (int64_t j = lo; j < hi; ++j) s[j] = 0.0f;
      for (int64_t e = 0; e < d; ++e) {
        const float qe = Q[i * d + e], *kt = KT + e * sk;
        for (int64_t j = lo; j < hi; ++j) s[j] += qe * kt[j];
      }
      float m = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) {
        s[j] = rnd(dt, s[j]);
        if (cap > 0.0f) s[j] = rnd(dt, cap * tanhf(s[j] / cap));
        C[j] = s[j];
        if (x->alibi) s[j] = rnd(dt, s[j] - slope * (float)llabs(i + shift - j));
        Z[j] = 1.0f;
        if (x->dropout_p > 0.0)
          Z[j] =
              ref_dropout_keep(x->dropout_seed, x->dropout_offset, (uint64_t)(b * p->heads_q + h),
                               (uint64_t)i, (uint64_t)j, x->dropout_p)
                  ? keep_scale
                  : 0.0f;
        if (allow[j] && s[j] > m) m = s[j];
      }
      float l = 0.0f;
      for (int64_t j = lo; j < hi; ++j) {
        P[j] = allow[j] ? expf(s[j] - m) : 0.0f;
        l += P[j];
      }
      for (int64_t j = lo; j < hi; ++j) {
        P[j] = rnd(dt, P[j] / l);
        Pd[j] = rnd(dt, P[j] * Z[j]); /* the dropped attention, stored */
      }
      /* The reference itself has no lse; this is lse as fp32 softmax would form it from the
         stored scores, which carries the dtype's error in S. */
      *lse = (double)(m + logf(l));
      for (int64_t c = 0; c < dv; ++c) o[c] = 0.0f;
      for (int64_t j = lo; j < hi; ++j) {
        const float pj = Pd[j], *vj = V + j * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] += pj * vj[c];
      }
      for (int64_t c = 0; c < dv; ++c) out[c] = rnd(dt, o[c]);
      if (!bwd) continue;
      for (int64_t j = lo; j < hi; ++j) dp[j] = 0.0f;
      for (int64_t e = 0; e < dv; ++e) {
        const float de = dO[i * dv + e], *vt = VT + e * sk;
        for (int64_t j = lo; j < hi; ++j) dp[j] += de * vt[j];
      }
      /* dropout's backward stores dP∘Z */
      for (int64_t j = lo; j < hi; ++j) dp[j] = rnd(dt, rnd(dt, dp[j]) * Z[j]);
      float D = 0.0f; /* softmax backward: sum(P∘dP) in fp32 from the stored P and dP */
      for (int64_t j = lo; j < hi; ++j) D += P[j] * dp[j];
      if (x->dropout_p > 0.0) {
        /* With dropout, sum(P∘dP∘Z) is formed the FlashAttention way, rowsum(dO∘O) from the
           stored O: where dS vanishes by cancellation (one key), the product's rounding is what
           a legitimate kernel leaves, and the other form would be exact by construction. */
        D = 0.0f;
        for (int64_t c = 0; c < dv; ++c) D += dO[i * dv + c] * (float)out[c];
      }
      for (int64_t c = 0; c < d; ++c) dqa[c] = 0.0f;
      for (int64_t j = lo; j < hi; ++j) {
        float ds = rnd(dt, P[j] * (dp[j] - D));
        if (cap > 0.0f) ds = rnd(dt, ds * (1.0f - (C[j] / cap) * (C[j] / cap)));
        const float *kj = K + j * d, *qi = Q + i * d, *doi = dO + i * dv;
        float *dkj = dKh + j * d, *dvj = dVh + j * dv;
        for (int64_t c = 0; c < d; ++c) dqa[c] += ds * kj[c];
        for (int64_t c = 0; c < d; ++c) dkj[c] += ds * qi[c];
        for (int64_t c = 0; c < dv; ++c) dvj[c] += Pd[j] * doi[c];
      }
      /* d(scaled q) is stored, then the scaling's backward multiplies by scale and stores again. */
      for (int64_t c = 0; c < d; ++c) dq[c] = rnd(dt, rnd(dt, dqa[c]) * scale);
    }
    if (bwd) {
      for (int64_t t = 0; t < sk * d; ++t) dKg[t] += rnd(dt, dKh[t]);
      for (int64_t t = 0; t < sk * dv; ++t) dVg[t] += rnd(dt, dVh[t]);
    }
  }
  if (bwd) {
    for (int64_t j = 0; j < sk; ++j) {
      double *dk = r->t[REF_DK] + at_row(b, j, p->heads_kv, g, sk, d);
      double *dvo = r->t[REF_DV] + at_row(b, j, p->heads_kv, g, sk, dv);
      for (int64_t c = 0; c < d; ++c) dk[c] = rnd(dt, dKg[j * d + c]);
      for (int64_t c = 0; c < dv; ++c) dvo[c] = rnd(dt, dVg[j * dv + c]);
    }
  }
  rc = 0;
out:
  free(K);
  free(KT);
  free(V);
  free(VT);
  free(Q);
  free(dO);
  free(s);
  free(P);
  free(dp);
  free(o);
  free(dqa);
  free(dKh);
  free(dVh);
  free(dKg);
  free(dVg);
  free(Z);
  free(Pd);
  free(C);
  mask_free(&mask);
  return rc;
}

static int worker(void *arg) {
  ref_job *J = (ref_job *)arg;
  const long long units = (long long)(J->p->batch * J->p->heads_kv);
  for (;;) {
    long long u = atomic_fetch_add(&J->next, 1);
    if (u >= units || atomic_load(&J->failed)) break;
    int64_t b = u / J->p->heads_kv, g = u % J->p->heads_kv;
    int rc = J->prec == REF_F64 ? unit_f64(J, b, g) : unit_storage(J, b, g);
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

/* ----------------------------------------------------------------------------------------------
 * The pass rule
 * -------------------------------------------------------------------------------------------- */

/*
 * The floor has two parts.
 *
 * A constant per storage dtype, for where the naive computation happens to be (almost) exact,
 * e.g. a single visible key where out = v: the library may still land one rounding step away, as
 * it stores its fp32 result after a different order of operations. Inputs are standard normal, so
 * outputs and gradients are of magnitude about 1, and one step there is: f16 (10-bit fraction)
 * 2^-10 ~ 9.8e-4 -> 1e-3; bf16 (7-bit fraction) 2^-7 ~ 7.8e-3 -> 1e-2; f32 1e-5, which also
 * absorbs short fp32 sums (a few hundred terms of magnitude 1, sqrt(n) * 2^-24 ~ 1e-6).
 *
 * A term for fp32 arithmetic: REF_MAG_FACTOR * 2^-24 * max(magnitude), the magnitude being
 * unit_f64's estimate of an element's fp32 error in units of u. It matters for f32 storage, whose
 * naive error is no reliable yardstick: the library sums in another order (tiles, threads, GQA
 * heads), which over thousands of terms lands a few times away from the naive order's error, and
 * where a result vanishes by cancellation the naive path can be exact by construction (one key:
 * its D equals dP bit for bit, so dS = 0) while FlashAttention's D = rowsum(dO∘O) rounds
 * differently, leaving fp32 noise in dq and dk. The estimate treats roundings as independent,
 * uniform in [-u, u]: its standard deviation is about magnitude * u / sqrt(3), and 4 * u *
 * magnitude (about 7 of those) leaves room for the largest of a million elements and for the
 * estimate's crudeness. For f16/bf16 storage the term is negligible next to the dtype's rounding.
 */
#define REF_MAG_FACTOR 4.0
#define REF_U32 5.9604644775390625e-08 /* 2^-24, fp32 unit roundoff */

double ref_floor(fa_dtype dtype) {
  switch (dtype) {
    case FA_F16:
      return 1e-3;
    case FA_BF16:
      return 1e-2;
    default:
      return 1e-5;
  }
}

void ref_check_values(const double *vals, int64_t n, const double *ref64, const double *naive,
                      const double *mag, const unsigned char *masked, fa_dtype dtype,
                      ref_check *out) {
  memset(out, 0, sizeof *out);
  out->worst = -1;
  int64_t worst_ok = -1;
  double mag_max = 0.0;
  for (int64_t f = 0; f < n; ++f) {
    const double got = vals[f], want = ref64[f];
    const char *bad = NULL;
    if (isnan(got))
      bad = "NaN (unwritten or computed)";
    else if (masked && masked[f]) {
      /* Decided by the mask alone (0, or -inf for lse): anything else is a masking bug, however
         small. -0.0 == 0.0, which is fine. */
      if (got != want) bad = "masked element not exactly its value";
    } else if (isinf(want)) {
      if (got != want) bad = "expected an infinity";
    } else if (!isfinite(got)) {
      bad = "infinite where the reference is finite";
    } else {
      double err = fabs(got - want);
      if (err > out->max_err || worst_ok < 0) {
        if (err > out->max_err) out->max_err = err;
        worst_ok = f;
        out->worst_got = got;
        out->worst_want = want;
      }
      if (naive && isfinite(naive[f])) {
        double ne = fabs(naive[f] - want);
        if (ne > out->naive_err) out->naive_err = ne;
      }
      if (mag && mag[f] > mag_max) mag_max = mag[f];
    }
    if (bad) {
      if (out->broken == 0) {
        out->worst = f;
        snprintf(out->why, sizeof out->why, "%s", bad);
      }
      ++out->broken;
    }
  }
  out->floor = ref_floor(dtype) + REF_MAG_FACTOR * REF_U32 * mag_max;
  out->tol = 2.0 * out->naive_err + out->floor;
  if (out->broken) {
    out->worst_got = vals[out->worst];
    out->worst_want = ref64[out->worst];
    out->pass = 0;
    return;
  }
  out->worst = worst_ok;
  out->pass = out->max_err <= out->tol;
  if (!out->pass) snprintf(out->why, sizeof out->why, "max error above tolerance");
}

static void check_impl(const tu_tensor *x, const double *ref64, const double *naive,
                       const double *mag, const unsigned char *masked, fa_dtype dtype,
                       ref_check *out) {
  int64_t n = tu_numel(x);
  double *vals = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!vals) {
    memset(out, 0, sizeof *out);
    out->worst = -1;
    out->broken = 1;
    snprintf(out->why, sizeof out->why, "out of memory in the check");
    return;
  }
  tu_read_all(x, vals);
  ref_check_values(vals, n, ref64, naive, mag, masked, dtype, out);
  free(vals);
}

void ref_check_tensor(const tu_tensor *x, const double *ref64, const double *naive,
                      const unsigned char *masked, fa_dtype dtype, ref_check *out) {
  check_impl(x, ref64, naive, NULL, masked, dtype, out);
}

void ref_check_output(const tu_tensor *x, const ref_result *r64, const ref_result *naive,
                      ref_which which, const unsigned char *masked, fa_dtype dtype,
                      ref_check *out) {
  check_impl(x, r64->t[which], naive ? naive->t[which] : NULL, r64->mag[which], masked, dtype, out);
}
