/*
 * fa_bench.c: `fa-bench` times fa_forward and fa_backward over the FlashAttention benchmark sweep
 * and reports TFLOP/s with the convention of DESIGN.md:
 *   forward  FLOPs = 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved when causal
 *   backward FLOPs = 2.5 * forward FLOPs
 * (the two matmuls of the forward are 2*S*S*D each; the backward's five are counted as 2.5x, as the
 * FlashAttention papers do, so numbers compare directly with theirs).
 *
 * The sweep, as in FlashAttention's benchmarks: batch * seqlen = 16k tokens, heads * head_dim =
 * 2048, head_dim 64/128/256, seqlen 512..16k, causal off and on. Every dimension can be narrowed
 * from the command line (a CPU cannot run the full sweep in reasonable time). Each shape is timed
 * `--iters` times after `--warmup` untimed calls; the median is reported. Inputs are random normal
 * values (never zeros: a kernel that skipped work on zeros would look fast).
 *
 * Memory: with --backend cuda the tensors live in CUDA device memory (tools/device_mem: filled on
 * the host, copied in once per shape) and every timed call is bracketed by a device synchronize
 * (fa_* run on params.stream = NULL, the default stream), so a time is the call's whole device
 * work. Every other backend gets host memory, as before (cpu computes on it; hip and opencl are
 * reported with the library's reason).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/math/dtype.h"
#include "flash_attn.h"
#include "tools/cli_util.h"
#include "tools/device_mem.h"

enum { MAX_LIST = 16 };

typedef struct options {
  int32_t backend;
  fa_dtype dtype;
  int64_t tokens, hidden, heads, batch;
  int64_t hdims[MAX_LIST], seqlens[MAX_LIST], causal[2];
  int n_hdims, n_seqlens, n_causal;
  int fwd, bwd;
  int warmup, iters;
  const char *json;
  int64_t window;   /* >= 0: causal sliding window of this many keys to the left; -1: none */
  int decode;       /* decode mode: fa_forward_kvcache, one query token */
  int64_t kv_heads; /* decode: KV heads (0: as many as query heads) */
  int splits;       /* params.num_splits (0: the backend chooses) */
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: fa-bench [options]\n"
          "  --backend NAME     auto (default), cpu, cuda, hip, opencl\n"
          "  --dtype T          bf16 (default), f16, f32\n"
          "  --hdims LIST       head dims, default 64,128,256\n"
          "  --seqlens LIST     default 512,1024,2048,4096,8192,16384\n"
          "  --causal LIST      0,1 (default): non-causal and causal\n"
          "  --tokens N         batch * seqlen, default 16384 (batch = max(1, N / seqlen))\n"
          "  --hidden N         heads * head_dim, default 2048 (heads = max(1, N / head_dim))\n"
          "  --batch N          fixed batch (overrides --tokens)\n"
          "  --heads N          fixed heads (overrides --hidden)\n"
          "  --pass LIST        fwd,bwd (default) or one of them\n"
          "  --warmup N         untimed calls per shape, default 1\n"
          "  --iters N          timed calls per shape, default 5 (the median is reported)\n"
          "  --json FILE        also write every measurement as JSON (not in --decode mode)\n"
          "  --window N         sliding window: window_left = N, window_right = 0, causal\n"
          "  --decode           decode: 1 query token per sequence over a KV cache of --seqlens\n"
          "                     keys (fa_forward_kvcache, no new tokens); tokens/s, GB/s of K+V\n"
          "                     and GFLOP/s (4*B*H*keys*D)\n"
          "  --kv-heads N       decode: KV heads (default: --heads); heads must be a multiple\n"
          "  --splits N         params.num_splits (0 = the backend chooses, 1 = no split)\n"
          "FLOPs: forward 4*B*H*S*S*D (halved when causal), backward 2.5x forward.\n");
}

/* "64,128" -> {64, 128}. */
static int parse_list(const char *s, int64_t lo, int64_t hi, int64_t *out, int cap, int *n) {
  char buf[256];
  if (strlen(s) >= sizeof buf) return 0;
  strcpy(buf, s);
  *n = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (*n >= cap || !cli_parse_i64(tok, lo, hi, &out[*n])) return 0;
    ++*n;
  }
  return *n > 0;
}

static int parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->backend = FA_BACKEND_AUTO;
  o->dtype = FA_BF16;
  o->tokens = 16384;
  o->hidden = 2048;
  static const int64_t hd[] = {64, 128, 256}, sl[] = {512, 1024, 2048, 4096, 8192, 16384};
  memcpy(o->hdims, hd, sizeof hd);
  o->n_hdims = 3;
  memcpy(o->seqlens, sl, sizeof sl);
  o->n_seqlens = 6;
  o->causal[0] = 0;
  o->causal[1] = 1;
  o->n_causal = 2;
  o->fwd = o->bwd = 1;
  o->warmup = 1;
  o->iters = 5;
  o->window = -1;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--decode")) {
      o->decode = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "fa-bench: %s needs a value\n", a);
      return 0;
    }
    ++i;
    int ok = 1;
    if (!strcmp(a, "--backend")) {
      ok = fa_backend_from_name(v, &o->backend) == FA_OK;
    } else if (!strcmp(a, "--dtype")) {
      if (!strcmp(v, "bf16"))
        o->dtype = FA_BF16;
      else if (!strcmp(v, "f16") || !strcmp(v, "fp16"))
        o->dtype = FA_F16;
      else if (!strcmp(v, "f32") || !strcmp(v, "fp32"))
        o->dtype = FA_F32;
      else
        ok = 0;
    } else if (!strcmp(a, "--hdims")) {
      ok = parse_list(v, 1, 1024, o->hdims, MAX_LIST, &o->n_hdims);
    } else if (!strcmp(a, "--seqlens")) {
      ok = parse_list(v, 1, 1 << 22, o->seqlens, MAX_LIST, &o->n_seqlens);
    } else if (!strcmp(a, "--causal")) {
      ok = parse_list(v, 0, 1, o->causal, 2, &o->n_causal);
    } else if (!strcmp(a, "--tokens")) {
      ok = cli_parse_i64(v, 1, INT64_C(1) << 32, &o->tokens);
    } else if (!strcmp(a, "--hidden")) {
      ok = cli_parse_i64(v, 1, 1 << 20, &o->hidden);
    } else if (!strcmp(a, "--batch")) {
      ok = cli_parse_i64(v, 1, 1 << 20, &o->batch);
    } else if (!strcmp(a, "--heads")) {
      ok = cli_parse_i64(v, 1, 1 << 16, &o->heads);
    } else if (!strcmp(a, "--pass")) {
      o->fwd = strstr(v, "fwd") != NULL;
      o->bwd = strstr(v, "bwd") != NULL;
      ok = o->fwd || o->bwd;
    } else if (!strcmp(a, "--warmup")) {
      ok = cli_parse_i64(v, 0, 1000, &x);
      o->warmup = (int)x;
    } else if (!strcmp(a, "--iters")) {
      ok = cli_parse_i64(v, 1, 10000, &x);
      o->iters = (int)x;
    } else if (!strcmp(a, "--json")) {
      o->json = v;
    } else if (!strcmp(a, "--window")) {
      ok = cli_parse_i64(v, 0, INT64_C(1) << 40, &o->window);
    } else if (!strcmp(a, "--kv-heads")) {
      ok = cli_parse_i64(v, 1, 1 << 16, &o->kv_heads);
    } else if (!strcmp(a, "--splits")) {
      ok = cli_parse_i64(v, 0, 1024, &x);
      o->splits = (int)x;
    } else {
      fprintf(stderr, "fa-bench: unknown option %s\n", a);
      usage(stderr);
      return 0;
    }
    if (!ok) {
      fprintf(stderr, "fa-bench: bad value for %s: '%s'\n", a, v);
      return 0;
    }
  }
  return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Tensors, in the memory of the backend being timed
 * ------------------------------------------------------------------------------------------- */

/* Where the tensors live: CUDA device 0 for --backend cuda, the default OpenCL device (tools/
   device_mem's rule, the plugin's) for --backend opencl, else host memory. */
static fa_device g_dev = {FA_DEVICE_CPU, 0};
/* The last memory error (allocation, copy, synchronize), for the row that failed. */
static char g_mem_err[256];

typedef struct buffer {
  fa_tensor t;
  void *mem; /* g_dev's memory (host memory for the CPU) */
} buffer;

static int64_t numel(const fa_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static size_t buffer_bytes(const buffer *b) {
  return (size_t)numel(&b->t) * fa_dtype_size(b->t.dtype);
}

/* A contiguous tensor of the given shape in g_dev's memory. Returns 0 when that fails (the reason
   in g_mem_err). */
static int buffer_alloc(buffer *b, fa_dtype dtype, int ndim, const int64_t *shape) {
  memset(b, 0, sizeof *b);
  int64_t n = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    b->t.shape[i] = shape[i];
    b->t.strides[i] = n;
    n *= shape[i];
  }
  b->t.dtype = dtype;
  b->t.ndim = ndim;
  if (devmem_alloc(g_dev, (size_t)n * fa_dtype_size(dtype), &b->mem, g_mem_err, sizeof g_mem_err))
    return 0;
  b->t.data = b->mem;
  b->t.device = g_dev;
  return 1;
}

static void buffer_free(buffer *b) {
  if (b->mem) (void)devmem_free(g_dev, b->mem, NULL, 0);
  memset(b, 0, sizeof *b);
}

/* The host memory to fill b's values in: b's own for the CPU, else a staging copy that
   buffer_upload sends and frees. NULL when out of host memory. */
static void *buffer_host(buffer *b) {
  if (g_dev.kind == FA_DEVICE_CPU) return b->mem;
  void *h = malloc(buffer_bytes(b) ? buffer_bytes(b) : 1);
  if (!h)
    snprintf(g_mem_err, sizeof g_mem_err, "out of host memory staging %zu bytes", buffer_bytes(b));
  return h;
}

static int buffer_upload(buffer *b, void *host) {
  if (host == b->mem) return 1;
  int ok =
      devmem_copy_to_device(g_dev, b->mem, host, buffer_bytes(b), g_mem_err, sizeof g_mem_err) == 0;
  free(host);
  return ok;
}

/* xorshift64* and Box-Muller: the bench needs plausible activations, not test-grade randomness. */
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static double rng_unit(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}

static float rng_normal(void) {
  double u1 = rng_unit(), u2 = rng_unit();
  if (u1 < 1e-300) u1 = 1e-300;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Standard-normal values, redrawn when they round to zero in the storage dtype; filled on the
   host and copied to the device. Returns 0 on a memory error (g_mem_err). */
static int fill_random(buffer *b) {
  void *mem = buffer_host(b);
  if (!mem) return 0;
  int64_t n = numel(&b->t);
  for (int64_t i = 0; i < n; ++i) {
    for (;;) {
      float x = rng_normal();
      if (b->t.dtype == FA_F32) {
        if (x == 0.0f) continue;
        ((float *)mem)[i] = x;
      } else {
        uint16_t h = b->t.dtype == FA_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
        if ((h & 0x7fffu) == 0) continue;
        ((uint16_t *)mem)[i] = h;
      }
      break;
    }
  }
  return buffer_upload(b, mem);
}

/* ---------------------------------------------------------------------------------------------
 * Timing
 * ------------------------------------------------------------------------------------------- */

typedef struct measurement {
  int ok;
  double ms_median, ms_min, tflops;
  fa_run_info info;
  char error[FA_REASON_LEN + 64];
} measurement;

typedef struct problem {
  buffer q, k, v, out, lse, dout, dq, dk, dv;
  fa_params params;
} problem;

static fa_status call(problem *p, int bwd, fa_run_info *info) {
  if (!bwd) return fa_forward(&p->params, &p->q.t, &p->k.t, &p->v.t, &p->out.t, &p->lse.t, info);
  /* --splits is a forward (decode) knob: the backward is left to the backend's choice. */
  fa_params bp = p->params;
  bp.num_splits = 0;
  return fa_backward(&bp, &p->q.t, &p->k.t, &p->v.t, &p->out.t, &p->lse.t, &p->dout.t, &p->dq.t,
                     &p->dk.t, &p->dv.t, info);
}

static void measure(problem *p, int bwd, const options *o, double flops, measurement *m) {
  memset(m, 0, sizeof *m);
  fa_run_info_init(&m->info);
  double *ms = malloc(sizeof(double) * (size_t)o->iters);
  if (!ms) {
    snprintf(m->error, sizeof m->error, "out of memory");
    return;
  }
  for (int i = 0; i < o->warmup + o->iters; ++i) {
    /* A device's queue is drained before the clock starts and after the call (no-ops on the
       host), so the time is the call's whole work. */
    int synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
    double t0 = cli_now_ms();
    fa_status st = synced ? call(p, bwd, &m->info) : FA_ERR_BACKEND_FAILURE;
    if (st == FA_OK) synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
    double t1 = cli_now_ms();
    if (!synced) {
      snprintf(m->error, sizeof m->error, "device synchronize: %s", g_mem_err);
      free(ms);
      return;
    }
    if (st != FA_OK) {
      snprintf(m->error, sizeof m->error, "%s: %s", fa_status_string(st), fa_last_error());
      free(ms);
      return;
    }
    if (i >= o->warmup) ms[i - o->warmup] = t1 - t0;
  }
  qsort(ms, (size_t)o->iters, sizeof ms[0], cli_cmp_double);
  m->ok = 1;
  m->ms_min = ms[0];
  m->ms_median = o->iters % 2 ? ms[o->iters / 2] : 0.5 * (ms[o->iters / 2 - 1] + ms[o->iters / 2]);
  m->tflops = flops / (m->ms_median * 1e-3) / 1e12;
  free(ms);
}

/* ---------------------------------------------------------------------------------------------
 * JSON
 * ------------------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void json_record(FILE *f, int first, const options *o, int64_t batch, int64_t seqlen,
                        int64_t heads, int64_t hdim, int causal, const char *pass, double flops,
                        const measurement *m) {
  fprintf(f, "%s\n    {\"pass\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, \"seqlen\": %lld, ",
          first ? "" : ",", pass, fa_dtype_name(o->dtype), (long long)batch, (long long)seqlen);
  fprintf(f, "\"heads\": %lld, \"head_dim\": %lld, \"causal\": %d, \"flops\": %.6g, ",
          (long long)heads, (long long)hdim, causal, flops);
  fprintf(f, "\"warmup\": %d, \"iters\": %d, ", o->warmup, o->iters);
  if (m->ok) {
    fprintf(f, "\"ok\": true, \"ms_median\": %.6g, \"ms_min\": %.6g, \"tflops\": %.6g, ",
            m->ms_median, m->ms_min, m->tflops);
    fprintf(f, "\"backend\": ");
    json_string(f, m->info.backend_name);
    fprintf(f, ", \"kernel\": ");
    json_string(f, m->info.kernel);
    fprintf(f, ", \"tile_m\": %d, \"tile_n\": %d, \"fell_back\": %d, \"rejected\": ",
            (int)m->info.tile_m, (int)m->info.tile_n, (int)m->info.fell_back);
    json_string(f, m->info.rejected);
    fprintf(f, "}");
  } else {
    fprintf(f, "\"ok\": false, \"error\": ");
    json_string(f, m->error);
    fprintf(f, "}");
  }
}

/* ---------------------------------------------------------------------------------------------
 * The sweep
 * ------------------------------------------------------------------------------------------- */

static void free_problem(problem *p) {
  buffer *all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) buffer_free(all[i]);
}

static int make_problem(problem *p, const options *o, int64_t b, int64_t s, int64_t h, int64_t d,
                        int causal) {
  memset(p, 0, sizeof *p);
  int64_t e4[4] = {b, s, h, d}, e3[3] = {b, h, s};
  int ok = buffer_alloc(&p->q, o->dtype, 4, e4) && buffer_alloc(&p->k, o->dtype, 4, e4) &&
           buffer_alloc(&p->v, o->dtype, 4, e4) && buffer_alloc(&p->out, o->dtype, 4, e4) &&
           buffer_alloc(&p->lse, FA_F32, 3, e3);
  if (ok && o->bwd)
    ok = buffer_alloc(&p->dout, o->dtype, 4, e4) && buffer_alloc(&p->dq, o->dtype, 4, e4) &&
         buffer_alloc(&p->dk, o->dtype, 4, e4) && buffer_alloc(&p->dv, o->dtype, 4, e4);
  ok = ok && fill_random(&p->q) && fill_random(&p->k) && fill_random(&p->v) &&
       (!o->bwd || fill_random(&p->dout));
  if (!ok) {
    free_problem(p);
    return 0;
  }
  fa_params_init(&p->params);
  p->params.causal = causal;
  p->params.backend = o->backend;
  /* A named backend is what is being measured: never let the library time another one instead. */
  p->params.strict = o->backend != FA_BACKEND_AUTO;
  p->params.return_lse = 1;
  p->params.num_splits = o->splits;
  if (o->window >= 0) {
    p->params.causal = 1;
    p->params.window_enabled = 1;
    p->params.window_left = o->window;
    p->params.window_right = 0;
  }
  return 1;
}

/* Query-key pairs a row sees, summed over the s rows of a square problem: what the FLOPs count. */
static double visible_pairs(int64_t s, int causal, int64_t window) {
  if (window >= 0) {
    double n = 0.0;
    for (int64_t i = 0; i < s; ++i) n += (double)(i + 1 < window + 1 ? i + 1 : window + 1);
    return n;
  }
  return causal ? 0.5 * (double)s * (double)s : (double)s * (double)s;
}

/* ---------------------------------------------------------------------------------------------
 * Decode: one query token per sequence attends to a full KV cache through fa_forward_kvcache.
 * ------------------------------------------------------------------------------------------- */

static int run_decode(const options *o) {
  int failures = 0, runs = 0;
  printf("\n%5s %7s %5s %9s | %10s %12s %9s %9s | %s\n", "hdim", "cache", "batch", "heads/kv", "ms",
         "tokens/s", "GB/s K+V", "GFLOP/s", "kernel, splits");
  for (int hi = 0; hi < o->n_hdims; ++hi)
    for (int si = 0; si < o->n_seqlens; ++si) {
      const int64_t d = o->hdims[hi], s = o->seqlens[si];
      const int64_t b = o->batch ? o->batch : 1;
      const int64_t h = o->heads ? o->heads : (o->hidden / d > 0 ? o->hidden / d : 1);
      const int64_t hkv = o->kv_heads ? o->kv_heads : h;
      printf("%5lld %7lld %5lld %4lld/%-4lld | ", (long long)d, (long long)s, (long long)b,
             (long long)h, (long long)hkv);
      fflush(stdout);
      ++runs;
      if (h % hkv != 0) {
        printf("--heads %lld is not a multiple of --kv-heads %lld\n", (long long)h, (long long)hkv);
        ++failures;
        continue;
      }
      buffer q, kc, vc, out, lse, cs;
      const int64_t qs[4] = {b, 1, h, d}, ks[4] = {b, s, hkv, d}, ls[3] = {b, h, 1}, bs[1] = {b};
      int ok = buffer_alloc(&q, o->dtype, 4, qs) & buffer_alloc(&kc, o->dtype, 4, ks) &
               buffer_alloc(&vc, o->dtype, 4, ks) & buffer_alloc(&out, o->dtype, 4, qs) &
               buffer_alloc(&lse, FA_F32, 3, ls) & buffer_alloc(&cs, FA_I32, 1, bs);
      ok = ok && fill_random(&q) && fill_random(&kc) && fill_random(&vc);
      int32_t *lens = ok ? (int32_t *)buffer_host(&cs) : NULL;
      if (lens) {
        for (int64_t i = 0; i < b; ++i) lens[i] = (int32_t)s;
        ok = buffer_upload(&cs, lens);
      } else {
        ok = 0;
      }
      if (!ok) {
        printf("%s for this shape\n", g_mem_err);
        ++failures;
      } else {
        fa_params params;
        fa_params_init(&params);
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
        kv.cache_seqlens = &cs.t;
        fa_run_info info;
        fa_run_info_init(&info);
        double *ms = malloc(sizeof(double) * (size_t)o->iters);
        fa_status st = ms ? FA_OK : FA_ERR_OUT_OF_MEMORY;
        int synced = 1;
        for (int i = 0; st == FA_OK && synced && i < o->warmup + o->iters; ++i) {
          synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
          double t0 = cli_now_ms();
          if (synced)
            st = fa_forward_kvcache(&params, &q.t, &kc.t, &vc.t, &kv, &out.t, &lse.t, &info);
          if (synced && st == FA_OK) synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
          if (i >= o->warmup) ms[i - o->warmup] = cli_now_ms() - t0;
        }
        if (!synced) {
          printf("failed: device synchronize: %s\n", g_mem_err);
          ++failures;
        } else if (st != FA_OK) {
          printf("failed: %s: %s\n", fa_status_string(st), ms ? fa_last_error() : "");
          ++failures;
        } else {
          qsort(ms, (size_t)o->iters, sizeof ms[0], cli_cmp_double);
          double med =
              o->iters % 2 ? ms[o->iters / 2] : 0.5 * (ms[o->iters / 2 - 1] + ms[o->iters / 2]);
          /* Keys a query reads: the whole cache, or the window's last window + 1. */
          int64_t keys = o->window >= 0 && o->window + 1 < s ? o->window + 1 : s;
          double bytes = (double)b * (double)keys * (double)hkv * 2.0 * (double)d *
                         (double)fa_dtype_size(o->dtype);
          /* 4·B·H·Sq·Sk·D with Sq = 1 (ANCHORS' decode convention): q·k and p·v per key. */
          double flops = 4.0 * (double)b * (double)h * (double)keys * (double)d;
          printf("%10.4f %12.1f %9.2f %9.2f | %s, %d\n", med, (double)b / (med * 1e-3),
                 bytes / (med * 1e-3) / 1e9, flops / (med * 1e-3) / 1e9, info.kernel,
                 (int)info.num_splits);
        }
        free(ms);
      }
      buffer_free(&q);
      buffer_free(&kc);
      buffer_free(&vc);
      buffer_free(&out);
      buffer_free(&lse);
      buffer_free(&cs);
    }
  printf("\n%d shapes, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}

/* What the chosen backend runs on, for the header (devices and arch from fa_backend_info). */
static void print_backend(int32_t id) {
  fa_backend_desc d[8];
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&d[i]);
  int32_t n = 0;
  if (fa_backend_info(d, 8, &n) != FA_OK) return;
  for (int32_t i = 0; i < n && i < 8; ++i)
    if (d[i].id == id || (id == FA_BACKEND_AUTO && d[i].available))
      printf("# %s: %s%s, %s, arch %s\n", d[i].name,
             d[i].available ? "" : "unavailable: ", d[i].available ? "available" : d[i].reason,
             d[i].devices, d[i].arch);
}

/* Whether fa_backend_info reports the backend available; why not into why. */
static int backend_available(int32_t id, char *why, size_t n) {
  fa_backend_desc d[8];
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&d[i]);
  int32_t count = 0;
  if (fa_backend_info(d, 8, &count) != FA_OK) {
    snprintf(why, n, "fa_backend_info failed: %s", fa_last_error());
    return 0;
  }
  for (int32_t i = 0; i < count && i < 8; ++i)
    if (d[i].id == id) {
      snprintf(why, n, "%s", d[i].available ? "" : d[i].reason);
      return d[i].available != 0;
    }
  snprintf(why, n, "not known to this library");
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (!parse_args(argc, argv, &o)) return 2;

  printf("# fa-bench: flashattn-c %s, backend %s, dtype %s, median of %d (after %d warmup)\n",
         fa_version(NULL, NULL, NULL), fa_backend_name(o.backend), fa_dtype_name(o.dtype), o.iters,
         o.warmup);
  /* The CUDA backend computes on CUDA memory: the tensors go there, and the clock waits for the
     device. Everything else keeps host memory. */
  if (o.backend == FA_BACKEND_CUDA) g_dev.kind = FA_DEVICE_CUDA;
  if (o.backend == FA_BACKEND_OPENCL) {
    char why[256];
    if (devmem_default_device(FA_DEVICE_OPENCL, &g_dev, why, sizeof why) != 0) {
      fprintf(stderr, "fa-bench: no OpenCL device: %s\n", why);
      return 1;
    }
  }
  printf(
      "# FLOPs: fwd 4*B*H*S*S*D (x0.5 causal; visible pairs with --window), bwd 2.5x fwd; %s "
      "memory%s\n",
      fa_device_kind_name(g_dev.kind),
      g_dev.kind == FA_DEVICE_CPU ? "" : ", device synchronized around every timed call");
  print_backend(o.backend);
  if (g_dev.kind != FA_DEVICE_CPU) {
    /* Without the backend (or CUDA in this build) every allocation would fail: say why once. */
    char why[FA_REASON_LEN];
    if (!backend_available(o.backend, why, sizeof why)) {
      fprintf(stderr, "fa-bench: backend %s is not available: %s\n", fa_backend_name(o.backend),
              why);
      return 1;
    }
    if (!devmem_supported(g_dev.kind)) {
      void *probe = NULL;
      (void)devmem_alloc(g_dev, 1, &probe, why, sizeof why);
      fprintf(stderr, "fa-bench: %s\n", why);
      return 1;
    }
  }
  if (o.decode) return run_decode(&o);

  FILE *json = NULL;
  if (o.json) {
    json = fopen(o.json, "w");
    if (!json) {
      fprintf(stderr, "fa-bench: cannot write %s: %s\n", o.json, strerror(errno));
      return 2;
    }
    fprintf(json, "{\"tool\": \"fa-bench\", \"version\": \"%s\", \"backend_requested\": \"%s\", ",
            fa_version(NULL, NULL, NULL), fa_backend_name(o.backend));
    fprintf(json, "\"dtype\": \"%s\", \"iters\": %d, \"warmup\": %d, \"results\": [",
            fa_dtype_name(o.dtype), o.iters, o.warmup);
  }
  int first_record = 1, failures = 0, runs = 0;

  printf("\n%-6s %5s %6s %5s %5s | %10s %8s | %10s %8s | %s\n", "causal", "hdim", "seqlen", "batch",
         "heads", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s", "kernel (fwd; bwd), tile");
  for (int ci = 0; ci < o.n_causal; ++ci)
    for (int hi = 0; hi < o.n_hdims; ++hi)
      for (int si = 0; si < o.n_seqlens; ++si) {
        int causal = (int)o.causal[ci];
        int64_t d = o.hdims[hi], s = o.seqlens[si];
        int64_t b = o.batch ? o.batch : (o.tokens / s > 0 ? o.tokens / s : 1);
        int64_t h = o.heads ? o.heads : (o.hidden / d > 0 ? o.hidden / d : 1);
        double fwd_flops =
            4.0 * (double)b * (double)h * visible_pairs(s, causal, o.window) * (double)d;
        double bwd_flops = 2.5 * fwd_flops;

        printf("%-6d %5lld %6lld %5lld %5lld | ", causal, (long long)d, (long long)s, (long long)b,
               (long long)h);
        fflush(stdout);
        problem p;
        if (!make_problem(&p, &o, b, s, h, d, causal)) {
          printf("%s for this shape\n", g_mem_err);
          ++failures;
          continue;
        }
        measurement mf, mb;
        memset(&mf, 0, sizeof mf);
        memset(&mb, 0, sizeof mb);
        /* The backward needs the forward's out and lse, so the forward always runs first. */
        options once = o; /* backward only: one untimed forward is all it needs */
        once.warmup = 0;
        once.iters = 1;
        measure(&p, 0, o.fwd ? &o : &once, fwd_flops, &mf);
        if (o.fwd) {
          if (mf.ok)
            printf("%10.3f %8.4f | ", mf.ms_median, mf.tflops);
          else
            printf("%10s %8s | ", "-", "-");
        } else {
          printf("%10s %8s | ", "", "");
        }
        fflush(stdout);
        if (o.bwd && mf.ok) {
          measure(&p, 1, &o, bwd_flops, &mb);
          if (mb.ok)
            printf("%10.3f %8.4f | ", mb.ms_median, mb.tflops);
          else
            printf("%10s %8s | ", "-", "-");
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
        if (o.bwd && mf.ok && !mb.ok) printf(" backward failed: %s", mb.error);
        printf("\n");
        fflush(stdout);
        runs += 1;
        failures += !mf.ok || (o.bwd && !mb.ok);
        if (json) {
          if (o.fwd) {
            json_record(json, first_record, &o, b, s, h, d, causal, "fwd", fwd_flops, &mf);
            first_record = 0;
          }
          if (o.bwd) {
            if (!mf.ok) snprintf(mb.error, sizeof mb.error, "forward failed: %s", mf.error);
            json_record(json, first_record, &o, b, s, h, d, causal, "bwd", bwd_flops, &mb);
            first_record = 0;
          }
        }
        free_problem(&p);
      }
  if (json) {
    fprintf(json, "\n  ]\n}\n");
    if (fclose(json) != 0) {
      fprintf(stderr, "fa-bench: error writing %s\n", o.json);
      return 2;
    }
  }
  printf("\n%d shapes, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}
