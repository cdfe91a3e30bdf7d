/*
 * unit_storage.c: the reference of one (batch, kv head) unit computed in the storage dtype, whose
 * distance from float64 measures the error the dtype itself forces (and so sets the tolerance).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/dtype.h"
#include "core/math/fp8.h"
#include "fp8_acc.h"
#include "reference_impl.h"

static void load_f32(const tu_tensor *x, int64_t b, int64_t h, int64_t rows, int64_t cols,
                     float *dst) {
  tu_read_rows_f32(x, b, h, rows, cols, dst);
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

/* The unit's arrays: k, v (and transposed), q and dO of one head, a row's scores, probabilities
   and dP, one output row and dq row in fp32, dK and dV of one query head and summed over the
   group, dropout's scale per key, the dropped attention stored, the capped scores. */
/* clang-format off */
#define ARRAYS(X)                                                                     \
  X(K, sk * d) X(KT, sk * d) X(V, sk * dv) X(VT, sk * dv) X(Q, sq * d) X(dO, sq * dv) \
  X(s, sk) X(P, sk) X(dp, sk) X(o, dv) X(dqa, d)                                      \
  X(dKh, sk * d) X(dVh, sk * dv) X(dKg, sk * d) X(dVg, sk * dv)                       \
  X(Z, sk) X(Pd, sk) X(C, sk)
/* clang-format on */

/*
 * The storage-dtype computation, modelled on FlashAttention's reference with upcast=False (PyTorch
 * ops on fp16/bf16 tensors): each matrix product accumulates in fp32 and its result is stored in
 * the dtype; softmax and its backward run in fp32 on stored inputs and store their result; GQA's
 * repeated k/v sum their per-head gradients in fp32 and store once.
 */
int ref_unit_storage(ref_job *J, int64_t b, int64_t g) {
  const ref_problem *p = J->p;
  const ref_ext *x = J->x;
  const fa_dtype dt = J->dtype;
  const int64_t sq = p->seqlen_q, sk = p->seqlen_k, d = p->head_dim, dv = p->head_dim_v;
  const int64_t group = p->heads_q / p->heads_kv;
  const int bwd = J->dout != NULL;
  const float scale = (float)p->scale;
  ref_result *r = J->r;
  int rc = -1;
  ARRAYS(REF_DECL_F32)
  float *block = calloc(0 ARRAYS(REF_COUNT), sizeof(float)), *carve_at_ = block;
  ref_mask mask;
  memset(&mask, 0, sizeof mask);
  if (!block || ref_mask_build(p, x, b, &mask)) goto out;
  ARRAYS(REF_CARVE)
  const int64_t shift = ref_seq_shift(p, x, b);
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
    const float slope = (float)ref_alibi_slope(p, x, b, h);
    for (int64_t i = 0; i < sq; ++i) {
      const unsigned char *allow = mask.allow + i * sk;
      const int64_t lo = mask.lo[i], hi = mask.hi[i];
      double *out = r->t[REF_OUT] + ref_at_row(b, i, p->heads_q, h, sq, dv);
      double *lse = r->t[REF_LSE] + (b * p->heads_q + h) * sq + i;
      double *dq = bwd ? r->t[REF_DQ] + ref_at_row(b, i, p->heads_q, h, sq, d) : NULL;
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
        if (x->acc_bits && (e % FP8_ACC_TERMS == FP8_ACC_TERMS - 1 || e == d - 1))
          for (int64_t j = lo; j < hi; ++j) s[j] = fp8_acc_keep(s[j], x->acc_bits);
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
        P[j] = x->p_fp8 ? fa_f8e4m3_to_f32(fa_f32_to_f8e4m3(P[j])) / l : rnd(dt, P[j] / l);
        Pd[j] = rnd(dt, P[j] * Z[j]); /* the dropped attention, stored */
      }
      /* The reference itself has no lse; this is lse as fp32 softmax would form it from the
         stored scores, which carries the dtype's error in S. */
      *lse = (double)(m + logf(l));
      for (int64_t c = 0; c < dv; ++c) o[c] = 0.0f;
      for (int64_t j = lo; j < hi; ++j) {
        const float pj = Pd[j], *vj = V + j * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] += pj * vj[c];
        if (x->acc_bits && (j % FP8_ACC_TERMS == FP8_ACC_TERMS - 1 || j == hi - 1))
          for (int64_t c = 0; c < dv; ++c) o[c] = fp8_acc_keep(o[c], x->acc_bits);
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
      /* Softmax's backward needs D = sum(P∘dP∘Z); it is formed the FlashAttention way, as
         rowsum(dO∘O) from the stored O, the form every backend's backward uses. The other form
         misses the rounding of the stored O, which the backward carries into every dS of the row:
         with one dominant key (P near 1, as low temperatures give) that rounding is most of dq's
         and dk's error, and where dS vanishes by cancellation (one key) the sum(P∘dP) form would
         be exact by construction. */
      float D = 0.0f;
      for (int64_t c = 0; c < dv; ++c) D += dO[i * dv + c] * (float)out[c];
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
      double *dk = r->t[REF_DK] + ref_at_row(b, j, p->heads_kv, g, sk, d);
      double *dvo = r->t[REF_DV] + ref_at_row(b, j, p->heads_kv, g, sk, dv);
      for (int64_t c = 0; c < d; ++c) dk[c] = rnd(dt, dKg[j * d + c]);
      for (int64_t c = 0; c < dv; ++c) dvo[c] = rnd(dt, dVg[j * dv + c]);
    }
  }
  rc = 0;
out:
  free(block);
  ref_mask_free(&mask);
  return rc;
}
#undef ARRAYS
