/*
 * unit_f64.c: the float64 reference of one (batch, kv head) unit, with the magnitudes behind the
 * pass rule's fp32 term. The loops are ordered so that every inner loop is an independent
 * multiply-add over a contiguous row (no reductions in the innermost loop), which lets the
 * compiler vectorise without reassociating sums.
 */
#include <math.h>
#include <string.h>

#include "reference_impl.h"

static void load_f64(const tu_tensor *x, int64_t b, int64_t h, int64_t rows, int64_t cols,
                     double *dst) {
  tu_read_rows_f64(x, b, h, rows, cols, dst);
}

static void transpose_f64(const double *a, int64_t rows, int64_t cols, double *t) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
}

/* The unit's arrays: k, v (and transposed), q and dO of one head, a row's scores, probabilities
   and dP, dK and dV; for the magnitudes |k|ᵀ, |v|ᵀ, per-row |S|, P sigma, |dO|.|v|, the squared
   sums and a row's dq coefficients of D; dropout's scale per key (keep / (1 - p), or 1) and the
   softcap's derivative per key. */
/* clang-format off */
#define ARRAYS(X)                                                                     \
  X(K, sk * d) X(KT, sk * d) X(V, sk * dv) X(VT, sk * dv) X(Q, sq * d) X(dO, sq * dv) \
  X(s, sk) X(P, sk) X(dp, sk) X(dK, sk * d) X(dV, sk * dv)                            \
  X(KaT, sk * d) X(VaT, sk * dv) X(sa, sk) X(Ps, sk) X(dpa, sk)                       \
  X(dKv, sk * d) X(dVv, sk * dv) X(Z, sk) X(G, sk) X(dqD, d)
/* clang-format on */

/* The storage dtype's unit roundoff in units of fp32's (the magnitudes' unit): 0 for f32, whose
   rounding of O the fp32 terms already count. */
static double storage_u_in_u32(fa_dtype dt) {
  switch (dt) {
    case FA_F16:
      return 8192.0; /* 2^-11 / 2^-24 */
    case FA_BF16:
      return 65536.0; /* 2^-8 / 2^-24 */
    default:
      return 0.0;
  }
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
 *     result is small: u P (|dO|.|v_j| + sum_k P_k |dO|.|v_k|);
 *   - D = rowsum(dO∘O) is formed from O as stored (f16/bf16: each O_c rounded by up to u_s |O_c|,
 *     u_s the storage dtype's unit roundoff), one error a row that every dS of the row carries,
 *     of standard deviation e_i = u_s sqrt(sum_c (dO_ic O_ic)^2 / 3) (uniform roundings): dq_i by
 *     e_i |sum_j scale P_ij k_j| (the same error for every key), dk_j by the quadrature over rows
 *     of e_i scale P_ij |q_i|. It enters as a standard deviation, not in units of u, so the
 *     rule's factor 4 makes it 4 of them: one row's single error, where the fp32 terms' 7 cover
 *     the largest of many. Where one key takes most of a row's probability it is most of dq's and
 *     dk's error, and the naive computation's D, rounded from its own O, errs independently of
 *     the library's: twice the naive error is then no bound (measured up to 1.3x its tolerance).
 * These are estimates, not bounds: what matters is that they grow as the errors of legitimate fp32
 * kernels do (long sums, cancellation); ref_floor turns them into a tolerance.
 */
int ref_unit_f64(ref_job *J, int64_t b, int64_t g) {
  const ref_problem *p = J->p;
  const ref_ext *x = J->x;
  const int64_t sq = p->seqlen_q, sk = p->seqlen_k, d = p->head_dim, dv = p->head_dim_v;
  const int64_t group = p->heads_q / p->heads_kv;
  const int bwd = J->dout != NULL;
  const double scale = p->scale;
  ref_result *r = J->r;
  int rc = -1;
  ARRAYS(REF_DECL_F64)
  double *block = calloc(0 ARRAYS(REF_COUNT), sizeof(double)), *carve_at_ = block;
  ref_mask mask;
  memset(&mask, 0, sizeof mask);
  if (!block || ref_mask_build(p, x, b, &mask)) goto out;
  ARRAYS(REF_CARVE)
  const int64_t shift = ref_seq_shift(p, x, b);
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
    const double slope = ref_alibi_slope(p, x, b, h);
    for (int64_t i = 0; i < sq; ++i) {
      const unsigned char *allow = mask.allow + i * sk;
      const int64_t lo = mask.lo[i], hi = mask.hi[i];
      const int64_t o_at = ref_at_row(b, i, p->heads_q, h, sq, dv);
      const int64_t q_at = ref_at_row(b, i, p->heads_q, h, sq, d);
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
      double D = 0.0, Da = 0.0, De = 0.0; /* De: D's error from the stored O, in u32 units */
      for (int64_t j = lo; j < hi; ++j) {
        D += P[j] * Z[j] * dp[j];
        Da += P[j] * Z[j] * dpa[j];
      }
      for (int64_t c = 0; c < dv; ++c) De += (doi[c] * o[c]) * (doi[c] * o[c]);
      De = storage_u_in_u32(J->dtype) * sqrt(De / 3.0);
      for (int64_t c = 0; c < d; ++c) dqD[c] = 0.0;
      for (int64_t j = lo; j < hi; ++j) {
        /* masked keys: P = 0, so ds = 0 */
        const double ds = scale * G[j] * P[j] * (dp[j] * Z[j] - D);
        const double eds =
            scale * G[j] * (Ps[j] * fabs(dp[j] * Z[j] - D) + P[j] * (dpa[j] * Z[j] + Da));
        const double pj = P[j] * Z[j], ps = Ps[j] * Z[j], *kj = K + j * d;
        double *dkj = dK + j * d, *dvj = dV + j * dv, *dkvj = dKv + j * d, *dvvj = dVv + j * dv;
        const double dsD = scale * G[j] * P[j] * De; /* dS's error from D's */
        for (int64_t c = 0; c < d; ++c) {
          const double t = ds * kj[c], e = eds * kj[c];
          dq[c] += t;
          dqv[c] += dq[c] * dq[c] + t * t + e * e;
          dqD[c] += dsD * kj[c];
        }
        for (int64_t c = 0; c < d; ++c) {
          const double t = ds * qi[c], e = eds * qi[c], eD = dsD * qi[c];
          dkj[c] += t;
          dkvj[c] += dkj[c] * dkj[c] + t * t + e * e + eD * eD;
        }
        for (int64_t c = 0; c < dv; ++c) {
          const double t = pj * doi[c], e = ps * doi[c];
          dvj[c] += t;
          dvvj[c] += dvj[c] * dvj[c] + t * t + e * e;
        }
      }
      for (int64_t c = 0; c < d; ++c) dqv[c] = sqrt(dqv[c] + dqD[c] * dqD[c]);
    }
  }
  if (bwd) {
    for (int64_t j = 0; j < sk; ++j) {
      const int64_t k_at = ref_at_row(b, j, p->heads_kv, g, sk, d);
      const int64_t v_at = ref_at_row(b, j, p->heads_kv, g, sk, dv);
      memcpy(r->t[REF_DK] + k_at, dK + j * d, sizeof(double) * (size_t)d);
      memcpy(r->t[REF_DV] + v_at, dV + j * dv, sizeof(double) * (size_t)dv);
      for (int64_t c = 0; c < d; ++c) r->mag[REF_DK][k_at + c] = sqrt(dKv[j * d + c]);
      for (int64_t c = 0; c < dv; ++c) r->mag[REF_DV][v_at + c] = sqrt(dVv[j * dv + c]);
    }
  }
  rc = 0;
out:
  free(block);
  ref_mask_free(&mask);
  return rc;
}
#undef ARRAYS
