/*
 * varlen.c: fa-bench --varlen. Packed sequences of mixed lengths (cu_seqlens), the way a
 * serving engine's prefill batches them: for each --seqlens value S, lengths drawn from a fixed
 * pseudo-random sequence between min(100, S) and S until --tokens are used, q, k and v packed
 * [total, heads, hdim], lse [heads, total]. Each row times the packed forward (and backward where
 * --pass has it and the backend runs it) and the same sequences padded to S in a dense batch,
 * and prints both, with FLOPs counted over the real lengths for both (so the padded row's
 * TFLOP/s is what padding leaves of the device's rate).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_bench.h"
#include "tools/cli_util.h"

enum { MAX_SEQS = 4096 };

/* Lengths in [lo, hi] from a fixed LCG until `tokens` are used (the last one cut to fit, at least
   one sequence); returns how many. */
static int draw_lengths(int64_t lo, int64_t hi, int64_t tokens, int64_t *len) {
  uint64_t r = 0x2545F4914F6CDD1Du;
  int n = 0;
  int64_t used = 0;
  while (n < MAX_SEQS && (n == 0 || used < tokens)) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    int64_t l = lo + (int64_t)((r >> 33) % (uint64_t)(hi - lo + 1));
    if (n > 0 && used + l > tokens) l = tokens - used;
    if (l <= 0) break;
    len[n++] = l;
    used += l;
  }
  return n;
}

/* The packed problem's tensors and params: make_problem's, re-shaped [total, heads, hdim], with
   the cu_seqlens buffer (both sides) in p->cu. 0 on a memory error. */
static int make_packed(problem *p, const options *o, const int64_t *len, int n, int64_t h,
                       int64_t d, int causal) {
  int64_t total = 0, longest = 0;
  for (int i = 0; i < n; ++i) {
    total += len[i];
    if (len[i] > longest) longest = len[i];
  }
  if (!make_problem(p, o, 1, total, h, d, causal)) return 0;
  /* [1, total, h, d] contiguous is [total, h, d]: the same memory, one dimension less. */
  buffer *all[] = {&p->q, &p->k, &p->v, &p->out, &p->dout, &p->dq, &p->dk, &p->dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    fa_tensor *t = &all[i]->t;
    if (!t->data) continue;
    t->ndim = 3;
    for (int k = 0; k < 3; ++k) {
      t->shape[k] = t->shape[k + 1];
      t->strides[k] = t->strides[k + 1];
    }
  }
  fa_tensor *l = &p->lse.t; /* [1, h, total] is [h, total] */
  l->ndim = 2;
  l->shape[0] = h, l->shape[1] = total;
  l->strides[0] = total, l->strides[1] = 1;
  const int64_t cs[1] = {n + 1};
  if (!buffer_alloc(&p->cu, FA_I32, 1, cs)) return 0;
  int32_t *cu = (int32_t *)buffer_host(&p->cu);
  if (!cu) return 0;
  cu[0] = 0;
  for (int i = 0; i < n; ++i) cu[i + 1] = cu[i] + (int32_t)len[i];
  if (!buffer_upload(&p->cu, cu)) return 0;
  p->params.cu_seqlens_q = &p->cu.t;
  p->params.cu_seqlens_k = &p->cu.t;
  p->params.max_seqlen_q = longest;
  p->params.max_seqlen_k = longest;
  return 1;
}

static void print_pass(const measurement *m) {
  if (m->ok)
    printf(" %9.3f %8.3f", m->ms_median, m->tflops);
  else
    printf(" %9s %8s", "-", "-");
}

int run_varlen(const options *o) {
  int failures = 0;
  printf("\n%5s %6s %5s %7s %6s %4s | %9s %8s %9s %8s | %s\n", "hdim", "max", "seqs", "tokens",
         "causal", "pass", "ms", "TFLOP/s", "padded ms", "TFLOP/s", "kernel (packed)");
  for (int hi = 0; hi < o->n_hdims; ++hi)
    for (int si = 0; si < o->n_seqlens; ++si)
      for (int ci = 0; ci < o->n_causal; ++ci) {
        const int64_t d = o->hdims[hi], s = o->seqlens[si];
        const int causal = (int)o->causal[ci];
        const int64_t h = shape_heads(o, d);
        int64_t len[MAX_SEQS];
        const int n = draw_lengths(s < 100 ? s : 100, s, o->tokens, len);
        double pairs = 0.0;
        int64_t total = 0;
        for (int i = 0; i < n; ++i) {
          pairs += causal ? 0.5 * (double)len[i] * (double)len[i] : (double)len[i] * len[i];
          total += len[i];
        }
        const double fwd_flops = 4.0 * (double)h * pairs * (double)d;
        for (int bwd = 0; bwd < 2; ++bwd) {
          if (bwd ? !o->bwd : !o->fwd) continue;
          printf("%5lld %6lld %5d %7lld %6s %4s |", (long long)d, (long long)s, n, (long long)total,
                 causal ? "yes" : "no", bwd ? "bwd" : "fwd");
          fflush(stdout);
          const double flops = bwd ? 2.5 * fwd_flops : fwd_flops;
          measurement packed, padded;
          memset(&packed, 0, sizeof packed);
          memset(&padded, 0, sizeof padded);
          problem p;
          if (make_packed(&p, o, len, n, h, d, causal)) {
            if (bwd) measure(&p, 0, o, fwd_flops, &packed); /* out and lse for the backward */
            if (!bwd || packed.ok) measure(&p, bwd, o, flops, &packed);
          } else {
            snprintf(packed.error, sizeof packed.error, "%s", g_mem_err);
          }
          free_problem(&p);
          if (make_problem(&p, o, n, s, h, d, causal)) {
            if (bwd) measure(&p, 0, o, fwd_flops, &padded);
            if (!bwd || padded.ok) measure(&p, bwd, o, flops, &padded);
          } else {
            snprintf(padded.error, sizeof padded.error, "%s", g_mem_err);
          }
          free_problem(&p);
          print_pass(&packed);
          printf(" ");
          print_pass(&padded);
          if (packed.ok) {
            printf(" | %s\n", packed.info.kernel);
          } else {
            printf(" | failed: %s\n", packed.error);
            ++failures;
          }
        }
      }
  printf("\n%d rows failed\n", failures);
  return failures ? 1 : 0;
}
