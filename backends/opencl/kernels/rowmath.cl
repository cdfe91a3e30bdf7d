/*
 * rowmath.cl: the arithmetic the kernels' inner loops are made of.
 *
 * Every score q·k is one fma chain over the head dim in order d = 0, 1, ..., FA_D - 1, in every
 * kernel of both kernel sets, so the backward pass recomputes exactly the forward's scores (and
 * P from the LSE matches the forward's P to the last bit of the exp).
 *
 * GPU kernels (FA_CPU == 0): a work-item's private row against a local-memory row.
 * CPU kernels (FA_CPU == 1): a work-item holds FA_LN = 16 rows, one per lane of a float16
 * (lanes_t); a row-vector of the head dim is FA_D lanes_t, element d holding dimension d of the 16
 * rows. Every product is then a lane-wise fma with one broadcast operand from local memory: vector
 * code without reductions, whatever the compiler's vectoriser does (PoCL maps float16 onto AVX-512
 * registers, or pairs of AVX2 ones). The per-lane rules (softmax step, softcap, dS) are core/'s
 * scalar functions applied lane by lane; only the exponentials, the one hot transcendental, are
 * written as vector expressions of the same rules.
 */
#if !FA_CPU
inline float row_dot(const float *a, __local const float *b) {
  float s = 0.0f;
  for (int d = 0; d < FA_D; ++d) s = fma(a[d], b[d], s);
  return s;
}

inline void row_axpy(float *y, float a, __local const float *x) {
  for (int d = 0; d < FA_D; ++d) y[d] = fma(a, x[d], y[d]);
}

#else /* FA_CPU */

#define FA_LN 16
#define FA_RV (FA_BR / (FA_LN * FA_WG)) /* row vectors per work-item */
typedef float16 lanes_t;
typedef int16 lanes_i;

/* s[j] = Σ_d a[d] · t[j][d] for j < n (rounded up to 8; rows of t past n are zeros): a's 16 rows
   against n local-memory rows, eight at a time: each a[d] is loaded once for eight fmas, and the
   eight independent chains keep both FMA pipes busy (an fma's latency is 4 cycles). */
inline void lanes_scores(const lanes_t *a, __local const float (*t)[FA_D], int n, lanes_t *s) {
#pragma unroll 1
  for (int j = 0; j < n; j += 8) {
    __local const float *t0 = t[j], *t1 = t[j + 1], *t2 = t[j + 2], *t3 = t[j + 3];
    __local const float *t4 = t[j + 4], *t5 = t[j + 5], *t6 = t[j + 6], *t7 = t[j + 7];
    lanes_t s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f, s7 = 0.0f;
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      const lanes_t x = a[d];
      s0 = fma(x, (lanes_t)t0[d], s0);
      s1 = fma(x, (lanes_t)t1[d], s1);
      s2 = fma(x, (lanes_t)t2[d], s2);
      s3 = fma(x, (lanes_t)t3[d], s3);
      s4 = fma(x, (lanes_t)t4[d], s4);
      s5 = fma(x, (lanes_t)t5[d], s5);
      s6 = fma(x, (lanes_t)t6[d], s6);
      s7 = fma(x, (lanes_t)t7[d], s7);
    }
    s[j] = s0;
    s[j + 1] = s1;
    s[j + 2] = s2;
    s[j + 3] = s3;
    s[j + 4] = s4;
    s[j + 5] = s5;
    s[j + 6] = s6;
    s[j + 7] = s7;
  }
}

/* Two score sets at once over the same rows of t and u (the backward's S = Q·Kᵀ and dP = dO·Vᵀ):
   s[j] = Σ_d a[d]·t[j][d], g[j] = Σ_d c[d]·u[j][d], four rows at a time (eight chains); the same
   fma chain per score as lanes_scores. */
inline void lanes_scores2(const lanes_t *a, __local const float (*t)[FA_D], const lanes_t *c,
                          __local const float (*u)[FA_D], int n, lanes_t *s, lanes_t *g) {
#pragma unroll 1
  for (int j = 0; j < n; j += 4) {
    __local const float *t0 = t[j], *t1 = t[j + 1], *t2 = t[j + 2], *t3 = t[j + 3];
    __local const float *u0 = u[j], *u1 = u[j + 1], *u2 = u[j + 2], *u3 = u[j + 3];
    lanes_t s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, g0 = 0.0f, g1 = 0.0f, g2 = 0.0f, g3 = 0.0f;
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      const lanes_t x = a[d], y = c[d];
      s0 = fma(x, (lanes_t)t0[d], s0);
      s1 = fma(x, (lanes_t)t1[d], s1);
      s2 = fma(x, (lanes_t)t2[d], s2);
      s3 = fma(x, (lanes_t)t3[d], s3);
      g0 = fma(y, (lanes_t)u0[d], g0);
      g1 = fma(y, (lanes_t)u1[d], g1);
      g2 = fma(y, (lanes_t)u2[d], g2);
      g3 = fma(y, (lanes_t)u3[d], g3);
    }
    s[j] = s0;
    s[j + 1] = s1;
    s[j + 2] = s2;
    s[j + 3] = s3;
    g[j] = g0;
    g[j + 1] = g1;
    g[j + 2] = g2;
    g[j + 3] = g3;
  }
}

/* acc[d] = acc[d]·alpha + Σ_{j<n} p[j]·t[j][d]: eight columns at a time, each p[j] loaded once
   for eight fmas; the sum over j in order. */
inline void lanes_accumulate(lanes_t *acc, lanes_t alpha, const lanes_t *p,
                             __local const float (*t)[FA_D], int n) {
  int d = 0;
  for (; d + 8 <= FA_D; d += 8) {
    lanes_t o0 = acc[d] * alpha, o1 = acc[d + 1] * alpha, o2 = acc[d + 2] * alpha,
            o3 = acc[d + 3] * alpha, o4 = acc[d + 4] * alpha, o5 = acc[d + 5] * alpha,
            o6 = acc[d + 6] * alpha, o7 = acc[d + 7] * alpha;
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      const lanes_t x = p[j];
      __local const float *r = &t[j][d];
      o0 = fma(x, (lanes_t)r[0], o0);
      o1 = fma(x, (lanes_t)r[1], o1);
      o2 = fma(x, (lanes_t)r[2], o2);
      o3 = fma(x, (lanes_t)r[3], o3);
      o4 = fma(x, (lanes_t)r[4], o4);
      o5 = fma(x, (lanes_t)r[5], o5);
      o6 = fma(x, (lanes_t)r[6], o6);
      o7 = fma(x, (lanes_t)r[7], o7);
    }
    acc[d] = o0;
    acc[d + 1] = o1;
    acc[d + 2] = o2;
    acc[d + 3] = o3;
    acc[d + 4] = o4;
    acc[d + 5] = o5;
    acc[d + 6] = o6;
    acc[d + 7] = o7;
  }
  for (; d < FA_D; ++d) {
    lanes_t o = acc[d] * alpha;
#pragma unroll 1
    for (int j = 0; j < n; ++j) o = fma(p[j], (lanes_t)t[j][d], o);
    acc[d] = o;
  }
}

/* The same with two sources at once (the dK/dV kernel: dV += Pᵀ·dO and dK += dSᵀ·Q). */
inline void lanes_accumulate2(lanes_t *acc, const lanes_t *p, __local const float (*t)[FA_D],
                              lanes_t *acc2, const lanes_t *p2, __local const float (*t2)[FA_D],
                              int n) {
  int d = 0;
  for (; d + 4 <= FA_D; d += 4) {
    lanes_t o0 = acc[d], o1 = acc[d + 1], o2 = acc[d + 2], o3 = acc[d + 3];
    lanes_t e0 = acc2[d], e1 = acc2[d + 1], e2 = acc2[d + 2], e3 = acc2[d + 3];
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      const lanes_t x = p[j], y = p2[j];
      __local const float *r = &t[j][d], *q = &t2[j][d];
      o0 = fma(x, (lanes_t)r[0], o0);
      o1 = fma(x, (lanes_t)r[1], o1);
      o2 = fma(x, (lanes_t)r[2], o2);
      o3 = fma(x, (lanes_t)r[3], o3);
      e0 = fma(y, (lanes_t)q[0], e0);
      e1 = fma(y, (lanes_t)q[1], e1);
      e2 = fma(y, (lanes_t)q[2], e2);
      e3 = fma(y, (lanes_t)q[3], e3);
    }
    acc[d] = o0;
    acc[d + 1] = o1;
    acc[d + 2] = o2;
    acc[d + 3] = o3;
    acc2[d] = e0;
    acc2[d + 1] = e1;
    acc2[d + 2] = e2;
    acc2[d + 3] = e3;
  }
  for (; d < FA_D; ++d) {
    lanes_t o = acc[d], e = acc2[d];
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      o = fma(p[j], (lanes_t)t[j][d], o);
      e = fma(p2[j], (lanes_t)t2[j][d], e);
    }
    acc[d] = o;
    acc2[d] = e;
  }
}

/* core/math/score.h's softcap, lane by lane (only called when softcap > 0). */
inline lanes_t lanes_softcap(lanes_t z, float softcap) {
  float a[FA_LN];
  vstore16(z, 0, a);
#pragma unroll 1
  for (int l = 0; l < FA_LN; ++l) a[l] = fa_score_softcap(a[l], softcap);
  return vload16(0, a);
}

/* core/math/score.h's softcap derivative from the capped score, lane by lane. */
inline lanes_t lanes_softcap_grad(lanes_t z, float softcap) {
  float a[FA_LN];
  vstore16(z, 0, a);
#pragma unroll 1
  for (int l = 0; l < FA_LN; ++l) a[l] = fa_score_softcap_grad(a[l], softcap);
  return vload16(0, a);
}

/* core/math/backward.h's dS = P ∘ (dP − D), lane by lane. */
inline lanes_t lanes_bwd_ds(lanes_t p, lanes_t dp, lanes_t dd) {
  float a[FA_LN], b[FA_LN], c[FA_LN];
  vstore16(p, 0, a);
  vstore16(dp, 0, b);
  vstore16(dd, 0, c);
  for (int l = 0; l < FA_LN; ++l) a[l] = fa_bwd_ds(a[l], b[l], c[l]);
  return vload16(0, a);
}

/* core/math/softmax.h's fa_softmax_prob_from_lse for 16 lanes, each with its own LSE: exp(z − lse),
   0 where the LSE is −inf (a row that saw no key). */
inline lanes_t lanes_prob_from_lse(lanes_t z, lanes_t lse) {
  return select(exp(z - lse), (lanes_t)0.0f, lse == (lanes_t)(-INFINITY));
}

/* The key range [lo, hi) of each lane's row (core/math/mask.h), empty for rows past the last; and
   the ranges of the first and last valid rows, for tile classification. */
inline void lanes_key_ranges(const fa_mask *mask, long r0, int seqlen_q, int seqlen_k, lanes_i *lo,
                             lanes_i *hi, long *lo_first, long *hi_first, long *lo_last,
                             long *hi_last) {
  int a[FA_LN], c[FA_LN];
  *lo_first = *hi_first = *lo_last = *hi_last = 0;
#pragma unroll 1
  for (int l = 0; l < FA_LN; ++l) {
    long x = 0, y = 0;
    if (r0 + l < seqlen_q) fa_mask_key_range(mask, r0 + l, seqlen_k, &x, &y);
    a[l] = (int)x;
    c[l] = (int)y;
    if (l == 0) {
      *lo_first = x;
      *hi_first = y;
    }
    if (r0 + l < seqlen_q) {
      *lo_last = x;
      *hi_last = y;
    }
  }
  *lo = vload16(0, a);
  *hi = vload16(0, c);
}

#endif /* FA_CPU */
