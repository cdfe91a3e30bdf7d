/*
 * fp8_acc.h: the tests' model of how Hopper's FP8 tensor cores accumulate (shared by the
 * reference's naive computations, tests/reference/unit_storage.c, the FP8 conformance cases and
 * tests/gpu/sm90_fp8_probe.cu): within each step of FP8_ACC_TERMS products the sum is exact enough
 * to count as fp32, and after it the running sum keeps FP8_ACC_BITS significant bits (truncated).
 */
#ifndef FA_TESTS_FP8_ACC_H
#define FA_TESTS_FP8_ACC_H

#include <stdint.h>
#include <string.h>

/* Products per step of an FP8 wgmma (k32). */
#define FP8_ACC_TERMS 32

/* Significant bits kept of a running sum: sm90_fp8_probe measured the kernel's sums at 0.54-1.03x
   the error of this model with 13 bits and 1.27-1.81x with 14 (H100, 2026-12-06; DeepSeek-V3's
   report says about 14). */
#define FP8_ACC_BITS 13

/* x truncated to `bits` significant bits (toward zero); infinities and NaN as they are. */
static inline float fp8_acc_keep(float x, int bits) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if (bits < 24 && (u & 0x7f800000u) != 0x7f800000u) u &= ~((1u << (24 - bits)) - 1u);
  memcpy(&x, &u, sizeof x);
  return x;
}

#endif /* FA_TESTS_FP8_ACC_H */
