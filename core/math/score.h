/*
 * score.h: what happens to a score between Q·Kᵀ and the softmax, defined once for every backend
 * (FA_HOST_DEVICE: host and device code). For query row i and key column j of one sequence:
 *
 *   z = scale · (q_i · k_j)
 *   z = softcap · tanh(z / softcap)            when softcap > 0
 *   z = z − slope_h · |i + shift − j|          with ALiBi (shift as in mask.h: the aligned
 * diagonal) z = −inf                                   where mask.h hides the key
 *
 * ALiBi is the symmetric distance form for causal and non-causal attention alike, so the LSE does
 * not depend on whether the mask is causal (FlashAttention's causal kernels add slope·j instead,
 * which differs from this by a per-row constant: same output, different LSE).
 * In the backward pass the softcap's derivative multiplies dS: dz/dz0 = 1 − (z/softcap)²,
 * computed from the capped score.
 */
#ifndef FA_CORE_SCORE_H
#define FA_CORE_SCORE_H

/* OpenCL C has no standard headers: its prelude defines the fixed-width types. */
#ifndef FA_OPENCL_C
#include <math.h>
#include <stdint.h>
#endif

#include "host_device.h"

FA_HOST_DEVICE float fa_score_softcap(float z, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(z / softcap) : z;
}

/* dz_capped / dz from the capped value (1 without softcap). */
FA_HOST_DEVICE float fa_score_softcap_grad(float z_capped, float softcap) {
  if (!(softcap > 0.0f)) return 1.0f;
  float t = z_capped / softcap;
  return 1.0f - t * t;
}

/* The same factor from inv_softcap = 1/softcap (0 without softcap: the factor is then 1 for every
   finite z), with no division and no branch, for kernels' inner loops; equal to
   fa_score_softcap_grad up to the rounding of the reciprocal. Not finite for z = -inf (a masked
   score): callers select it away where p = 0. */
FA_HOST_DEVICE float fa_score_softcap_grad_inv(float z_capped, float inv_softcap) {
  float t = z_capped * inv_softcap;
  return 1.0f - t * t;
}

FA_HOST_DEVICE float fa_score_alibi(float slope, int64_t i, int64_t j, int64_t shift) {
  int64_t dist = i + shift - j;
  return -slope * (float)(dist < 0 ? -dist : dist);
}

/* The whole transform for a visible (i, j): raw = q_i · k_j. */
FA_HOST_DEVICE float fa_score(float raw, float scale, float softcap, int has_alibi, float slope,
                              int64_t i, int64_t j, int64_t shift) {
  float z = fa_score_softcap(raw * scale, softcap);
  if (has_alibi) z += fa_score_alibi(slope, i, j, shift);
  return z;
}

#endif /* FA_CORE_SCORE_H */
