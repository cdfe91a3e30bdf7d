/*
 * decode.c: fa-bench --decode. One query token per sequence attends to a full KV cache through
 * fa_forward_kvcache (no new tokens appended): q [batch, 1, heads, hdim], caches [batch, seqlen,
 * kv-heads, hdim] with cache_seqlens = seqlen, or with --page-size P pages [batch * ceil(seqlen /
 * P), P, kv-heads, hdim] reached through a block table whose entries are a random permutation of
 * the pages (no two sequences' pages adjacent by construction); with --kv-layout head the caches'
 * memory is [.., kv-heads, keys, hdim] (a head's keys adjacent), passed as the transposed view.
 * Reported: the median time of a synchronised call, tokens/s (batch / time), GB/s of the K and V a
 * call must read, GFLOP/s counted as 4 * batch * heads * keys * hdim (q.k and p.v for each key of
 * each query head), then the time a call of --iters calls issued back to back (b2b ms, as a
 * decoding loop calls it) and the host time of issuing one (host us).
 */
#include <stdio.h>
#include <stdlib.h>

#include "fa_bench.h"
#include "tools/cli_util.h"
#include "tools/device_mem.h"

typedef struct decode_shape {
  int64_t d, s, b, h, hkv;
} decode_shape;

typedef struct kvcache_call {
  const fa_params *params;
  const fa_kvcache_args *kv;
  buffer *q, *kc, *vc, *out, *lse;
} kvcache_call;

/* No new tokens: the caches are only read, so every call is the same. */
static fa_status call_kvcache(void *ctx, fa_run_info *info) {
  const kvcache_call *c = ctx;
  return fa_forward_kvcache(c->params, &c->q->t, &c->kc->t, &c->vc->t, c->kv, &c->out->t,
                            &c->lse->t, info);
}

/* Times one shape on filled tensors and prints the rest of its row; 1 when it failed. */
static int time_decode(const options *o, const decode_shape *x, buffer *q, buffer *kc, buffer *vc,
                       buffer *out, buffer *lse, buffer *cs, buffer *table) {
  fa_params params;
  fa_params_init(&params);
  if (o->page_size > 0) {
    params.block_table = &table->t;
    params.page_size = o->page_size;
  }
  params.backend = o->backend;
  params.strict = o->backend != FA_BACKEND_AUTO;
  params.num_splits = o->splits;
  if (o->window >= 0) {
    params.causal = 1;
    params.window_enabled = 1;
    params.window_left = o->window;
  }
  fa_kvcache_args kv;
  fa_kvcache_args_init(&kv);
  kv.cache_seqlens = &cs->t;
  kvcache_call c = {&params, &kv, q, kc, vc, out, lse};
  /* Keys a query reads: the whole cache, or the window's last window + 1. */
  const int64_t keys = o->window >= 0 && o->window + 1 < x->s ? o->window + 1 : x->s;
  const double bytes = (double)x->b * (double)keys * (double)x->hkv * 2.0 * (double)x->d *
                       (double)fa_dtype_size(o->dtype);
  /* 4 * B * H * Sq * Sk * D with Sq = 1: q.k and p.v per key. */
  const double flops = 4.0 * (double)x->b * (double)x->h * (double)keys * (double)x->d;
  measurement m;
  measure_calls(call_kvcache, &c, o, flops, &m);
  if (!m.ok) {
    printf("failed: %s\n", m.error);
    return 1;
  }
  const double med = m.ms_median;
  printf("%10.4f %12.1f %9.2f %9.2f %9.4f %8.1f | %s, %d\n", med, (double)x->b / (med * 1e-3),
         bytes / (med * 1e-3) / 1e9, flops / (med * 1e-3) / 1e9, m.b2b_ms, m.host_us, m.info.kernel,
         (int)m.info.num_splits);
  return 0;
}

/* A contiguous [.., kv-heads, keys, hdim] cache as the [.., keys, kv-heads, hdim] view the API
   takes. */
static void transpose_keys_heads(fa_tensor *t) {
  int64_t x = t->shape[1];
  t->shape[1] = t->shape[2];
  t->shape[2] = x;
  x = t->strides[1];
  t->strides[1] = t->strides[2];
  t->strides[2] = x;
}

/* Allocates and fills one shape's tensors, times it, frees them; 1 when it failed. */
static int run_shape(const options *o, const decode_shape *x) {
  buffer q, kc, vc, out, lse, cs, table;
  const int64_t page = o->page_size, pages = page > 0 ? (x->s + page - 1) / page : 0;
  const int64_t qs[4] = {x->b, 1, x->h, x->d};
  const int64_t ks[4] = {page > 0 ? x->b * pages : x->b, page > 0 ? page : x->s, x->hkv, x->d};
  const int64_t ls[3] = {x->b, x->h, 1}, bs[1] = {x->b}, ts[2] = {x->b, pages > 0 ? pages : 1};
  const int64_t hs[4] = {ks[0], ks[2], ks[1], ks[3]};
  const int64_t *mem = o->kv_head_major ? hs : ks;
  int ok = buffer_alloc(&q, o->dtype, 4, qs) & buffer_alloc(&kc, o->dtype, 4, mem) &
           buffer_alloc(&vc, o->dtype, 4, mem) & buffer_alloc(&out, o->dtype, 4, qs) &
           buffer_alloc(&lse, FA_F32, 3, ls) & buffer_alloc(&cs, FA_I32, 1, bs) &
           buffer_alloc(&table, FA_I32, 2, ts);
  ok = ok && fill_random(&q) && fill_random(&kc) && fill_random(&vc);
  if (ok && o->kv_head_major) {
    transpose_keys_heads(&kc.t);
    transpose_keys_heads(&vc.t);
  }
  int32_t *entries = ok && page > 0 ? (int32_t *)buffer_host(&table) : NULL;
  if (entries) { /* a random permutation of the pages (Fisher-Yates, a fixed LCG) */
    const int64_t n = x->b * pages;
    uint64_t r = 0x9E3779B97F4A7C15u;
    for (int64_t i = 0; i < n; ++i) entries[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; --i) {
      r = r * 6364136223846793005u + 1442695040888963407u;
      const int64_t j = (int64_t)((r >> 33) % (uint64_t)(i + 1));
      const int32_t t = entries[i];
      entries[i] = entries[j];
      entries[j] = t;
    }
    ok = buffer_upload(&table, entries);
  } else if (page > 0) {
    ok = 0;
  }
  int32_t *lens = ok ? (int32_t *)buffer_host(&cs) : NULL;
  if (lens) {
    for (int64_t i = 0; i < x->b; ++i) lens[i] = (int32_t)x->s;
    ok = buffer_upload(&cs, lens);
  } else {
    ok = 0;
  }
  int failed;
  if (!ok) {
    printf("%s for this shape\n", g_mem_err);
    failed = 1;
  } else {
    failed = time_decode(o, x, &q, &kc, &vc, &out, &lse, &cs, &table);
  }
  buffer_free(&q);
  buffer_free(&kc);
  buffer_free(&vc);
  buffer_free(&out);
  buffer_free(&lse);
  buffer_free(&cs);
  buffer_free(&table);
  return failed;
}

int run_decode(const options *o) {
  int failures = 0, runs = 0;
  printf("\n%5s %7s %5s %9s | %10s %12s %9s %9s %9s %8s | %s\n", "hdim", "cache", "batch",
         "heads/kv", "ms", "tokens/s", "GB/s K+V", "GFLOP/s", "b2b ms", "host us",
         "kernel, splits");
  for (int hi = 0; hi < o->n_hdims; ++hi)
    for (int si = 0; si < o->n_seqlens; ++si) {
      decode_shape x;
      x.d = o->hdims[hi];
      x.s = o->seqlens[si];
      x.b = o->batch ? o->batch : 1;
      x.h = shape_heads(o, x.d);
      x.hkv = o->kv_heads ? o->kv_heads : x.h;
      printf("%5lld %7lld %5lld %4lld/%-4lld | ", (long long)x.d, (long long)x.s, (long long)x.b,
             (long long)x.h, (long long)x.hkv);
      fflush(stdout);
      ++runs;
      if (x.h % x.hkv != 0) {
        printf("--heads %lld is not a multiple of --kv-heads %lld\n", (long long)x.h,
               (long long)x.hkv);
        ++failures;
        continue;
      }
      failures += run_shape(o, &x);
    }
  printf("\n%d shapes, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}
