/*
 * dtype.c: the storage conversions of core/math/dtype.h against float64 arithmetic on each
 * format's definition (rounding to nearest even, subnormals, overflow, NaN), and round trips.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/math/dtype.h"
#include "test_core.h"

/* Rounds |x| (finite, double) to a multiple of `quantum` (a power of two), ties to even. */
static double round_to_quantum(double ax, double quantum) {
  double q = ax / quantum; /* exact: dividing by a power of two */
  double fl = floor(q), frac = q - fl;
  if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
  return fl * quantum;
}

/*
 * Expected binary16 bits of float x, from the IEEE definition: values below 2^-14 lie on the
 * subnormal grid 2^-24; a value with exponent e lies on the grid 2^(e-10); the largest finite
 * value is 65504 and anything that rounds beyond it is inf. The exponent is taken again after
 * rounding, so a carry into the next binade is handled by the same formula.
 */
static uint16_t expect_f16(float x) {
  uint16_t sign = signbit(x) ? 0x8000u : 0u;
  if (isnan(x)) return 0x7e00u | sign; /* any NaN; compared as "is NaN" */
  double ax = fabs((double)x);
  if (isinf(x)) return sign | 0x7c00u;
  int e;
  frexp(ax, &e); /* ax = f * 2^e, f in [0.5, 1): the unit exponent is e - 1 */
  double quantum = ax < ldexp(1.0, -14) ? ldexp(1.0, -24) : ldexp(1.0, e - 1 - 10);
  double r = round_to_quantum(ax, quantum);
  if (r == 0.0) return sign;
  if (r < ldexp(1.0, -14)) return sign | (uint16_t)(r / ldexp(1.0, -24));
  frexp(r, &e);
  int biased = e - 1 + 15;
  if (biased >= 31) return sign | 0x7c00u;
  uint32_t man = (uint32_t)(r / ldexp(1.0, e - 1 - 10)) - 1024u;
  return (uint16_t)(sign | (uint32_t)biased << 10 | man);
}

/* The same for bfloat16: 8 exponent bits like float32, 7 mantissa bits, subnormal grid 2^-133. */
static uint16_t expect_bf16(float x) {
  uint16_t sign = signbit(x) ? 0x8000u : 0u;
  if (isnan(x)) return 0x7fc0u | sign;
  if (isinf(x)) return sign | 0x7f80u;
  double ax = fabs((double)x);
  int e;
  frexp(ax, &e);
  double quantum = ax < ldexp(1.0, -126) ? ldexp(1.0, -133) : ldexp(1.0, e - 1 - 7);
  double r = round_to_quantum(ax, quantum);
  if (r == 0.0) return sign;
  if (r < ldexp(1.0, -126)) return sign | (uint16_t)(r / ldexp(1.0, -133));
  frexp(r, &e);
  int biased = e - 1 + 127;
  if (biased >= 255) return sign | 0x7f80u;
  uint32_t man = (uint32_t)(r / ldexp(1.0, e - 1 - 7)) - 128u;
  return (uint16_t)(sign | (uint32_t)biased << 7 | man);
}

/* The value of binary16 bits by definition. */
static double value_f16(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 31)
    v = man ? NAN : INFINITY;
  else if (exp == 0)
    v = ldexp((double)man, -24);
  else
    v = ldexp((double)(1024 + man), exp - 25);
  return (h & 0x8000u) ? -v : v;
}

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

static long g_conv_checked;

static void check_convert(float x) {
  ++g_conv_checked;
  uint16_t h = fa_f32_to_f16(x), eh = expect_f16(x);
  if (isnan(x) ? !f16_is_nan(h) : h != eh)
    test_fail("f16(%a = %08" PRIx32 "): got %04x, expected %04x", (double)x, fa_f32_to_bits(x), h,
              eh);
  uint16_t b = fa_f32_to_bf16(x), eb = expect_bf16(x);
  if (isnan(x) ? !bf16_is_nan(b) : b != eb)
    test_fail("bf16(%a = %08" PRIx32 "): got %04x, expected %04x", (double)x, fa_f32_to_bits(x), b,
              eb);
}

void test_dtype_rounding(void) {
  test_case_begin("f32 -> f16/bf16 round to nearest even (vs float64 on the definition)");
  g_conv_checked = 0;
  /* Random bit patterns reach every exponent, both signs, subnormals, infinities and NaNs. */
  for (int t = 0; t < 4000000; ++t) check_convert(fa_bits_to_f32(test_rng_u32()));
  /* Every tie and its neighbours: the midpoint between two adjacent f16 (bf16) values, and one
     float ulp either side, for every pair of adjacent finite positive values, then negated. */
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    double lo = value_f16((uint16_t)h), hi = value_f16((uint16_t)(h + 1));
    float mid = (float)((lo + hi) / 2); /* exact: f16 midpoints fit in a float */
    float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int k = 0; k < 3; ++k) {
      check_convert(xs[k]);
      check_convert(-xs[k]);
    }
  }
  for (uint32_t b = 0; b < 0x7f80u; ++b) {
    float lo = fa_bf16_to_f32((uint16_t)b), hi = fa_bf16_to_f32((uint16_t)(b + 1));
    /* The midpoint has one more mantissa bit than bf16, which a float holds exactly. */
    float mid = (float)(((double)lo + (double)hi) / 2);
    float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int k = 0; k < 3; ++k) {
      check_convert(xs[k]);
      check_convert(-xs[k]);
    }
  }
  /* Named edges. */
  static const float edges[] = {
      0.0f,        -0.0f,    65504.0f,  65519.99f, 65520.0f,       65536.0f,       1e10f,
      FLT_MAX,     INFINITY, -INFINITY, 5.96e-8f,  2.98023224e-8f, 2.98023259e-8f, 6.103515625e-05f,
      6.1035e-05f, FLT_MIN,  1.0e-45f,  3.4e38f,   1.0f,           1.00048828125f};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; ++i) {
    check_convert(edges[i]);
    check_convert(-edges[i]);
  }
  static const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                                  0xffc00000u, 0x7f802000u, 0x7f800100u, 0x7fa00000u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; ++i) check_convert(fa_bits_to_f32(nans[i]));
  /* The exact answers at the f16 overflow edge: 65504 is finite, 65520 (the tie) rounds to inf. */
  if (fa_f32_to_f16(65504.0f) != 0x7bffu) test_fail("f16(65504) != 0x7bff");
  if (fa_f32_to_f16(65519.996f) != 0x7bffu) test_fail("f16(65519.996) != 0x7bff");
  if (fa_f32_to_f16(65520.0f) != 0x7c00u) test_fail("f16(65520) != inf");
  if (fa_f32_to_f16(ldexpf(1.0f, -25)) != 0x0000u) test_fail("f16(2^-25) (tie to even) != 0");
  if (fa_f32_to_f16(ldexpf(3.0f, -26)) != 0x0001u) test_fail("f16(1.5 * 2^-25) != 2^-24");
  if (fa_f32_to_bf16(FLT_MAX) != 0x7f80u) test_fail("bf16(FLT_MAX) != inf");
  printf("  (%ld conversions checked)\n", g_conv_checked);
  test_case_end();
}

void test_dtype_round_trip(void) {
  test_case_begin("f16 -> f32 -> f16 and bf16 -> f32 -> bf16 exact for all 65536 patterns");
  for (uint32_t i = 0; i < 65536u; ++i) {
    uint16_t h = (uint16_t)i;
    float f = fa_f16_to_f32(h);
    double want = value_f16(h);
    if (f16_is_nan(h)) {
      if (!isnan(f)) test_fail("f16 NaN %04x widened to a non-NaN", h);
      if (!f16_is_nan(fa_f32_to_f16(f))) test_fail("f16 NaN %04x did not stay NaN", h);
      continue;
    }
    if ((double)f != want || !!signbit(f) != !!signbit(want))
      test_fail("f16 %04x widened to %a, expected %a", h, (double)f, want);
    if (fa_f32_to_f16(f) != h) test_fail("f16 %04x -> %a -> %04x", h, (double)f, fa_f32_to_f16(f));
    float g = fa_bf16_to_f32(h);
    if (bf16_is_nan(h)) {
      if (!isnan(g) || !bf16_is_nan(fa_f32_to_bf16(g))) test_fail("bf16 NaN %04x lost", h);
      continue;
    }
    if (fa_f32_to_bf16(g) != h)
      test_fail("bf16 %04x -> %a -> %04x", h, (double)g, fa_f32_to_bf16(g));
  }
  /* The bf16 NaN patterns whose f16 twin is not a NaN were skipped above: check them here. */
  for (uint32_t i = 0; i < 65536u; ++i)
    if (bf16_is_nan((uint16_t)i) && !bf16_is_nan(fa_f32_to_bf16(fa_bf16_to_f32((uint16_t)i))))
      test_fail("bf16 NaN %04x lost", i);
  test_case_end();
}
