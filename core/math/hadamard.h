/*
 * hadamard.h: the rotation of incoherent processing (FlashAttention-3, after QuIP): a row x of
 * head dimension d (a power of two) becomes x·M with M = diag(s)·H/sqrt(d), H the Sylvester
 * Hadamard matrix (H[i][j] = (-1)^popcount(i & j)) and s random signs drawn from a seed:
 *   s[j] = -1 when bit (j % 32) of word (j / 32) % 4 of
 *          Philox4x32-10(counter {j / 128, 0, 0x68616461, 0}, key {lo32(seed), hi32(seed)})
 *   is set, else +1.
 * M is orthogonal, so (q·M)·(k·M)ᵀ = q·kᵀ. The transform runs as log2(d) butterfly stages
 * (stage h = 1, 2, 4, ...: (a, b) -> (a + b, a - b) on elements i and i + h, i & h == 0) in fp32
 * after the signs, then one multiplication by the fp32 value nearest 1/sqrt(d); every backend
 * uses this order, so the results agree bit for bit.
 */
#ifndef FA_CORE_HADAMARD_H
#define FA_CORE_HADAMARD_H

#include "philox.h"

#define FA_HADAMARD_TAG 0x68616461u /* "hada": keeps these draws apart from dropout's */

/* Whether s[j] of the rotation of `seed` is -1. */
FA_HOST_DEVICE int fa_hadamard_sign_negative(uint64_t seed, uint32_t j) {
  fa_philox4 ctr;
  ctr.v[0] = j / 128u;
  ctr.v[1] = 0u;
  ctr.v[2] = FA_HADAMARD_TAG;
  ctr.v[3] = 0u;
  fa_philox4 r = fa_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
  return (int)((r.v[(j / 32u) % 4u] >> (j % 32u)) & 1u);
}

/* 1/sqrt(d) rounded to fp32, for d = 2^log2_d (d <= 2^30). */
FA_HOST_DEVICE float fa_hadamard_norm(uint32_t log2_d) {
  /* 2^-(log2_d/2), times 1/sqrt(2) rounded to fp32 for odd log2_d: exact products of a power of
     two, so the same on every device */
  float scale = fa_bits_to_f32((uint32_t)(127 - (int32_t)(log2_d / 2u)) << 23);
  return (log2_d & 1u) ? scale * 0.70710677f : scale;
}

#if !defined(FA_OPENCL_C) && !defined(__CUDACC__) && !defined(__HIPCC__)
/* Rotates x[0..d) in place (host code); signs[j] = 1 for negative, from
   fa_hadamard_sign_negative, precomputed once per call. */
static inline void fa_hadamard_rotate_row(float *x, uint32_t log2_d, const unsigned char *signs) {
  const uint32_t d = 1u << log2_d;
  for (uint32_t j = 0; j < d; ++j)
    if (signs[j]) x[j] = -x[j];
  for (uint32_t h = 1; h < d; h <<= 1)
    for (uint32_t i = 0; i < d; ++i)
      if (!(i & h)) {
        const float a = x[i], b = x[i + h];
        x[i] = a + b;
        x[i + h] = a - b;
      }
  const float norm = fa_hadamard_norm(log2_d);
  for (uint32_t j = 0; j < d; ++j) x[j] *= norm;
}
#endif

#endif /* FA_CORE_HADAMARD_H */
