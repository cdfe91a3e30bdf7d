/*
 * cpu_rowops.c: the per-element steps between the tile products (see cpu_kernels.h), compiled
 * once per instruction set like cpu_gemm.c. The softmax and backward algebra itself is core's
 * (softmax.h, backward.h); this file only applies it to whole rows.
 */
#include <math.h>

#include "core/math/backward.h"
#include "core/math/dtype.h"
#include "core/math/softmax.h"
#include "cpu_exp.h"
#include "cpu_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#elif defined(CPU_ISA_neon)
#include <arm_neon.h>
#endif

/* Lanes of the row reductions: wide enough for the vectoriser, and a fixed number so the
   summation order (and thus every rounding) depends on the tile width only. */
#define LANES 16

#if defined(__AVX512F__)
/* x[j] *= scale, then the row's maximum of the new values, in one pass over the row (a separate
   scaling pass re-read and re-wrote the whole tile). The same lanes and the same final order as
   the plain row_max below, in one vector: gcc left that one scalar (16 maxss a step, a quarter of
   the softmax's samples). _mm512_max_ps(x, lane) returns lane where x is NaN or equal, as
   `x > lane ? x : lane` does. */
static float row_scale_max(float *restrict x, int n, float scale) {
  const __m512 sv = _mm512_set1_ps(scale);
  __m512 lanes = _mm512_set1_ps(-INFINITY);
  int j = 0;
  for (; j + LANES <= n; j += LANES) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), sv);
    _mm512_storeu_ps(x + j, v);
    lanes = _mm512_max_ps(v, lanes);
  }
  float lane[LANES];
  _mm512_storeu_ps(lane, lanes);
  for (; j < n; ++j) {
    x[j] *= scale;
    lane[0] = x[j] > lane[0] ? x[j] : lane[0];
  }
  float mx = -INFINITY;
  for (int u = 0; u < LANES; ++u) mx = lane[u] > mx ? lane[u] : mx;
  return mx;
}
#else
static float row_max(const float *restrict x, int n) {
  float lane[LANES];
  for (int u = 0; u < LANES; ++u) lane[u] = -INFINITY;
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int u = 0; u < LANES; ++u) lane[u] = x[j + u] > lane[u] ? x[j + u] : lane[u];
  for (; j < n; ++j) lane[0] = x[j] > lane[0] ? x[j] : lane[0];
  float mx = -INFINITY;
  for (int u = 0; u < LANES; ++u) mx = lane[u] > mx ? lane[u] : mx;
  return mx;
}

static float row_scale_max(float *restrict x, int n, float scale) {
  for (int j = 0; j < n; ++j) x[j] *= scale;
  return row_max(x, n);
}
#endif

#if defined(__AVX512F__)
/* cpu_expf's method with 2^n applied by vscalefps, which also gives +inf above the range and 0
   far below it: no integer exponent arithmetic and no selects (the plain form spent about 10 of
   its 24 instructions per vector there). Inputs are clamped to [-104, 88.7] (exp(-104) rounds to
   0, so results between FLT_MIN and that are denormals instead of cpu_expf's flushed 0); the
   clamp's max/min return x where x is NaN, so NaN stays NaN, and -inf gives 0. */
static inline __m512 exp_avx512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* x[j] = exp(x[j] - shift), returning the sum of the new values: 16 lanes summed in the plain
   form's final order; the tail (n % 16 values) goes one value per lane. */
static float row_exp_sum(float *restrict x, int n, float shift) {
  const __m512 sh = _mm512_set1_ps(shift);
  __m512 lanes = _mm512_setzero_ps();
  int j = 0;
  for (; j + LANES <= n; j += LANES) {
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + j), sh));
    _mm512_storeu_ps(x + j, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1u);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), sh));
    _mm512_mask_storeu_ps(x + j, k, e);
    lanes = _mm512_mask_add_ps(lanes, k, lanes, e);
  }
  float lane[LANES];
  _mm512_storeu_ps(lane, lanes);
  float sum = 0.0f;
  for (int u = 0; u < LANES; ++u) sum += lane[u];
  return sum;
}
#else
/* x[j] = exp(x[j] - shift), returning the sum of the new values. */
static float row_exp_sum(float *restrict x, int n, float shift) {
  float lane[LANES];
  for (int u = 0; u < LANES; ++u) lane[u] = 0.0f;
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int u = 0; u < LANES; ++u) {
      float e = cpu_expf(x[j + u] - shift);
      x[j + u] = e;
      lane[u] += e;
    }
  for (; j < n; ++j) {
    float e = cpu_expf(x[j] - shift);
    x[j] = e;
    lane[0] += e;
  }
  float sum = 0.0f;
  for (int u = 0; u < LANES; ++u) sum += lane[u];
  return sum;
}
#endif

static void row_zero_outside(float *restrict x, int n, int lo, int hi) {
  for (int j = 0; j < lo; ++j) x[j] = 0.0f;
  for (int j = hi; j < n; ++j) x[j] = 0.0f;
}

/* The visible columns [*lo, *hi) of row i; every column when the tile is not masked. */
static inline void row_bounds(const int *jlo, const int *jhi, int i, int nc, int *lo, int *hi) {
  *lo = jlo ? jlo[i] : 0;
  *hi = jhi ? jhi[i] : nc;
  if (*hi < *lo) *hi = *lo;
}

void CPU_KFN(softmax_tile)(int mr, int nc, float *s, ptrdiff_t lds, float scale, const int *jlo,
                           const int *jhi, float *m, float *l, float *o, ptrdiff_t ldo, int dv) {
  for (int i = 0; i < mr; ++i) {
    float *restrict row = s + i * lds;
    int lo, hi;
    row_bounds(jlo, jhi, i, nc, &lo, &hi);
    /* A row that sees nothing here brings tile_max = -inf: alpha is then 1 (or 0 while the row
       has seen nothing at all), and its probabilities are all 0. */
    float tile_max = row_scale_max(row + lo, hi - lo, scale);
    /* A tile that does not raise the row's max: core's step would give alpha = expf(0) = 1 and
       leave (m, l) as they are; skipping its libm call gives the same result, cheaper for
       decoding's short tiles. */
    float alpha = tile_max <= m[i] && m[i] != -INFINITY
                      ? 1.0f
                      : fa_softmax_online_step(&m[i], &l[i], tile_max);
    l[i] += row_exp_sum(row + lo, hi - lo, fa_softmax_safe_max(m[i]));
    row_zero_outside(row, nc, lo, hi);
    if (alpha != 1.0f) {
      float *restrict orow = o + i * ldo;
      for (int c = 0; c < dv; ++c) orow[c] *= alpha;
    }
  }
}

void CPU_KFN(probs_tile)(int mr, int nc, float *s, ptrdiff_t lds, float scale, const float *lse,
                         const int *jlo, const int *jhi) {
  for (int i = 0; i < mr; ++i) {
    float *restrict row = s + i * lds;
    int lo, hi;
    row_bounds(jlo, jhi, i, nc, &lo, &hi);
    float row_lse = lse[i];
    /* fa_softmax_prob_from_lse's rule (0 where the row saw no key, else exp(s - LSE)) with this
       file's vectorisable exp instead of libm's scalar expf call, a large share of the
       backward's time otherwise. */
    if (row_lse == -INFINITY)
      lo = hi = 0;
    else
      for (int j = lo; j < hi; ++j) row[j] = cpu_expf(row[j] * scale - row_lse);
    row_zero_outside(row, nc, lo, hi);
  }
}

void CPU_KFN(ds_tile)(int mr, int nc, const float *p, float *dp, ptrdiff_t ld, const float *d) {
  for (int i = 0; i < mr; ++i) {
    const float *restrict prow = p + i * ld;
    float *restrict dprow = dp + i * ld;
    float di = d[i];
    for (int j = 0; j < nc; ++j) dprow[j] = fa_bwd_ds(prow[j], dprow[j], di);
  }
}

#if defined(__AVX512F__)
/* The 16 x 16 block in r (row i in r[i]) transposed in place (column c in r[c]): pairs of
   elements, then of pairs, then 128-bit lanes, then 256-bit halves. */
static inline void transpose_16x16(__m512 r[16]) {
  __m512 t[16], u[16], v[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      v[8 * i + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0x88);
      v[8 * i + 4 + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0xdd);
  }
}

void CPU_KFN(transpose)(int n, int cols, const float *src, ptrdiff_t lds, float *dst,
                        ptrdiff_t ldd) {
  const __mmask16 rows = (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u);
  for (int c0 = 0; c0 < cols; c0 += 16) {
    const int w = cols - c0 < 16 ? cols - c0 : 16;
    const __mmask16 colm = (__mmask16)(w >= 16 ? 0xffffu : (1u << w) - 1u);
    __m512 r[16];
    for (int i = 0; i < 16; ++i)
      r[i] = i < n ? _mm512_maskz_loadu_ps(colm, src + i * lds + c0) : _mm512_setzero_ps();
    transpose_16x16(r);
    for (int c = 0; c < w; ++c) _mm512_mask_storeu_ps(dst + (c0 + c) * ldd, rows, r[c]);
  }
}

/* The bf16 rows widened in the registers the transpose starts from (the 16 bits shifted up, as
   bf16_row does): no fp32 copy of the rows in between. */
void CPU_KFN(bf16_transpose)(int n, int cols, const uint16_t *const *src, float *dst,
                             ptrdiff_t ldd) {
  const __mmask16 rows = (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u);
  for (int c0 = 0; c0 < cols; c0 += 16) {
    const int w = cols - c0 < 16 ? cols - c0 : 16;
    const __mmask16 colm = (__mmask16)(w >= 16 ? 0xffffu : (1u << w) - 1u);
    __m512 r[16];
    for (int i = 0; i < 16; ++i)
      r[i] = i < n ? _mm512_castsi512_ps(_mm512_slli_epi32(
                         _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(colm, src[i] + c0)), 16))
                   : _mm512_setzero_ps();
    transpose_16x16(r);
    for (int c = 0; c < w; ++c) _mm512_mask_storeu_ps(dst + (c0 + c) * ldd, rows, r[c]);
  }
}
#else
void CPU_KFN(transpose)(int n, int cols, const float *src, ptrdiff_t lds, float *dst,
                        ptrdiff_t ldd) {
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < n; ++r) dst[c * ldd + r] = src[r * lds + c];
}

void CPU_KFN(bf16_transpose)(int n, int cols, const uint16_t *const *src, float *dst,
                             ptrdiff_t ldd) {
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < n; ++r) dst[c * ldd + r] = fa_bf16_to_f32(src[r][c]);
}
#endif

#if defined(__AVX512F__)
/* 16 values per vcvtph2ps (exact, like fa_f16_to_f32); the tail through core's conversion. A
   scalar, branchy conversion per element would make f16 inputs several times slower than bf16. */
void CPU_KFN(f16_row)(const uint16_t *src, int64_t n, float *dst) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    _mm512_storeu_ps(dst + c, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + c))));
  for (; c < n; ++c) dst[c] = fa_f16_to_f32(src[c]);
}
#elif defined(CPU_ISA_neon)
/* 4 values per fcvtl (exact, like fa_f16_to_f32); the tail through core's conversion. */
void CPU_KFN(f16_row)(const uint16_t *src, int64_t n, float *dst) {
  int64_t c = 0;
  for (; c + 4 <= n; c += 4)
    vst1q_f32(dst + c, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + c))));
  for (; c < n; ++c) dst[c] = fa_f16_to_f32(src[c]);
}
#else
void CPU_KFN(f16_row)(const uint16_t *src, int64_t n, float *dst) {
  for (int64_t c = 0; c < n; ++c) dst[c] = fa_f16_to_f32(src[c]);
}
#endif

#if defined(__AVX512F__)
/* 16 values per widening move and shift. The tile loads convert every K/V row of every tile
   through here, so it is compiled per instruction set rather than once for the baseline. */
void CPU_KFN(bf16_row)(const uint16_t *src, int64_t n, float *dst) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + c)));
    _mm512_storeu_si512((void *)(dst + c), _mm512_slli_epi32(w, 16));
  }
  for (; c < n; ++c) dst[c] = fa_bf16_to_f32(src[c]);
}
#else
/* The plain shift, which each build's compiler turns into its own vector loop. */
void CPU_KFN(bf16_row)(const uint16_t *restrict src, int64_t n, float *restrict dst) {
  uint32_t *restrict bits = (uint32_t *)(void *)dst;
  for (int64_t c = 0; c < n; ++c) bits[c] = (uint32_t)src[c] << 16;
}
#endif
