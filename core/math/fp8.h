/*
 * fp8.h: the two OCP 8-bit float formats (FP8) <-> fp32, in integer arithmetic so that every
 * backend and the tests round alike: round-to-nearest-even, saturated to the largest finite value
 * (as the hardware's "satfinite" conversions), NaN kept NaN.
 *   E4M3 ("e4m3fn"): 4 exponent bits, bias 7, 3 mantissa bits, no infinities; S.1111.111 is NaN;
 *                    largest finite 448, smallest subnormal 2^-9.
 *   E5M2:            5 exponent bits, bias 15, 2 mantissa bits, IEEE infinities and NaNs;
 *                    largest finite 57344, smallest subnormal 2^-16.
 */
#ifndef FA_CORE_FP8_H
#define FA_CORE_FP8_H

#include "dtype.h"

#define FA_F8E4M3_MAX 448.0f
#define FA_F8E5M2_MAX 57344.0f

FA_HOST_DEVICE float fa_f8e4m3_to_f32(uint8_t c) {
  uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  uint32_t exp = (c >> 3) & 0xfu;
  uint32_t man = c & 0x7u;
  if (exp == 0xfu && man == 0x7u) return fa_bits_to_f32(sign | 0x7fc00000u);
  if (exp == 0) {
    float f = (float)man * 0.001953125f; /* man * 2^-9 */
    return sign ? -f : f;
  }
  return fa_bits_to_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

FA_HOST_DEVICE float fa_f8e5m2_to_f32(uint8_t c) {
  /* E5M2 is the top byte of an fp16 */
  return fa_f16_to_f32((uint16_t)((uint16_t)c << 8));
}

/* |f| (finite, below the format's overflow) as the code of a format with `mbits` mantissa bits and
   exponent bias `bias`, rounded to nearest even; the sign is added by the callers. */
FA_HOST_DEVICE uint32_t fa_fp8_magnitude(uint32_t a, uint32_t mbits, int32_t bias) {
  const int32_t e = (int32_t)(a >> 23) - 127;
  const int32_t emin = 1 - bias;
  if (e < emin) {
    /* subnormal in the target: the integer nearest to |f| / 2^(emin - mbits) */
    const int32_t shift = 23 + emin - (int32_t)mbits - e;
    if (shift >= 32) return 0;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t bits = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (bits & 1u))) bits++;
    return bits; /* 1 << mbits (the smallest normal) when it rounds up into it */
  }
  const uint32_t drop = 23u - mbits;
  const uint32_t r = a + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u);
  return (r >> drop) - ((uint32_t)(127 - bias) << mbits);
}

/* f as an FP8 code of `mbits` mantissa bits and exponent bias `bias`: NaN as nan_code, any value
   at or above `sat` (the fp32 bits of the largest finite value) and anything rounding past it as
   max_code, the largest finite code; the sign kept. */
FA_HOST_DEVICE uint8_t fa_f32_to_fp8(float f, uint32_t mbits, int32_t bias, uint32_t sat,
                                     uint32_t max_code, uint32_t nan_code) {
  const uint32_t u = fa_f32_to_bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | nan_code);
  if (a >= sat) return (uint8_t)(sign | max_code);
  const uint32_t c = fa_fp8_magnitude(a, mbits, bias);
  return (uint8_t)(sign | (c > max_code ? max_code : c));
}

/* 0x43e00000 is 448.0f, 0x47600000 is 57344.0f (infinities included by the comparison) */
FA_HOST_DEVICE uint8_t fa_f32_to_f8e4m3(float f) {
  return fa_f32_to_fp8(f, 3u, 7, 0x43e00000u, 0x7eu, 0x7fu);
}

FA_HOST_DEVICE uint8_t fa_f32_to_f8e5m2(float f) {
  return fa_f32_to_fp8(f, 2u, 15, 0x47600000u, 0x7bu, 0x7eu);
}

#endif /* FA_CORE_FP8_H */
