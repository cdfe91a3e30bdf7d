/*
 * dtype.h: storage conversions (fp16, bf16 <-> fp32) done in integer arithmetic, so every host
 * backend and the tests round the same way (round-to-nearest-even) without compiler extensions.
 */
#ifndef FA_CORE_DTYPE_H
#define FA_CORE_DTYPE_H

/* OpenCL C has no standard headers: its prelude defines the fixed-width types. */
#ifndef FA_OPENCL_C
#include <stdint.h>
#include <string.h>
#endif

#include "host_device.h"

#if defined(FA_OPENCL_C)
FA_HOST_DEVICE float fa_bits_to_f32(uint32_t u) { return as_float(u); }
FA_HOST_DEVICE uint32_t fa_f32_to_bits(float f) { return as_uint(f); }
#else
FA_HOST_DEVICE float fa_bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

FA_HOST_DEVICE uint32_t fa_f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
#endif

FA_HOST_DEVICE float fa_bf16_to_f32(uint16_t h) { return fa_bits_to_f32((uint32_t)h << 16); }

FA_HOST_DEVICE uint16_t fa_f32_to_bf16(float f) {
  uint32_t u = fa_f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

FA_HOST_DEVICE float fa_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return fa_bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return fa_bits_to_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float f = (float)man * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return fa_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

FA_HOST_DEVICE uint16_t fa_f32_to_f16(float f) {
  uint32_t u = fa_f32_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
    if (a < 0x33000000u) return (uint16_t)sign;            /* below half the smallest subnormal */
    uint32_t exp = a >> 23;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  /* 14..24 */
    uint32_t bits = man >> shift; /* not "half": a type name in OpenCL C */
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (bits & 1u))) bits++;
    return (uint16_t)(sign | bits);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return (uint16_t)(sign | (r >> 13));
}

#endif /* FA_CORE_DTYPE_H */
