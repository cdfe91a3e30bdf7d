/*
 * test_cpu_bf16dp.c: the CPU backend's AVX512-BF16 products (backends/cpu/cpu_bf16dp.c), run with
 * FA_CPU_ISA=avx512bf16 (set by CTest, and here too), against a float64 reference.
 *
 * The conformance suite runs this variant too (conformance.cpu.avx512bf16); this is its focused
 * check: the forward's name must say avx512bf16 for bf16 with even head dims (and avx512 for odd
 * head dims, which run the fp32 kernels), and the output and LSE must be within a bf16 tolerance
 * of the reference. Shapes cover ragged key tiles (an odd key count: the last pair padded), causal
 * masks, GQA and head dims 64, 128 and one not a multiple of 16. Exits 77 (a skip) on a CPU
 * without AVX512-BF16 or an architecture without the build.
 *
 * With --isa amx the same forward checks run with FA_CPU_ISA=amx: the products on AMX tiles
 * (backends/cpu/cpu_amx.c), named cpu.flash.amx... (the backward: test_cpu_amx_bwd.c); ctest runs
 * it (cpu.amx_emulated) on the test build of the plugin whose tile instructions are
 * tests/cpu_amx_emu.h's C model, and also requires the device line to say AMX is in use. Shapes
 * are chosen so that every edge of its 32 x 32 tile blocks and 16-pair steps is hit (rows, columns
 * and pairs past the operands).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/dtype.h"
#include "flash_attn.h"
#include "tensor_util.h"
#include "test_cpu_amx.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
static int cpu_has_avx512bf16(void) {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
}
#else
static int cpu_has_avx512bf16(void) { return 0; }
#endif

typedef struct shape {
  int64_t sq, sk, hq, hk, d;
  int causal;
} shape;

/* One bf16 forward; returns the number of failures. */
static const char *isa = "avx512bf16"; /* or "amx" (--isa amx) */

static int run_case(const shape *c, tu_rng *rng) {
  const int64_t nq = c->sq * c->hq * c->d, nk = c->sk * c->hk * c->d;
  uint16_t *q = malloc(sizeof *q * (size_t)nq), *k = malloc(sizeof *k * (size_t)nk);
  uint16_t *v = malloc(sizeof *v * (size_t)nk), *o = malloc(sizeof *o * (size_t)nq);
  float *lse = malloc(sizeof *lse * (size_t)(c->hq * c->sq));
  double *w = malloc(sizeof *w * (size_t)c->sk);
  if (!q || !k || !v || !o || !lse || !w) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (int64_t x = 0; x < nq; ++x) q[x] = fa_f32_to_bf16((float)tu_rng_normal(rng));
  for (int64_t x = 0; x < nk; ++x) k[x] = fa_f32_to_bf16((float)tu_rng_normal(rng));
  for (int64_t x = 0; x < nk; ++x) v[x] = fa_f32_to_bf16((float)tu_rng_normal(rng));
  for (int64_t x = 0; x < nq; ++x) o[x] = 0x7fc1; /* poison: a NaN */
  fa_tensor tq = tu_view_bshd(q, FA_BF16, 1, c->sq, c->hq, c->d);
  fa_tensor tk = tu_view_bshd(k, FA_BF16, 1, c->sk, c->hk, c->d);
  fa_tensor tv = tu_view_bshd(v, FA_BF16, 1, c->sk, c->hk, c->d);
  fa_tensor to = tu_view_bshd(o, FA_BF16, 1, c->sq, c->hq, c->d);
  fa_tensor tl;
  memset(&tl, 0, sizeof tl);
  tl.data = lse;
  tl.device.kind = FA_DEVICE_CPU;
  tl.dtype = FA_F32;
  tl.ndim = 3;
  tl.shape[0] = 1, tl.shape[1] = c->hq, tl.shape[2] = c->sq;
  tl.strides[0] = c->hq * c->sq, tl.strides[1] = c->sq, tl.strides[2] = 1;
  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_CPU;
  p.causal = c->causal;
  fa_run_info info;
  fa_run_info_init(&info);
  char label[96];
  snprintf(label, sizeof label, "sq %lld sk %lld h %lldx%lld d %lld%s", (long long)c->sq,
           (long long)c->sk, (long long)c->hq, (long long)c->hk, (long long)c->d,
           c->causal ? " causal" : "");
  int fails = 0;
  fa_status st = fa_forward(&p, &tq, &tk, &tv, &to, &tl, &info);
  if (st != FA_OK) {
    printf("FAIL %s: fa_forward: %s\n", label, fa_last_error());
    fails = 1;
    goto done;
  }
  /* The bf16 products run (and are named) for even head dims only. */
  char want[64];
  snprintf(want, sizeof want, "cpu.flash.%s.fwd.bf16.", c->d % 2 == 0 ? isa : "avx512");
  if (strncmp(info.kernel, want, strlen(want)) != 0) {
    printf("FAIL %s: kernel %s, expected %s...\n", label, info.kernel, want);
    ++fails;
  }
  /* Reference in float64 from the same bf16 inputs. The bound: the output's bf16 rounding plus
     the bf16 rounding of each weight (P is rounded for the product), relative to the largest
     |v| a row mixes; errors of a wrong pair layout or a lost tail are of the order of |v|. */
  const double scale = 1.0 / sqrt((double)c->d);
  double worst = 0.0, worst_lse = 0.0;
  for (int64_t h = 0; h < c->hq; ++h) {
    const int64_t hk = h / (c->hq / c->hk);
    for (int64_t i = 0; i < c->sq; ++i) {
      /* bottom-right aligned causal mask, FlashAttention's convention */
      const int64_t last = c->causal ? i + c->sk - c->sq : c->sk - 1;
      double mx = -INFINITY, l = 0.0;
      for (int64_t j = 0; j <= last && j < c->sk; ++j) {
        double s = 0.0;
        for (int64_t e = 0; e < c->d; ++e)
          s += (double)fa_bf16_to_f32(q[(i * c->hq + h) * c->d + e]) *
               fa_bf16_to_f32(k[(j * c->hk + hk) * c->d + e]);
        w[j] = s * scale;
        if (w[j] > mx) mx = w[j];
      }
      if (last < 0) continue; /* a row that sees no key: not in these shapes */
      for (int64_t j = 0; j <= last && j < c->sk; ++j) l += (w[j] = exp(w[j] - mx));
      for (int64_t e = 0; e < c->d; ++e) {
        double ref = 0.0, vmax = 0.0;
        for (int64_t j = 0; j <= last && j < c->sk; ++j) {
          double vv = fa_bf16_to_f32(v[(j * c->hk + hk) * c->d + e]);
          ref += w[j] * vv;
          if (fabs(vv) > vmax) vmax = fabs(vv);
        }
        ref /= l;
        double got = fa_bf16_to_f32(o[(i * c->hq + h) * c->d + e]);
        double err = fabs(got - ref) / (fabs(ref) * 0x1p-8 + vmax * 0x1p-7);
        if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
      }
      double lerr = fabs(lse[h * c->sq + i] - (mx + log(l))) / (1e-5 * (1.0 + fabs(mx)));
      if (isnan(lerr) || lerr > worst_lse) worst_lse = isnan(lerr) ? INFINITY : lerr;
    }
  }
  /* err is in units of the bound: <= 1 passes. */
  if (!(worst <= 1.0) || !(worst_lse <= 1.0)) {
    printf("FAIL %s (%s): output error %.2f, lse error %.2f of the bound\n", label, info.kernel,
           worst, worst_lse);
    ++fails;
  } else {
    printf("ok   %s (%s): output error %.2f, lse error %.2f of the bound\n", label, info.kernel,
           worst, worst_lse);
  }
done:
  free(q), free(k), free(v), free(o), free(lse), free(w);
  return fails;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--isa") == 0 && strcmp(argv[2], "amx") == 0) {
    isa = "amx";
  } else if (argc != 1) {
    fprintf(stderr, "usage: %s [--isa amx]\n", argv[0]);
    return 2;
  }
  if (!cpu_has_avx512bf16()) {
    printf(
        "skip: this CPU has no AVX512-BF16 (CPUID leaf 7.1 EAX bit 5), so FA_CPU_ISA=%s gives "
        "the avx512 build (or, for amx, a refusal) and there is nothing of its own to test\n",
        isa);
    return 77;
  }
  setenv("FA_CPU_ISA", isa, 1); /* before the plugin chooses (once per process) */
  if (strcmp(isa, "amx") == 0 && !cpu_amx_in_use()) {
    printf("FAIL: FA_CPU_ISA=amx but the CPU backend's device line does not say AMX is in use\n");
    return 1;
  }
  const shape cases[] = {
      {200, 301, 4, 2, 64, 0},  /* ragged last key tile, odd key count, GQA */
      {257, 257, 2, 2, 128, 1}, /* causal, ragged query and key tiles */
      {33, 77, 3, 1, 40, 0},    /* head dim not a multiple of 16: masked vectors */
      {17, 19, 2, 2, 8, 1},     /* tiny, odd key count */
      {9, 31, 2, 1, 7, 0},      /* odd head dim: the fp32 kernels, named avx512 */
      {47, 95, 1, 1, 96, 0},    /* 48 pairs (3 whole steps), 47 rows: a 15-row second block */
      {130, 300, 2, 1, 32, 1},  /* a 2-row last block, 16 pairs exactly, causal */
  };
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), isa));
  int fails = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) fails += run_case(&cases[i], &rng);
  printf("test_cpu_bf16dp: %d failed (seed %llu)\n", fails, (unsigned long long)tu_run_seed());
  return fails ? 1 : 0;
}
