/*
 * test_cpu_amx_bwd.c: the CPU backend's bf16 backward on AMX-BF16 tiles (backends/cpu/
 * cpu_backward.c's bf16 branch with the amx kernel table, whose products are cpu_amx.c's), run with
 * FA_CPU_ISA=amx. CTest runs it (cpu.amx_bwd_emulated) on the test build of the plugin whose tile
 * instructions are tests/cpu_amx_emu.h's C model; on a machine with AMX it would run on the real
 * plugin as well.
 *
 * Each case draws fresh random inputs, poisons every output, runs fa_forward then fa_backward and
 * compares out, lse, dq, dk and dv element-wise with a float64 reference by the conformance
 * suite's rule (reference.h's ref_check_output: within twice the naive storage-dtype computation's
 * error plus a floor, NaN never, mask-decided elements exact). The run reports must name the amx
 * kernels for bf16 with even head dims, and the avx512 kernels where AMX-BF16 does not run (f16,
 * odd head dims): what ran, not what was asked for.
 *
 * The shapes reach every edge of the tile blocking (32 x 32 outputs, 16 pairs per step) in each of
 * the five products: odd query counts (a padded pair of query rows in dV += Pᵀ·dO and dK += dSᵀ·Q),
 * odd key counts (a padded pair of keys in dQ += dS·K), head dims not multiples of 32 and dv != d
 * (ragged columns and pairs in S = Q·Kᵀ and dP = dO·Vᵀ), GQA (dK and dV summed over a group), the
 * causal mask's partial tiles, and softcap and dropout, which change P and dS before they are
 * rounded. Exits 77 (a skip, with the reason) where AMX does not run.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"
#include "test_cpu_amx.h"

typedef struct bcase {
  int64_t b, sq, sk, hq, hk, d, dv;
  fa_dtype dtype;
  int causal;
  float softcap, dropout;
} bcase;

enum { T_Q, T_K, T_V, T_DOUT, T_OUT, T_LSE, T_DQ, T_DK, T_DV, T_COUNT };

/* The run report's kernel must start with cpu.flash.<isa>.<op>.<dtype>.: amx where the backend's
   rule (cpu_problem.c, bf16dp) puts the products on tiles, else the AVX-512 build it extends. */
static int check_kernel(const char *label, const char *op, const bcase *c, const char *kernel) {
  const int tiles = c->dtype == FA_BF16 && c->d % 2 == 0 && c->dv % 2 == 0;
  char want[64];
  snprintf(want, sizeof want, "cpu.flash.%s.%s.%s.", tiles ? "amx" : "avx512", op,
           tu_dtype_name(c->dtype));
  if (strncmp(kernel, want, strlen(want)) == 0) return 0;
  printf("FAIL %s: %s kernel %s, expected %s...\n", label, op, kernel, want);
  return 1;
}

/* One output against the references; returns 1 when it fails. */
static int check(const char *label, const char *name, const tu_tensor *x, const ref_result *r64,
                 const ref_result *rn, ref_which w, const unsigned char *masked, fa_dtype dtype,
                 char *summary, size_t n) {
  ref_check ck;
  ref_check_output(x, r64, rn, w, masked, dtype, &ck);
  size_t used = strlen(summary);
  snprintf(summary + used, n - used, " %s %.1e/%.1e", name, ck.max_err, ck.tol);
  if (ck.pass) return 0;
  printf(
      "FAIL %s: %s: %s max error %.3e > tolerance %.3e (naive %.3e), worst at %lld: got %.9g, "
      "expected %.9g (%lld broken)\n",
      label, name, ck.why, ck.max_err, ck.tol, ck.naive_err, (long long)ck.worst, ck.worst_got,
      ck.worst_want, (long long)ck.broken);
  return 1;
}

static int run_case(const bcase *c, tu_rng *rng) {
  char label[128];
  snprintf(label, sizeof label, "%s b%lld sq %lld sk %lld h %lldx%lld d %lldx%lld%s%s%s",
           tu_dtype_name(c->dtype), (long long)c->b, (long long)c->sq, (long long)c->sk,
           (long long)c->hq, (long long)c->hk, (long long)c->d, (long long)c->dv,
           c->causal ? " causal" : "", c->softcap > 0.0f ? " softcap" : "",
           c->dropout > 0.0f ? " dropout" : "");
  const int64_t shapes[T_COUNT][4] = {
      {c->b, c->sq, c->hq, c->d},  {c->b, c->sk, c->hk, c->d},  {c->b, c->sk, c->hk, c->dv},
      {c->b, c->sq, c->hq, c->dv}, {c->b, c->sq, c->hq, c->dv}, {c->b, c->hq, c->sq, 0},
      {c->b, c->sq, c->hq, c->d},  {c->b, c->sk, c->hk, c->d},  {c->b, c->sk, c->hk, c->dv}};
  tu_tensor t[T_COUNT];
  memset(t, 0, sizeof t);
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  int fails = 0;
  for (int i = 0; i < T_COUNT; ++i)
    if (tu_alloc(&t[i], i == T_LSE ? FA_F32 : c->dtype, i == T_LSE ? 3 : 4, shapes[i],
                 TU_CONTIGUOUS)) {
      printf("FAIL %s: out of memory\n", label);
      fails = 1;
      goto done;
    }
  for (int i = T_Q; i <= T_DOUT; ++i) tu_fill_random(&t[i], rng);
  for (int i = T_OUT; i < T_COUNT; ++i) tu_poison(&t[i]);

  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_CPU;
  p.causal = c->causal;
  p.softcap = c->softcap;
  p.dropout_p = c->dropout;
  p.dropout_seed = tu_rng_u64(rng);
  fa_run_info fwd, bwd;
  fa_run_info_init(&fwd);
  fa_run_info_init(&bwd);
  fa_status st = fa_forward(&p, &t[T_Q].t, &t[T_K].t, &t[T_V].t, &t[T_OUT].t, &t[T_LSE].t, &fwd);
  if (st == FA_OK)
    st = fa_backward(&p, &t[T_Q].t, &t[T_K].t, &t[T_V].t, &t[T_OUT].t, &t[T_LSE].t, &t[T_DOUT].t,
                     &t[T_DQ].t, &t[T_DK].t, &t[T_DV].t, &bwd);
  if (st != FA_OK) {
    printf("FAIL %s: %s: %s\n", label, fa_status_string(st), fa_last_error());
    fails = 1;
    goto done;
  }
  fails += check_kernel(label, "fwd", c, fwd.kernel);
  fails += check_kernel(label, "bwd", c, bwd.kernel);

  ref_problem rp = {c->b,      c->sq,
                    c->sk,     c->hq,
                    c->hk,     c->d,
                    c->dv,     ref_resolve_scale(0.0f, c->d),
                    c->causal, FA_CAUSAL_BOTTOM_RIGHT};
  ref_ext x;
  memset(&x, 0, sizeof x);
  x.softcap = c->softcap;
  x.dropout_p = c->dropout;
  x.dropout_seed = p.dropout_seed;
  x.dropout_offset = p.dropout_offset;
  if (ref_attention_ext(&rp, &x, REF_F64, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &r64, 0) ||
      ref_attention_ext(&rp, &x, REF_STORAGE, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &rn, 0)) {
    printf("FAIL %s: reference failed\n", label);
    fails = 1;
    goto done;
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w)
    if (!(masked[w] = ref_masked_map_ext(&rp, &x, (ref_which)w))) {
      printf("FAIL %s: out of memory\n", label);
      fails = 1;
      goto done;
    }
  static const char *const names[REF_NUM_OUTPUTS] = {"out", "lse", "dq", "dk", "dv"};
  static const int tensor_of[REF_NUM_OUTPUTS] = {T_OUT, T_LSE, T_DQ, T_DK, T_DV};
  char summary[256] = "";
  int bad = 0;
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w)
    bad += check(label, names[w], &t[tensor_of[w]], &r64, &rn, (ref_which)w, masked[w], c->dtype,
                 summary, sizeof summary);
  printf("%s %s (%s, %s):%s\n", bad ? "FAIL" : "ok  ", label, fwd.kernel, bwd.kernel, summary);
  fails += bad;
done:
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  ref_result_free(&r64);
  ref_result_free(&rn);
  for (int i = 0; i < T_COUNT; ++i) tu_free(&t[i]);
  return fails;
}

int main(void) {
  setenv("FA_CPU_ISA", "amx", 1); /* before the plugin chooses (once per process) */
  if (!cpu_amx_in_use()) {
    printf("skip: FA_CPU_ISA=amx is refused here (the device line above says why)\n");
    return 77;
  }
  const bcase cases[] = {
      /* GQA, 200 query rows (a 72-row second tile), odd key count */
      {1, 200, 301, 4, 2, 64, 64, FA_BF16, 0, 0.0f, 0.0f},
      /* causal partial tiles, a last query tile of 1 row (one padded pair) */
      {1, 257, 257, 2, 2, 128, 128, FA_BF16, 1, 0.0f, 0.0f},
      /* dv != d, 47 rows and 95 keys: ragged everywhere */
      {2, 47, 95, 2, 1, 96, 64, FA_BF16, 0, 0.0f, 0.0f},
      /* head dim 40: a 20-pair reduction (one whole step and 4) and 40 columns */
      {1, 33, 77, 3, 1, 40, 40, FA_BF16, 1, 30.0f, 0.0f},
      /* dropout: P∘Z and dS through the keep mask */
      {1, 64, 130, 2, 1, 32, 32, FA_BF16, 0, 0.0f, 0.17f},
      /* odd head dim and f16: the fp32 kernels, named avx512 */
      {1, 9, 31, 2, 1, 7, 7, FA_BF16, 0, 0.0f, 0.0f},
      {1, 40, 50, 2, 2, 64, 64, FA_F16, 1, 0.0f, 0.0f},
  };
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "cpu_amx_bwd"));
  int fails = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) fails += run_case(&cases[i], &rng);
  printf("test_cpu_amx_bwd: %d failed (seed %llu)\n", fails, (unsigned long long)tu_run_seed());
  return fails ? 1 : 0;
}
