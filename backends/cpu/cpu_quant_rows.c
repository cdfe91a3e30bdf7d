/*
 * cpu_quant_rows.c: fa_quantize's per-row steps (cpu_quantize.c), compiled once per instruction
 * set like cpu_rowops.c: the rotation of core/math/hadamard.h, a row's largest finite magnitude,
 * and the division by the descale with core/math/fp8.h's rounding. With AVX-512 they are
 * intrinsics (from plain loops gcc left the maximum and the rotation's small stages scalar: 0.3-1.1
 * GB/s on the development VM); elsewhere plain loops, the rounding without branches so that the
 * compiler vectorises it. The operations and their order per element are the scalar rule's, so
 * every result is bit for bit fa_hadamard_rotate_row's and fa_f32_to_f8e4m3's /
 * fa_f32_to_f8e5m2's (tests/test_cpu_quant.c).
 */
#include <math.h>
#include <string.h>

#include "core/math/fp8.h"
#include "cpu_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define CPU_QUANT_NAME2(name, isa) name##_##isa
#define CPU_QUANT_NAME1(name, isa) CPU_QUANT_NAME2(name, isa)
#define CPU_QUANT_FN(name) CPU_QUANT_NAME1(name, CPU_ISA)

#if defined(__AVX512F__)
/* Stages h = 1, 2, 4, 8 of one 16-value chunk: lane i's partner is lane i ^ h; the lane with bit h
   clear takes a + b (itself plus its partner), the other a - b (its partner minus itself). */
static inline __m512 butterfly16(__m512 v) {
  static const int hs[4] = {1, 2, 4, 8};
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int k = 0; k < 4; ++k) {
    const __m512i h = _mm512_set1_epi32(hs[k]);
    const __m512 p = _mm512_permutexvar_ps(_mm512_xor_si512(lane, h), v);
    const __mmask16 upper = _mm512_test_epi32_mask(lane, h);
    v = _mm512_mask_blend_ps(upper, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
  }
  return v;
}
#endif

/* The rotation in place: the signs (neg[j]: 0 or the sign bit), the butterfly stages h = 1, 2,
   4, ... (pairs (i, i + h) with i & h clear, a + b and a - b), then the multiplication by norm. */
void CPU_QUANT_FN(cpu_quant_rotate)(float *restrict x, int log2_d, const uint32_t *restrict neg,
                                    float norm) {
  const int d = 1 << log2_d;
#if defined(__AVX512F__)
  if (d >= 16) {
    const __m512 nv = _mm512_set1_ps(norm);
    for (int j = 0; j < d; j += 16) {
      const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(x + j), _mm512_loadu_si512(neg + j));
      _mm512_storeu_ps(x + j, butterfly16(_mm512_castsi512_ps(u)));
    }
    for (int h = 16; h < d; h <<= 1)
      for (int i0 = 0; i0 < d; i0 += 2 * h)
        for (int j = 0; j < h; j += 16) {
          const __m512 a = _mm512_loadu_ps(x + i0 + j), b = _mm512_loadu_ps(x + i0 + h + j);
          _mm512_storeu_ps(x + i0 + j, _mm512_add_ps(a, b));
          _mm512_storeu_ps(x + i0 + h + j, _mm512_sub_ps(a, b));
        }
    for (int j = 0; j < d; j += 16)
      _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), nv));
    return;
  }
#endif
  for (int j = 0; j < d; ++j) { /* a negation is the sign bit flipped, NaNs included */
    uint32_t u;
    memcpy(&u, &x[j], sizeof u);
    u ^= neg[j];
    memcpy(&x[j], &u, sizeof u);
  }
  for (int h = 1; h < d; h <<= 1)
    for (int i0 = 0; i0 < d; i0 += 2 * h) {
      float *restrict lo = x + i0, *restrict hi = x + i0 + h;
      for (int j = 0; j < h; ++j) {
        const float a = lo[j], b = hi[j];
        lo[j] = a + b;
        hi[j] = a - b;
      }
    }
  for (int j = 0; j < d; ++j) x[j] *= norm;
}

/* The largest |x[j]| that is finite (NaN and infinities left out); 0 for none. */
float CPU_QUANT_FN(cpu_quant_amax)(const float *restrict x, int64_t n) {
#if defined(__AVX512F__)
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  __m512 mv = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 in = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
    const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi32(in, x + j), abs_mask);
    const __m512 af = _mm512_castsi512_ps(a);
    const __mmask16 take = _mm512_cmplt_epu32_mask(a, inf) & _mm512_cmp_ps_mask(af, mv, _CMP_GT_OQ);
    mv = _mm512_mask_mov_ps(mv, take, af);
  }
  return _mm512_reduce_max_ps(mv); /* finite and >= 0: the maximum, in any order */
#else
  float r = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float a = fabsf(x[j]);
    if (a > r && a <= 3.4028235e38f) r = a;
  }
  return r;
#endif
}

#if !defined(__AVX512F__)
/* fa_f32_to_fp8 without branches: the subnormal and the normal code both computed, one kept. */
static inline uint8_t fp8_code(uint32_t u, uint32_t mbits, int32_t bias, uint32_t sat,
                               uint32_t max_code, uint32_t nan_code) {
  const uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  const int32_t e = (int32_t)(a >> 23) - 127, emin = 1 - bias;
  /* subnormal in the target: |f| / 2^(emin - mbits) rounded to nearest even (0 from shift 32) */
  int32_t shift = 23 + emin - (int32_t)mbits - e;
  const uint32_t far = shift >= 32;
  shift = shift < 1 ? 1 : (shift > 31 ? 31 : shift);
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t bits = m >> shift, rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1);
  const uint32_t up = rem > mid || (rem == mid && (bits & 1u));
  const uint32_t sub = far ? 0u : bits + up;
  /* normal: the mantissa rounded to nearest even, the exponent rebiased */
  const uint32_t drop = 23u - mbits;
  const uint32_t r = a + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u);
  const uint32_t nor = (r >> drop) - ((uint32_t)(127 - bias) << mbits);
  uint32_t c = e < emin ? sub : nor;
  c = c > max_code ? max_code : c;
  c = a >= sat ? max_code : c;
  c = a > 0x7f800000u ? nan_code : c;
  return (uint8_t)(sign | c);
}
#endif

#if defined(__AVX512F__)
/* fp8_code on 16 lanes. */
static inline __m512i fp8_codes16(__m512i u, uint32_t mbits, int32_t bias, uint32_t sat,
                                  uint32_t max_code, uint32_t nan_code) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(a, 23), _mm512_set1_epi32(127));
  const int32_t emin = 1 - bias;
  const __m512i shift = _mm512_sub_epi32(_mm512_set1_epi32(23 + emin - (int32_t)mbits), e);
  const __mmask16 far = _mm512_cmpge_epi32_mask(shift, _mm512_set1_epi32(32));
  const __m512i sh = _mm512_min_epi32(_mm512_max_epi32(shift, one), _mm512_set1_epi32(31));
  const __m512i m = _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0x7fffff)),
                                    _mm512_set1_epi32(0x800000));
  const __m512i bits = _mm512_srlv_epi32(m, sh);
  const __m512i rem = _mm512_and_si512(m, _mm512_sub_epi32(_mm512_sllv_epi32(one, sh), one));
  const __m512i mid = _mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one));
  const __mmask16 up = _mm512_cmpgt_epu32_mask(rem, mid) |
                       (_mm512_cmpeq_epi32_mask(rem, mid) & _mm512_test_epi32_mask(bits, one));
  const __m512i sub =
      _mm512_maskz_mov_epi32((__mmask16)~far, _mm512_mask_add_epi32(bits, up, bits, one));
  const uint32_t drop = 23u - mbits;
  const __m512i r =
      _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32((int)((1u << (drop - 1u)) - 1u))),
                       _mm512_and_si512(_mm512_srli_epi32(a, drop), one));
  const __m512i nor = _mm512_sub_epi32(_mm512_srli_epi32(r, drop),
                                       _mm512_set1_epi32((int)((uint32_t)(127 - bias) << mbits)));
  __m512i c =
      _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(emin)), nor, sub);
  c = _mm512_min_epu32(c, _mm512_set1_epi32((int)max_code));
  c = _mm512_mask_mov_epi32(c, _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32((int)sat)),
                            _mm512_set1_epi32((int)max_code));
  c = _mm512_mask_mov_epi32(c, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)),
                            _mm512_set1_epi32((int)nan_code));
  return _mm512_or_si512(c, sign);
}
#endif

/* y[j] = x[j] / s rounded to e4m3 (e5m2: to e5m2), IEEE division as the scalar rule's. */
void CPU_QUANT_FN(cpu_quant_fp8)(const float *restrict x, int64_t n, float s, int e5m2,
                                 uint8_t *restrict y) {
#if defined(__AVX512F__)
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 in = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
    const __m512i u = _mm512_castps_si512(_mm512_div_ps(_mm512_maskz_loadu_ps(in, x + j), sv));
    const __m512i c = e5m2 ? fp8_codes16(u, 2u, 15, 0x47600000u, 0x7bu, 0x7eu)
                           : fp8_codes16(u, 3u, 7, 0x43e00000u, 0x7eu, 0x7fu);
    _mm512_mask_cvtepi32_storeu_epi8(y + j, in, c);
  }
#else
  if (e5m2) {
    for (int64_t j = 0; j < n; ++j) {
      const float v = x[j] / s;
      uint32_t u;
      memcpy(&u, &v, sizeof u);
      y[j] = fp8_code(u, 2u, 15, 0x47600000u, 0x7bu, 0x7eu);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const float v = x[j] / s;
      uint32_t u;
      memcpy(&u, &v, sizeof u);
      y[j] = fp8_code(u, 3u, 7, 0x43e00000u, 0x7eu, 0x7fu);
    }
  }
#endif
}
