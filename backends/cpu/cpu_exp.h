/*
 * cpu_exp.h: exp(x) for the softmax's inner loops, written so the compiler can vectorise it.
 *
 * libm's expf is a scalar call that no loop around it can vectorise without -ffast-math (which
 * would also break the -inf handling the masks rely on), and one exponential per score costs about
 * as much as the score's share of the two tile products. This one is branch-free: the loops over
 * a row stay vector loops.
 *
 * Method: x = n·ln2 + r with n = round(x / ln2) and |r| <= ln2/2, ln2 split in a high part with
 * few significant bits (so n·ln2_hi is exact) and a low part; exp(r) by its Taylor polynomial to
 * degree 7, whose truncation error (r^8/8! < 6e-9) is well below half an ulp; then 2^n is put in
 * the exponent field. Results below FLT_MIN are flushed to 0 (a softmax term < 1e-38 of the row's
 * largest changes nothing); exp(-inf) = 0. Above x = 88 it returns +inf, about 0.7 early (the
 * softmax only exponentiates s - max <= 0). Accuracy: about 1 ulp, from Horner's roundings.
 */
#ifndef FA_CPU_EXP_H
#define FA_CPU_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float cpu_expf(float x) {
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693145751953125f; /* ln 2 to 16 bits: n·ln2_hi is exact for |n| < 2^8 */
  const float ln2_lo = 1.42860682030941723e-6f; /* ln 2 - ln2_hi */
  const float round_magic = 12582912.0f;        /* 1.5·2^23: adding it rounds to an integer */
  const float lowest = -87.33654f;              /* below: exp(x) < FLT_MIN, flushed to 0 */
  const float highest = 88.0f; /* n <= 127 keeps 2^n one exponent field; above: +inf */

  /* Clamped so that n converts to int without overflow, also for -inf and NaN. */
  float xc = x >= lowest ? x : lowest;
  xc = xc <= highest ? xc : highest;
  float n = (xc * log2e + round_magic) - round_magic;
  float r = (xc - n * ln2_hi) - n * ln2_lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  y = x >= lowest ? y : 0.0f;
  y = x > highest ? (float)INFINITY : y;
  return x == x ? y : x; /* NaN in, NaN out: a bad input must not look like a masked key */
}

#endif /* FA_CPU_EXP_H */
