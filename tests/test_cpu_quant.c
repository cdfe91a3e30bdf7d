/*
 * test_cpu_quant.c: fa_quantize's per-row kernels of the CPU backend (backends/cpu/
 * cpu_quant_rows.c), each instruction-set build compiled into this program, against the scalar
 * rule they replace, bit for bit:
 *   - the FP8 rounding of x / s against core/math/fp8.h's fa_f32_to_f8e4m3 / fa_f32_to_f8e5m2:
 *     every fp32 bit pattern of both signs with an exponent in and around each format's range
 *     (every mantissa), one pattern in 61 of all the others (NaNs, infinities, the largest and
 *     smallest magnitudes), and random values over random descales;
 *   - the rotation against core/math/hadamard.h's fa_hadamard_rotate_row, head dims 1 to 1024,
 *     with negative zeros, infinities and NaNs among the inputs (a NaN for a NaN: which one an
 *     addition of two NaNs returns depends on its operands' order, which compilers may swap);
 *   - a row's largest finite magnitude against the scalar loop, NaNs and infinities left out.
 * A build whose instructions this CPU lacks is skipped (said so on stdout).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/math/fp8.h"
#include "core/math/hadamard.h"
#include "cpu_kernels.h"
#include "tensor_util.h"

/* cpu_kernels.h declares a build's functions where the plugin is compiled with it. */
#if defined(TEST_QUANT_AVX2) && !defined(FA_CPU_HAVE_AVX2)
CPU_KERNEL_DECLS(avx2)
#endif
#if defined(TEST_QUANT_AVX512) && !defined(FA_CPU_HAVE_AVX512)
CPU_KERNEL_DECLS(avx512)
#endif

/* The builds this program holds (tests/CMakeLists.txt compiles cpu_quant_rows.c once for each). */
typedef struct quant_build {
  const char *isa;
  int (*available)(void);
  void (*rotate)(float *x, int log2_d, const uint32_t *neg, float norm);
  float (*amax)(const float *x, int64_t n);
  void (*fp8)(const float *x, int64_t n, float s, int e5m2, uint8_t *y);
} quant_build;

static int always(void) { return 1; }
#if defined(TEST_QUANT_AVX2)
static int has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif
#if defined(TEST_QUANT_AVX512)
static int has_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}
#endif

static const quant_build builds[] = {
    {"generic", always, cpu_quant_rotate_generic, cpu_quant_amax_generic, cpu_quant_fp8_generic},
#if defined(TEST_QUANT_AVX2)
    {"avx2", has_avx2, cpu_quant_rotate_avx2, cpu_quant_amax_avx2, cpu_quant_fp8_avx2},
#endif
#if defined(TEST_QUANT_AVX512)
    {"avx512", has_avx512, cpu_quant_rotate_avx512, cpu_quant_amax_avx512, cpu_quant_fp8_avx512},
#endif
};

static int failures;

static void fail(const char *isa, const char *what, uint32_t bits, unsigned got, unsigned want) {
  if (failures++ < 20)
    printf("FAIL %s %s: input 0x%08x: got 0x%02x, want 0x%02x\n", isa, what, bits, got, want);
}

static tu_rng rng_state; /* seeded by main from the run's seed */
static uint32_t rng(void) { return (uint32_t)(tu_rng_u64(&rng_state) >> 32); }

enum { CHUNK = 4096 };

/* The patterns [first, first + count * step) by step, through the build and the rule, s = 1. */
static void fp8_patterns(const quant_build *b, uint64_t first, uint64_t count, uint64_t step) {
  static float x[CHUNK];
  static uint8_t y[CHUNK];
  for (uint64_t done = 0; done < count;) {
    const int n = (int)(count - done < CHUNK ? count - done : CHUNK);
    for (int i = 0; i < n; ++i) x[i] = fa_bits_to_f32((uint32_t)(first + (done + i) * step));
    for (int e5m2 = 0; e5m2 < 2; ++e5m2) {
      b->fp8(x, n, 1.0f, e5m2, y);
      for (int i = 0; i < n; ++i) {
        const float v = x[i] / 1.0f;
        const uint8_t want = e5m2 ? fa_f32_to_f8e5m2(v) : fa_f32_to_f8e4m3(v);
        if (y[i] != want) fail(b->isa, e5m2 ? "e5m2" : "e4m3", fa_f32_to_bits(x[i]), y[i], want);
      }
    }
    done += (uint64_t)n;
  }
}

static void test_fp8(const quant_build *b) {
  /* Every mantissa of the exponents from 2^-19 to 2^17 (biased 108 .. 144): both formats' normals,
     subnormals, the values that round into or out of them, and saturation; both signs. */
  for (uint32_t sign = 0; sign < 2; ++sign)
    fp8_patterns(b, ((uint64_t)sign << 31) | (108ull << 23), 37ull << 23, 1);
  /* One pattern in 61 of the whole space, every run starting elsewhere. */
  fp8_patterns(b, rng() % 61, (1ull << 32) / 61, 61);
  /* Random values over random descales (the division included). */
  static float x[CHUNK];
  static uint8_t y[CHUNK];
  for (int round = 0; round < 64; ++round) {
    const float s = ldexpf(1.0f + (float)(rng() % 1000) / 1000.0f, (int)(rng() % 40) - 20);
    for (int i = 0; i < CHUNK; ++i) x[i] = ldexpf((float)(int32_t)rng() / 2147483648.0f, 9);
    for (int e5m2 = 0; e5m2 < 2; ++e5m2) {
      b->fp8(x, CHUNK, s, e5m2, y);
      for (int i = 0; i < CHUNK; ++i) {
        const float v = x[i] / s;
        const uint8_t want = e5m2 ? fa_f32_to_f8e5m2(v) : fa_f32_to_f8e4m3(v);
        if (y[i] != want)
          fail(b->isa, e5m2 ? "e5m2 / s" : "e4m3 / s", fa_f32_to_bits(x[i]), y[i], want);
      }
    }
  }
}

/* A value for the rotation and amax rows: mostly normal, now and then a special one. */
static float row_value(void) {
  const uint32_t r = rng() % 64;
  if (r == 0) return fa_bits_to_f32(0x7fc00000u | (rng() & 0x3fffffu) | (rng() & 0x80000000u));
  if (r == 1) return fa_bits_to_f32(0x7f800000u | (rng() & 0x80000000u));
  if (r == 2) return fa_bits_to_f32(rng() & 0x80000000u);
  if (r == 3) return fa_bits_to_f32(rng() & 0x807fffffu); /* subnormal */
  return ldexpf((float)(int32_t)rng() / 2147483648.0f, (int)(rng() % 20) - 10);
}

static void test_rotate_amax(const quant_build *b) {
  static float x[1024], ref[1024];
  static uint32_t neg[1024];
  static unsigned char signs[1024];
  for (int log2_d = 0; log2_d <= 10; ++log2_d) {
    const int d = 1 << log2_d;
    const uint64_t seed = ((uint64_t)rng() << 32) | rng();
    for (int j = 0; j < d; ++j) {
      signs[j] = (unsigned char)fa_hadamard_sign_negative(seed, (uint32_t)j);
      neg[j] = signs[j] ? 0x80000000u : 0u;
    }
    for (int round = 0; round < 20; ++round) {
      for (int j = 0; j < d; ++j) x[j] = ref[j] = row_value();
      /* amax of the unrotated row (the unrotated call's case) */
      float want = 0.0f;
      for (int j = 0; j < d; ++j) {
        const float a = fabsf(x[j]);
        if (a > want && a <= 3.4028235e38f) want = a;
      }
      const float got = b->amax(x, d);
      if (fa_f32_to_bits(got) != fa_f32_to_bits(want)) fail(b->isa, "amax", (uint32_t)d, 0, 0);
      b->rotate(x, log2_d, neg, fa_hadamard_norm((uint32_t)log2_d));
      fa_hadamard_rotate_row(ref, (uint32_t)log2_d, signs);
      for (int j = 0; j < d; ++j)
        if (fa_f32_to_bits(x[j]) != fa_f32_to_bits(ref[j]) && !(isnan(x[j]) && isnan(ref[j]))) {
          fail(b->isa, "rotate", fa_f32_to_bits(x[j]), 0, 0);
          break;
        }
    }
  }
}

int main(void) {
  const uint64_t seed = tu_run_seed(); /* printed; FA_TEST_SEED replays */
  tu_rng_init(&rng_state, seed);
  printf("test_cpu_quant: seed %llu\n", (unsigned long long)seed);
  for (size_t i = 0; i < sizeof builds / sizeof builds[0]; ++i) {
    const quant_build *b = &builds[i];
    if (!b->available()) {
      printf("skip %s: this CPU lacks its instructions\n", b->isa);
      continue;
    }
    const int before = failures;
    test_fp8(b);
    test_rotate_amax(b);
    printf("%s %s\n", failures == before ? "ok  " : "FAIL", b->isa);
  }
  printf("test_cpu_quant: %d failures\n", failures);
  return failures ? 1 : 0;
}
