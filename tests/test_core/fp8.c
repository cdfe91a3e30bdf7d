/*
 * fp8.c: the FP8 conversions of core/math/fp8.h against float64 arithmetic on each format's
 * definition (nearest even, subnormals, saturation, NaN), and the rotation of core/math/hadamard.h
 * against the explicit matrix diag(s)·H/sqrt(d) in float64.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/math/fp8.h"
#include "core/math/hadamard.h"
#include "test_core.h"

typedef struct fp8_format {
  const char *name;
  int mbits, bias;
  double max;
  uint8_t max_code;
  float (*to_f32)(uint8_t);
  uint8_t (*from_f32)(float);
  int (*is_nan)(uint8_t);
} fp8_format;

static int e4m3_nan(uint8_t c) { return (c & 0x7fu) == 0x7fu; }
static int e5m2_nan(uint8_t c) { return (c & 0x7cu) == 0x7cu && (c & 0x3u) != 0; }

static const fp8_format formats[2] = {
    {"e4m3", 3, 7, 448.0, 0x7eu, fa_f8e4m3_to_f32, fa_f32_to_f8e4m3, e4m3_nan},
    {"e5m2", 2, 15, 57344.0, 0x7bu, fa_f8e5m2_to_f32, fa_f32_to_f8e5m2, e5m2_nan},
};

/* The value of a finite code by definition. */
static double value_of(const fp8_format *f, uint8_t c) {
  const int ebits = 7 - f->mbits;
  const int exp = (c >> f->mbits) & ((1 << ebits) - 1), man = c & ((1 << f->mbits) - 1);
  const double v = exp == 0 ? ldexp((double)man, 1 - f->bias - f->mbits)
                            : ldexp((double)((1 << f->mbits) + man), exp - f->bias - f->mbits);
  return (c & 0x80u) ? -v : v;
}

/* The code x rounds to: the nearest finite magnitude (ties to the even code), saturated to the
   largest finite value; found by search over the codes, independent of the bit arithmetic. */
static uint8_t expect_code(const fp8_format *f, float x) {
  const uint8_t sign = signbit(x) ? 0x80u : 0u;
  const double ax = fabs((double)x);
  if (ax >= f->max) return sign | f->max_code;
  uint8_t best = 0;
  double best_err = INFINITY;
  for (unsigned c = 0; c <= f->max_code; ++c) {
    const double err = fabs(value_of(f, (uint8_t)c) - ax);
    if (err < best_err || (err == best_err && !(c & 1u))) {
      best = (uint8_t)c;
      best_err = err;
    }
  }
  return sign | best;
}

static long g_checked;

static void check_one(const fp8_format *f, float x) {
  ++g_checked;
  const uint8_t got = f->from_f32(x);
  if (isnan(x)) {
    if (!f->is_nan(got))
      test_fail("%s(NaN %08" PRIx32 ") = %02x, not NaN", f->name, fa_f32_to_bits(x), got);
    return;
  }
  const uint8_t want = expect_code(f, x);
  if (got != want) test_fail("%s(%a) = %02x, expected %02x", f->name, (double)x, got, want);
}

void test_fp8_conversions(void) {
  test_case_begin("f32 <-> f8e4m3/f8e5m2: definition, nearest even, saturation, NaN");
  g_checked = 0;
  for (int i = 0; i < 2; ++i) {
    const fp8_format *f = &formats[i];
    /* Every code decodes to its defined value, and encodes back to itself. */
    for (unsigned c = 0; c < 256; ++c) {
      const float v = f->to_f32((uint8_t)c);
      if (f->is_nan((uint8_t)c)) {
        if (!isnan(v)) test_fail("%s code %02x decodes to %g, not NaN", f->name, c, (double)v);
        continue;
      }
      if (i == 1 && (c & 0x7fu) == 0x7cu) { /* e5m2 infinities */
        if (!isinf(v)) test_fail("e5m2 code %02x decodes to %g, not inf", c, (double)v);
        continue;
      }
      if ((double)v != value_of(f, (uint8_t)c))
        test_fail("%s code %02x decodes to %a, expected %a", f->name, c, (double)v,
                  value_of(f, (uint8_t)c));
      const uint8_t back = f->from_f32(v);
      if (back != c && !(v == 0.0f && (back & 0x7fu) == 0 && (c & 0x7fu) == 0))
        test_fail("%s code %02x -> %g -> %02x", f->name, c, (double)v, back);
    }
    /* Every midpoint between neighbouring codes and a float ulp either side; then random floats
       around the format's range; then the edges. */
    for (unsigned c = 0; c < f->max_code; ++c) {
      const float mid = (float)((value_of(f, (uint8_t)c) + value_of(f, (uint8_t)(c + 1))) / 2);
      const float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
      for (int k = 0; k < 3; ++k) {
        check_one(f, xs[k]);
        check_one(f, -xs[k]);
      }
    }
    for (int t = 0; t < 400000; ++t) {
      const double mag =
          ldexp(test_rng_unit() + 0.5, (int)test_rng_range(-2 * f->bias - 6, f->bias + 3));
      check_one(f, (float)(test_rng_unit() < 0.5 ? -mag : mag));
    }
    for (int t = 0; t < 200000; ++t) check_one(f, fa_bits_to_f32(test_rng_u32()));
    const float edges[] = {
        0.0f, (float)f->max, nextafterf((float)f->max, INFINITY),          1e30f, INFINITY,
        1.0f, 1e-30f,        (float)ldexp(1.0, 1 - f->bias - f->mbits - 1)};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; ++k) {
      check_one(f, edges[k]);
      check_one(f, -edges[k]);
    }
    check_one(f, fa_bits_to_f32(0x7fc00000u));
    check_one(f, fa_bits_to_f32(0xff800001u));
  }
  /* The named answers: saturation instead of NaN or infinity. */
  if (fa_f32_to_f8e4m3(480.0f) != 0x7eu || fa_f32_to_f8e4m3(-INFINITY) != 0xfeu)
    test_fail("e4m3 does not saturate to +-448");
  if (fa_f32_to_f8e5m2(65536.0f) != 0x7bu || fa_f32_to_f8e5m2(INFINITY) != 0x7bu)
    test_fail("e5m2 does not saturate to 57344");
  if (fa_f32_to_f8e4m3(ldexpf(1.0f, -10)) != 0x00u) test_fail("e4m3(2^-10) (tie to even) != 0");
  if (fa_f32_to_f8e4m3(ldexpf(3.0f, -11)) != 0x01u) test_fail("e4m3(1.5 * 2^-10) != 2^-9");
  printf("    %ld conversions checked\n", g_checked);
  test_case_end();
}

/* The rotation against x·diag(s)·H/sqrt(d) in float64, H[i][j] = (-1)^popcount(i & j): within a
   few fp32 rounding steps per stage; and orthogonality (norms and dot products kept). */
void test_hadamard_rotation(void) {
  test_case_begin("Hadamard rotation: x·diag(s)·H/sqrt(d) in float64; orthogonal; seeded signs");
  enum { MAXD = 1024 };
  static float x[MAXD], y[MAXD], z[MAXD];
  static unsigned char signs[MAXD], other[MAXD];
  for (uint32_t log2_d = 0; log2_d <= 10; ++log2_d) {
    const uint32_t d = 1u << log2_d;
    const uint64_t seed = test_rng_u64();
    int differ = 0, negatives = 0;
    for (uint32_t j = 0; j < d; ++j) {
      signs[j] = (unsigned char)fa_hadamard_sign_negative(seed, j);
      other[j] = (unsigned char)fa_hadamard_sign_negative(seed + 1, j);
      differ += signs[j] != other[j];
      negatives += signs[j];
    }
    if (d >= 64 && (differ == 0 || negatives < (int)d / 4 || negatives > 3 * (int)d / 4))
      test_fail("d %u: signs of seed %" PRIu64 " look biased (%d negative, %d differ from seed+1)",
                d, seed, negatives, differ);
    double xx = 0, yy = 0, xz = 0, yz = 0, max_err = 0, mag = 0;
    for (uint32_t j = 0; j < d; ++j) {
      x[j] = (float)(2.0 * test_rng_unit() - 1.0);
      z[j] = (float)(2.0 * test_rng_unit() - 1.0);
    }
    for (uint32_t j = 0; j < d; ++j) xx += (double)x[j] * x[j], xz += (double)x[j] * z[j];
    memcpy(y, x, d * sizeof(float));
    fa_hadamard_rotate_row(y, log2_d, signs);
    for (uint32_t i = 0; i < d; ++i) {
      double want = 0;
      for (uint32_t j = 0; j < d; ++j) {
        const double h = (__builtin_popcount(i & j) & 1) ? -1.0 : 1.0;
        want += (signs[j] ? -(double)x[j] : (double)x[j]) * h;
      }
      want /= sqrt((double)d);
      const double err = fabs(want - y[i]);
      if (err > max_err) max_err = err;
      mag += fabs(x[i]);
      yy += (double)y[i] * y[i];
    }
    /* each stage adds at most one rounding of a partial sum bounded by the sum of |x| */
    const double bound = (log2_d + 2) * ldexp(mag / sqrt((double)d), -23);
    if (max_err > bound)
      test_fail("d %u: rotation differs from float64 by %g > %g", d, max_err, bound);
    if (fabs(yy - xx) > 1e-5 * xx + 1e-30) test_fail("d %u: |xM|^2 %g != |x|^2 %g", d, yy, xx);
    fa_hadamard_rotate_row(z, log2_d, signs);
    for (uint32_t j = 0; j < d; ++j) yz += (double)y[j] * z[j];
    if (fabs(yz - xz) > 1e-5 * sqrt(xx * d) + 1e-6)
      test_fail("d %u: (xM)·(zM) %g != x·z %g", d, yz, xz);
  }
  if (fa_hadamard_norm(0) != 1.0f || fa_hadamard_norm(2) != 0.5f ||
      fa_hadamard_norm(7) != (float)(1.0 / sqrt(128.0)))
    test_fail("fa_hadamard_norm is not the fp32 value nearest 1/sqrt(d)");
  test_case_end();
}
