/*
 * fa_demo.c: `fa-demo`, the README's first command. In one run it shows what the library can do
 * on this machine and that it does it right:
 *   1. the backends fa_backend_info() reports (one line each, with the reason when unavailable);
 *   2. one forward and one backward on the best available backend (AUTO, unless --backend) for a
 *      representative shape: bf16, batch 2, seqlen 1024, 8 heads, head_dim 64, causal;
 *   3. out, lse, dq, dk, dv checked element by element against the float64 reference of
 *      tests/reference.h, with the conformance suite's pass rule (error at most twice that of a
 *      naive computation in the same dtype, plus a small floor);
 *   4. the run report (backend, kernel, tile, candidates passed over and why);
 *   5. the speed: median of a few runs, in TFLOP/s counting 4·batch·heads·seqlen²·head_dim for the
 *      forward (half of it when causal) and 2.5 times that for the backward.
 * Exit status: 0 when every check passes, 1 when a check or a call fails, 2 on bad options.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flash_attn.h"
#include "tests/reference.h"
#include "tests/tensor_util.h"
#include "tools/cli_util.h"

typedef struct options {
  fa_dtype dtype;
  int64_t batch, seqlen, heads, head_dim;
  int causal;
  int32_t backend;
  int iters;
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: fa-demo [options]\n"
          "  --dtype T        bf16 (default), f16, f32\n"
          "  --batch N        default 2\n"
          "  --seqlen N       default 1024 (seqlen_q = seqlen_k)\n"
          "  --heads N        default 8\n"
          "  --head-dim N     default 64\n"
          "  --causal 0|1     default 1\n"
          "  --backend NAME   auto (default: the best available), or only cpu, cuda, hip, opencl\n"
          "  --iters N        timed runs for the speed line, default 5\n"
          "Inputs are random (FA_TEST_SEED=N replays a run) and live in host memory.\n");
}

static int parse_args(int argc, char **argv, options *o) {
  o->dtype = FA_BF16;
  o->batch = 2;
  o->seqlen = 1024;
  o->heads = 8;
  o->head_dim = 64;
  o->causal = 1;
  o->backend = FA_BACKEND_AUTO;
  o->iters = 5;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    const char *v = i + 1 < argc ? argv[++i] : NULL;
    int64_t x = 0;
    int ok = v != NULL;
    if (!ok) {
      /* reported below */
    } else if (!strcmp(a, "--dtype")) {
      ok = cli_parse_dtype(v, &o->dtype);
    } else if (!strcmp(a, "--batch")) {
      ok = cli_parse_i64(v, 1, 1 << 16, &o->batch);
    } else if (!strcmp(a, "--seqlen")) {
      ok = cli_parse_i64(v, 1, 1 << 20, &o->seqlen);
    } else if (!strcmp(a, "--heads")) {
      ok = cli_parse_i64(v, 1, 1 << 12, &o->heads);
    } else if (!strcmp(a, "--head-dim")) {
      ok = cli_parse_i64(v, 1, 1024, &o->head_dim);
    } else if (!strcmp(a, "--causal")) {
      ok = cli_parse_i64(v, 0, 1, &x);
      o->causal = (int)x;
    } else if (!strcmp(a, "--backend")) {
      ok = fa_backend_from_name(v, &o->backend) == FA_OK;
    } else if (!strcmp(a, "--iters")) {
      ok = cli_parse_i64(v, 1, 1000, &x);
      o->iters = (int)x;
    } else {
      fprintf(stderr, "fa-demo: unknown option %s\n", a);
      usage(stderr);
      return 0;
    }
    if (!ok) {
      fprintf(stderr, "fa-demo: %s needs a valid value%s%s\n", a, v ? ", not " : "", v ? v : "");
      return 0;
    }
  }
  return 1;
}

/* 1. The backends, one line each. */
static void print_backends(void) {
  fa_backend_desc d[8];
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&d[i]);
  int32_t n = 0;
  fa_status st = fa_backend_info(d, 8, &n);
  if (st != FA_OK) {
    printf("fa_backend_info failed: %s: %s\n", fa_status_string(st), fa_last_error());
    return;
  }
  printf("Backends:\n");
  for (int32_t i = 0; i < n && i < 8; ++i) {
    if (d[i].available)
      printf("  %-7s available: %s; %s; kernels %s; %s\n", d[i].name, d[i].devices, d[i].arch,
             d[i].kernel_families, d[i].dtypes);
    else
      printf("  %-7s unavailable: %s\n", d[i].name, d[i].reason);
  }
}

static void print_report(const char *what, const fa_run_info *info) {
  printf("  %s: backend %s, kernel %s, tile %dx%d, splits %d, workspace %zu bytes%s\n", what,
         info->backend_name, info->kernel, (int)info->tile_m, (int)info->tile_n,
         (int)info->num_splits, info->workspace_bytes,
         info->deterministic ? ", deterministic" : "");
  if (info->rejected[0])
    printf("    %s candidates passed over: %s\n", info->fell_back ? "(fell back)" : "",
           info->rejected);
}

typedef struct demo {
  tu_tensor q, k, v, out, lse, dout, dq, dk, dv;
  fa_params params;
} demo;

static fa_status run_fwd(demo *x, fa_run_info *info) {
  return fa_forward(&x->params, &x->q.t, &x->k.t, &x->v.t, &x->out.t, &x->lse.t, info);
}

static fa_status run_bwd(demo *x, fa_run_info *info) {
  return fa_backward(&x->params, &x->q.t, &x->k.t, &x->v.t, &x->out.t, &x->lse.t, &x->dout.t,
                     &x->dq.t, &x->dk.t, &x->dv.t, info);
}

/* Median wall time of `iters` calls after one warm-up; -1 if a call fails. */
static double time_median(demo *x, int bwd, int iters) {
  double *ms = malloc(sizeof(double) * (size_t)iters);
  if (!ms) return -1.0;
  for (int i = -1; i < iters; ++i) {
    double t0 = cli_now_ms();
    fa_status st = bwd ? run_bwd(x, NULL) : run_fwd(x, NULL);
    double t1 = cli_now_ms();
    if (st != FA_OK) {
      free(ms);
      return -1.0;
    }
    if (i >= 0) ms[i] = t1 - t0;
  }
  qsort(ms, (size_t)iters, sizeof ms[0], cli_cmp_double);
  double med = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
  free(ms);
  return med;
}

static void free_demo(demo *x) {
  tu_tensor *all[] = {&x->q, &x->k, &x->v, &x->out, &x->lse, &x->dout, &x->dq, &x->dk, &x->dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_free(all[i]);
}

int main(int argc, char **argv) {
  options o;
  if (!parse_args(argc, argv, &o)) return 2;

  printf("flashattn-c %s\n", fa_version(NULL, NULL, NULL));
  print_backends();

  const int64_t B = o.batch, S = o.seqlen, H = o.heads, D = o.head_dim;
  printf("\nProblem: %s, batch %lld, seqlen %lld, heads %lld, head_dim %lld, %s, backend %s\n",
         tu_dtype_name(o.dtype), (long long)B, (long long)S, (long long)H, (long long)D,
         o.causal ? "causal" : "not causal", fa_backend_name(o.backend));

  demo x;
  memset(&x, 0, sizeof x);
  int64_t e4[4] = {B, S, H, D}, e3[3] = {B, H, S};
  int ok = !tu_alloc(&x.q, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.k, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.v, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.out, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.lse, FA_F32, 3, e3, TU_CONTIGUOUS) &&
           !tu_alloc(&x.dout, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.dq, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.dk, o.dtype, 4, e4, TU_CONTIGUOUS) &&
           !tu_alloc(&x.dv, o.dtype, 4, e4, TU_CONTIGUOUS);
  if (!ok) {
    printf("out of memory allocating the tensors\n");
    free_demo(&x);
    return 1;
  }
  uint64_t seed = tu_run_seed();
  printf("Inputs: standard normal, seed %llu (FA_TEST_SEED=%llu replays it)\n",
         (unsigned long long)seed, (unsigned long long)seed);
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(seed, "fa-demo"));
  tu_fill_random(&x.q, &rng);
  tu_fill_random(&x.k, &rng);
  tu_fill_random(&x.v, &rng);
  tu_fill_random(&x.dout, &rng);
  /* Outputs start as NaN, so an element the library never wrote fails the check. */
  tu_poison(&x.out);
  tu_poison(&x.lse);
  tu_poison(&x.dq);
  tu_poison(&x.dk);
  tu_poison(&x.dv);

  fa_params_init(&x.params);
  x.params.causal = o.causal;
  x.params.return_lse = 1;
  x.params.backend = o.backend;
  /* A backend named on the command line is the one to demonstrate: refuse rather than quietly
     show another (AUTO keeps the library's normal fallback, reported in the run report). */
  x.params.strict = o.backend != FA_BACKEND_AUTO;

  /* 2. One forward and one backward, with their run reports. */
  printf("\nRun report:\n");
  fa_run_info fwd_info, bwd_info;
  fa_run_info_init(&fwd_info);
  fa_run_info_init(&bwd_info);
  fa_status st = run_fwd(&x, &fwd_info);
  if (st != FA_OK) {
    printf("  forward failed: %s: %s\n", fa_status_string(st), fa_last_error());
    free_demo(&x);
    return 1;
  }
  print_report("forward ", &fwd_info);
  st = run_bwd(&x, &bwd_info);
  if (st != FA_OK) {
    printf("  backward failed: %s: %s\n", fa_status_string(st), fa_last_error());
    free_demo(&x);
    return 1;
  }
  print_report("backward", &bwd_info);

  /* 3. The check against float64, with the naive same-dtype computation setting the tolerance. */
  ref_problem p = {
      B, S, S, H, H, D, D, ref_resolve_scale(0.0f, D), o.causal, FA_CAUSAL_BOTTOM_RIGHT};
  ref_result r64, naive;
  double t0 = cli_now_ms();
  if (ref_attention(&p, REF_F64, &x.q, &x.k, &x.v, &x.dout, &r64, 0) != 0 ||
      ref_attention(&p, REF_STORAGE, &x.q, &x.k, &x.v, &x.dout, &naive, 0) != 0) {
    printf("reference computation failed (out of memory?)\n");
    free_demo(&x);
    return 1;
  }
  printf(
      "\nCheck against the float64 reference (%.1f s to compute it; pass when max error <= "
      "2 x naive %s error + %g):\n",
      (cli_now_ms() - t0) * 1e-3, tu_dtype_name(o.dtype), ref_floor(o.dtype));
  const tu_tensor *got[REF_NUM_OUTPUTS] = {&x.out, &x.lse, &x.dq, &x.dk, &x.dv};
  int all_pass = 1;
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) {
    unsigned char *masked = ref_masked_map(&p, (ref_which)w);
    ref_check c;
    ref_check_output(got[w], &r64, &naive, (ref_which)w, masked, o.dtype, &c);
    free(masked);
    all_pass &= c.pass;
    printf("  %-4s %s  max error %.3g (naive %s: %.3g, tolerance %.3g)", ref_which_name(w),
           c.pass ? "ok  " : "FAIL", c.max_err, tu_dtype_name(o.dtype), c.naive_err, c.tol);
    if (!c.pass && c.worst >= 0) {
      char idx[64];
      printf("\n       %s at %s: got %.6g, want %.6g (%lld broken)", c.why,
             tu_format_index(got[w], c.worst, idx, sizeof idx), c.worst_got, c.worst_want,
             (long long)c.broken);
    }
    printf("\n");
  }
  ref_result_free(&r64);
  ref_result_free(&naive);

  /* 5. Speed. Causal attention does half the work; the backward is counted as 2.5 forwards. */
  double fwd_flops = 4.0 * (double)B * (double)H * (double)S * (double)S * (double)D;
  if (o.causal) fwd_flops *= 0.5;
  double bwd_flops = 2.5 * fwd_flops;
  double fms = time_median(&x, 0, o.iters), bms = time_median(&x, 1, o.iters);
  printf("\nSpeed on %s (median of %d runs):\n", fwd_info.backend_name, o.iters);
  if (fms > 0)
    printf("  forward  %9.3f ms  %8.4f TFLOP/s\n", fms, fwd_flops / (fms * 1e-3) / 1e12);
  else
    printf("  forward  failed: %s\n", fa_last_error());
  if (bms > 0)
    printf("  backward %9.3f ms  %8.4f TFLOP/s\n", bms, bwd_flops / (bms * 1e-3) / 1e12);
  else
    printf("  backward failed: %s\n", fa_last_error());
  printf("  (FLOPs: forward 4*B*H*S*S*D%s, backward 2.5x forward)\n",
         o.causal ? " / 2 for causal" : "");

  printf("\n%s\n", all_pass ? "fa-demo: all checks passed" : "fa-demo: CHECK FAILED");
  free_demo(&x);
  return all_pass && fms > 0 && bms > 0 ? 0 : 1;
}
