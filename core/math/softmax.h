/*
 * softmax.h: the online-softmax algebra every backend uses (FA_HOST_DEVICE: host, CUDA, HIP,
 * OpenCL).
 *
 * A row's partial result over some keys is the triple (m, l, o): m the largest scaled score seen,
 * l = sum(exp(s - m)), o = sum(exp(s - m) * v) (unnormalised). Rows that have seen no key keep
 * m = -inf, l = 0, o = 0; every function here keeps them finite (never exp(-inf - -inf) = NaN), so
 * a fully masked row ends with output 0 and LSE -inf.
 */
#ifndef FA_CORE_SOFTMAX_H
#define FA_CORE_SOFTMAX_H

/* OpenCL C has no standard headers: its prelude defines the fixed-width types. */
#ifndef FA_OPENCL_C
#include <math.h>
#endif

#include "host_device.h"

/* The max to subtract before exponentiating: -inf (nothing seen) becomes 0 so exp(-inf - 0) = 0. */
FA_HOST_DEVICE float fa_softmax_safe_max(float m) { return m == -INFINITY ? 0.0f : m; }

/*
 * One online step: the row's running max m_run meets a tile whose largest score is tile_max.
 * Updates m_run and l_run (l is rescaled) and returns alpha, the factor the caller multiplies its
 * running o by. The caller then adds exp(s - fa_softmax_safe_max(*m_run)) for the tile's scores.
 */
FA_HOST_DEVICE float fa_softmax_online_step(float *m_run, float *l_run, float tile_max) {
  float m_old = *m_run;
  float m_new = m_old > tile_max ? m_old : tile_max;
  float alpha = (m_old == -INFINITY) ? 0.0f : expf(m_old - m_new);
  *m_run = m_new;
  *l_run *= alpha;
  return alpha;
}

/*
 * Merges two partial results of the same row over disjoint key sets: (m, l) = merge((m1, l1),
 * (m2, l2)); the caller forms o = a1 * o1 + a2 * o2 with the factors returned. Associative and
 * commutative up to rounding, which split-KV and the tests rely on.
 */
FA_HOST_DEVICE void fa_softmax_merge(float m1, float l1, float m2, float l2, float *m, float *l,
                                     float *a1, float *a2) {
  float mm = m1 > m2 ? m1 : m2;
  float s1 = (m1 == -INFINITY) ? 0.0f : expf(m1 - mm);
  float s2 = (m2 == -INFINITY) ? 0.0f : expf(m2 - mm);
  *m = mm;
  *l = l1 * s1 + l2 * s2;
  *a1 = s1;
  *a2 = s2;
}

/* Log-sum-exp of a finished row (natural log). A row that saw no key has l = 0: LSE -inf. A NaN
   score (NaN in q or k) makes l NaN: the LSE is NaN too, so a NaN input propagates instead of
   passing for an empty row. */
FA_HOST_DEVICE float fa_softmax_lse(float m, float l) {
  return l > 0.0f ? m + logf(l) : (l == 0.0f ? -INFINITY : l);
}

/* The factor that normalises o: 1/l, or 0 for a row that saw no key (output 0, never NaN). */
FA_HOST_DEVICE float fa_softmax_out_scale(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

/*
 * Merges normalised partial outputs by their LSEs (split-KV's final step):
 * lse = log(exp(lse1) + exp(lse2)); out = w1 * out1 + w2 * out2 with the weights returned.
 */
FA_HOST_DEVICE float fa_softmax_merge_lse(float lse1, float lse2, float *w1, float *w2) {
  float mm = lse1 > lse2 ? lse1 : lse2;
  if (mm == -INFINITY) {
    *w1 = 0.0f;
    *w2 = 0.0f;
    return -INFINITY;
  }
  float e1 = expf(lse1 - mm), e2 = expf(lse2 - mm);
  float sum = e1 + e2;
  *w1 = e1 / sum;
  *w2 = e2 / sum;
  return mm + logf(sum);
}

/* P recomputed in the backward pass from the score and the saved LSE (0 for masked rows). */
FA_HOST_DEVICE float fa_softmax_prob_from_lse(float scaled_score, float lse) {
  return lse == -INFINITY ? 0.0f : expf(scaled_score - lse);
}

#endif /* FA_CORE_SOFTMAX_H */
