/*
 * sweep.c: the training sweep, as in FlashAttention's benchmarks: batch * seqlen = --tokens,
 * heads * head_dim = --hidden, every head dim, length and mask of the lists; the forward and the
 * backward of each shape, one table row per shape (the kernel and tile of each pass), and a
 * progress line with an estimate of the time left on stderr once the sweep runs long (--progress).
 */
#include <stdio.h>
#include <string.h>

#include "fa_bench.h"
#include "tools/cli_util.h"

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
    printf("%10.3f %8.4f %8.3f %7.1f | ", m->ms_median, m->tflops, m->b2b_ms, m->host_us);
  else
    printf("%10s %8s %8s %7s | ", "-", "-", "-", "-");
}

/* One shape of the sweep: its place in the lists, its batch and heads, its FLOPs. */
typedef struct shape {
  int causal;
  int64_t d, s, b, h;
  double fwd_flops, bwd_flops;
} shape;

static shape shape_at(const options *o, int index) {
  int si = index % o->n_seqlens, hi = index / o->n_seqlens % o->n_hdims;
  int ci = index / (o->n_seqlens * o->n_hdims);
  shape x;
  x.causal = (int)o->causal[ci];
  x.d = o->hdims[hi];
  x.s = o->seqlens[si];
  x.b = shape_batch(o, x.s);
  x.h = shape_heads(o, x.d);
  x.fwd_flops =
      4.0 * (double)x.b * (double)x.h * visible_pairs(x.s, x.causal, o->window) * (double)x.d;
  x.bwd_flops = 2.5 * x.fwd_flops;
  return x;
}

/* The FLOPs a shape's calls do, warmup included: what the progress estimate weighs shapes by. */
static double shape_work(const options *o, const shape *x) {
  double calls = (double)(o->warmup + o->iters);
  return (o->fwd ? calls : 1.0) * x->fwd_flops + (o->bwd ? calls * x->bwd_flops : 0.0);
}

static void format_duration(double s, char *buf, size_t n) {
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* "shape i/N, elapsed, ETA" on stderr once the sweep has run o->progress_s seconds; the ETA scales
   the time so far by the FLOPs still to do. */
static void print_progress(const options *o, int done, int total, double elapsed_s,
                           double work_done, double work_total) {
  if (o->progress_s < 0 || elapsed_s < (double)o->progress_s || done >= total) return;
  char el[32], eta[32];
  format_duration(elapsed_s, el, sizeof el);
  format_duration(work_done > 0 ? elapsed_s * (work_total - work_done) / work_done : 0.0, eta,
                  sizeof eta);
  fprintf(stderr, "fa-bench: shape %d/%d done, elapsed %s, ETA %s\n", done, total, el, eta);
}

/* --list: the shapes and their FLOPs, nothing run. */
static int list_shapes(const options *o, int total) {
  printf("\n%-6s %5s %6s %5s %5s | %10s %10s\n", "causal", "hdim", "seqlen", "batch", "heads",
         "fwd GFLOP", "bwd GFLOP");
  double sum = 0.0;
  for (int i = 0; i < total; ++i) {
    shape x = shape_at(o, i);
    printf("%-6d %5lld %6lld %5lld %5lld | %10.2f %10.2f\n", x.causal, (long long)x.d,
           (long long)x.s, (long long)x.b, (long long)x.h, o->fwd ? x.fwd_flops * 1e-9 : 0.0,
           o->bwd ? x.bwd_flops * 1e-9 : 0.0);
    sum += shape_work(o, &x);
  }
  printf("\n%d shapes, %.1f TFLOP in all (%d warmup + %d timed calls per pass)\n", total,
         sum * 1e-12, o->warmup, o->iters);
  return 0;
}

int run_sweep(const options *o) {
  int total = o->n_causal * o->n_hdims * o->n_seqlens;
  if (o->list) return list_shapes(o, total);
  FILE *json = NULL;
  if (o->json && !(json = json_begin(o))) return 2;
  int first_record = 1, failures = 0, runs = 0;
  double work_total = 0.0, work_done = 0.0, t_start = cli_now_ms();
  for (int i = 0; i < total; ++i) {
    shape x = shape_at(o, i);
    work_total += shape_work(o, &x);
  }

  printf("\n%-6s %5s %6s %5s %5s | %10s %8s %8s %7s | %10s %8s %8s %7s | %s\n", "causal", "hdim",
         "seqlen", "batch", "heads", "fwd ms", "TFLOP/s", "b2b ms", "host us", "bwd ms", "TFLOP/s",
         "b2b ms", "host us", "kernel (fwd; bwd), tile (fwd; bwd)");
  for (int i = 0; i < total; ++i) {
    shape x = shape_at(o, i);
    int causal = x.causal;
    int64_t d = x.d, s = x.s, b = x.b, h = x.h;
    printf("%-6d %5lld %6lld %5lld %5lld | ", causal, (long long)d, (long long)s, (long long)b,
           (long long)h);
    fflush(stdout);
    problem p;
    if (!make_problem(&p, o, b, s, h, d, causal)) {
      printf("%s for this shape\n", g_mem_err);
      ++failures;
      work_done += shape_work(o, &x);
      continue;
    }
    measurement mf, mb;
    memset(&mf, 0, sizeof mf);
    memset(&mb, 0, sizeof mb);
    /* The backward needs the forward's out and lse, so the forward always runs first. */
    options once = *o; /* backward only: one untimed forward is all it needs */
    once.warmup = 0;
    once.iters = 1;
    measure(&p, 0, o->fwd ? o : &once, x.fwd_flops, &mf);
    if (o->fwd)
      print_result(&mf);
    else
      printf("%10s %8s %8s %7s | ", "", "", "", "");
    fflush(stdout);
    if (o->bwd && mf.ok) {
      measure(&p, 1, o, x.bwd_flops, &mb);
      print_result(&mb);
    } else {
      printf("%10s %8s %8s %7s | ", "", "", "", "");
    }
    if (mf.ok) {
      printf("%s", mf.info.kernel);
      if (mb.ok) printf("; %s", mb.info.kernel);
      printf(", %dx%d", (int)mf.info.tile_m, (int)mf.info.tile_n);
      if (mb.ok) printf("; %dx%d", (int)mb.info.tile_m, (int)mb.info.tile_n);
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
        json_record(json, first_record, o, b, s, h, d, causal, "fwd", x.fwd_flops, &mf);
        first_record = 0;
      }
      if (o->bwd) {
        if (!mf.ok) snprintf(mb.error, sizeof mb.error, "forward failed: %s", mf.error);
        json_record(json, first_record, o, b, s, h, d, causal, "bwd", x.bwd_flops, &mb);
        first_record = 0;
      }
    }
    free_problem(&p);
    work_done += shape_work(o, &x);
    print_progress(o, i + 1, total, (cli_now_ms() - t_start) * 1e-3, work_done, work_total);
  }
  if (json && json_end(json) != 0) {
    fprintf(stderr, "fa-bench: error writing %s\n", o->json);
    return 2;
  }
  printf("\n%d shapes, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}
