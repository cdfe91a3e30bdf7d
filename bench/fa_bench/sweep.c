/*
 * sweep.c: the training sweep, as in FlashAttention's benchmarks: batch * seqlen = --tokens,
 * heads * head_dim = --hidden, every head dim, length and mask of the lists; the forward and the
 * backward of each shape, one table row per shape.
 */
#include <stdio.h>
#include <string.h>

#include "fa_bench.h"

/* Query-key pairs a row sees, summed over the s rows of a square problem: what the FLOPs count. */
static double visible_pairs(int64_t s, int causal, int64_t window) {
  if (window >= 0) {
    double n = 0.0;
    for (int64_t i = 0; i < s; ++i) n += (double)(i + 1 < window + 1 ? i + 1 : window + 1);
    return n;
  }
  return causal ? 0.5 * (double)s * (double)s : (double)s * (double)s;
}

static void print_result(const measurement *m) {
  if (m->ok)
    printf("%10.3f %8.4f | ", m->ms_median, m->tflops);
  else
    printf("%10s %8s | ", "-", "-");
}

int run_sweep(const options *o) {
  FILE *json = NULL;
  if (o->json && !(json = json_begin(o))) return 2;
  int first_record = 1, failures = 0, runs = 0;

  printf("\n%-6s %5s %6s %5s %5s | %10s %8s | %10s %8s | %s\n", "causal", "hdim", "seqlen", "batch",
         "heads", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s", "kernel (fwd; bwd), tile");
  for (int ci = 0; ci < o->n_causal; ++ci)
    for (int hi = 0; hi < o->n_hdims; ++hi)
      for (int si = 0; si < o->n_seqlens; ++si) {
        int causal = (int)o->causal[ci];
        int64_t d = o->hdims[hi], s = o->seqlens[si];
        int64_t b = o->batch ? o->batch : (o->tokens / s > 0 ? o->tokens / s : 1);
        int64_t h = o->heads ? o->heads : (o->hidden / d > 0 ? o->hidden / d : 1);
        double fwd_flops =
            4.0 * (double)b * (double)h * visible_pairs(s, causal, o->window) * (double)d;
        double bwd_flops = 2.5 * fwd_flops;

        printf("%-6d %5lld %6lld %5lld %5lld | ", causal, (long long)d, (long long)s, (long long)b,
               (long long)h);
        fflush(stdout);
        problem p;
        if (!make_problem(&p, o, b, s, h, d, causal)) {
          printf("%s for this shape\n", g_mem_err);
          ++failures;
          continue;
        }
        measurement mf, mb;
        memset(&mf, 0, sizeof mf);
        memset(&mb, 0, sizeof mb);
        /* The backward needs the forward's out and lse, so the forward always runs first. */
        options once = *o; /* backward only: one untimed forward is all it needs */
        once.warmup = 0;
        once.iters = 1;
        measure(&p, 0, o->fwd ? o : &once, fwd_flops, &mf);
        if (o->fwd)
          print_result(&mf);
        else
          printf("%10s %8s | ", "", "");
        fflush(stdout);
        if (o->bwd && mf.ok) {
          measure(&p, 1, o, bwd_flops, &mb);
          print_result(&mb);
        } else {
          printf("%10s %8s | ", "", "");
        }
        if (mf.ok) {
          printf("%s", mf.info.kernel);
          if (mb.ok) printf("; %s", mb.info.kernel);
          printf(", %dx%d", (int)mf.info.tile_m, (int)mf.info.tile_n);
          if (mf.info.fell_back) printf(" (fell back; rejected: %s)", mf.info.rejected);
        }
        if (!mf.ok) printf("forward failed: %s", mf.error);
        if (o->bwd && mf.ok && !mb.ok) printf(" backward failed: %s", mb.error);
        printf("\n");
        fflush(stdout);
        runs += 1;
        failures += !mf.ok || (o->bwd && !mb.ok);
        if (json) {
          if (o->fwd) {
            json_record(json, first_record, o, b, s, h, d, causal, "fwd", fwd_flops, &mf);
            first_record = 0;
          }
          if (o->bwd) {
            if (!mf.ok) snprintf(mb.error, sizeof mb.error, "forward failed: %s", mf.error);
            json_record(json, first_record, o, b, s, h, d, causal, "bwd", bwd_flops, &mb);
            first_record = 0;
          }
        }
        free_problem(&p);
      }
  if (json && json_end(json) != 0) {
    fprintf(stderr, "fa-bench: error writing %s\n", o->json);
    return 2;
  }
  printf("\n%d shapes, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}
