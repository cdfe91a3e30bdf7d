/*
 * options.c: fa-bench's command line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_bench.h"
#include "tools/cli_util.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: fa-bench [options]\n"
      "  --backend NAME     auto (default), cpu, cuda, hip, opencl\n"
      "  --dtype T          bf16 (default), f16, f32; f8e4m3 or f8e5m2: FP8 q, k, v with\n"
      "                     descales of 1 per (batch, head) and a bf16 output (forward only:\n"
      "                     --pass defaults to fwd; not with --decode, --varlen or\n"
      "                     --quantize)\n"
      "  --hdims LIST       head dims, default 64,128,256 (host memory: 64,128)\n"
      "  --seqlens LIST     default 512,1024,2048,4096,8192,16384 (host memory:\n"
      "                     256,512,1024,2048)\n"
      "  --causal LIST      0,1 (default): non-causal and causal\n"
      "  --tokens N         batch * seqlen, default 16384 (host memory: 2048;\n"
      "                     batch = max(1, N / seqlen))\n"
      "  --hidden N         heads * head_dim, default 2048 (host memory: 1024;\n"
      "                     heads = max(1, N / head_dim))\n"
      "  --batch N          fixed batch (overrides --tokens)\n"
      "  --heads N          fixed heads (overrides --hidden)\n"
      "  --pass LIST        fwd,bwd (default) or one of them\n"
      "  --warmup N         untimed calls per shape, default 1\n"
      "  --iters N          timed calls per shape, default 5 (the median is reported)\n"
      "  --json FILE        also write every measurement as JSON (the sweep only)\n"
      "  --window N         sliding window: window_left = N, window_right = 0, causal\n"
      "  --decode           decode: 1 query token per sequence over a KV cache of --seqlens\n"
      "                     keys (fa_forward_kvcache, no new tokens); tokens/s, GB/s of K+V\n"
      "                     and GFLOP/s (4*B*H*keys*D)\n"
      "  --varlen           varlen: for each --seqlens S, packed sequences (cu_seqlens) of\n"
      "                     lengths between min(100, S) and S filling --tokens, against the\n"
      "                     same sequences padded to S; FLOPs over the real lengths\n"
      "  --quantize         quantize: fa_quantize of x [batch, S, heads, D] in --dtype to\n"
      "                     f8e4m3 with descales as --scales says, rotate 0 and 1 (seed 1234;\n"
      "                     D not a power of two: the rotate row is refused), GB/s of x read\n"
      "                     + y and descales written, against a device-to-device copy of\n"
      "                     x (its GB/s: 2 x x's bytes); --tokens/--hidden or --batch/--heads\n"
      "                     give the shape as in the sweep\n"
      "  --scales L         quantize: the descales, block (per 128 rows of each batch and\n"
      "                     head, [batch, heads, ceil(S/128)], the default), head (per batch\n"
      "                     and head, [batch, heads, 1]) or tensor ([1, 1, 1])\n"
      "  --kv-heads N       decode: KV heads (default: --heads); heads must be a multiple\n"
      "  --page-size N      decode: the cache in pages of N keys through a shuffled block\n"
      "                     table (params.block_table; 0 = a dense cache, the default)\n"
      "  --kv-layout L      decode: the caches' memory, token ([.., keys, kv-heads, hdim], the\n"
      "                     default) or head ([.., kv-heads, keys, hdim]: each head's keys\n"
      "                     adjacent, passed as the transposed view)\n"
      "  --splits N         params.num_splits (0 = the backend chooses, 1 = no split)\n"
      "  --full             FlashAttention's sweep (the defaults above) also in host memory,\n"
      "                     where the sweep otherwise takes the CPU-sized defaults: the full\n"
      "                     one takes hours on a few CPU cores\n"
      "  --list             print the sweep's shapes and their GFLOP, run nothing\n"
      "  --progress S       'shape i/N, elapsed, ETA' on stderr after each shape once the\n"
      "                     sweep has run S seconds (default 10; -1: never)\n"
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

static void defaults(options *o) {
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
  o->progress_s = 10;
}

int64_t shape_batch(const options *o, int64_t s) {
  if (o->batch) return o->batch;
  return o->tokens / s > 0 ? o->tokens / s : 1;
}

int64_t shape_heads(const options *o, int64_t d) {
  if (o->heads) return o->heads;
  return o->hidden / d > 0 ? o->hidden / d : 1;
}

int apply_host_defaults(options *o) {
  if (o->full || o->decode) return 0;
  int changed = 0;
  if (!(o->given & GIVEN_HDIMS)) {
    static const int64_t hd[] = {64, 128};
    memcpy(o->hdims, hd, sizeof hd);
    o->n_hdims = 2;
    changed = 1;
  }
  if (!(o->given & GIVEN_SEQLENS)) {
    static const int64_t sl[] = {256, 512, 1024, 2048};
    memcpy(o->seqlens, sl, sizeof sl);
    o->n_seqlens = 4;
    changed = 1;
  }
  if (!(o->given & GIVEN_TOKENS) && !o->batch) {
    o->tokens = 2048;
    changed = 1;
  }
  if (!(o->given & GIVEN_HIDDEN) && !o->heads) {
    o->hidden = 1024;
    changed = 1;
  }
  return changed;
}

/* One option with its value v; 0 when the value is bad, -1 when the option is unknown. */
static int parse_one(options *o, const char *a, const char *v) {
  int64_t x = 0;
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
    else if (!strcmp(v, "f8e4m3") || !strcmp(v, "e4m3"))
      o->dtype = FA_F8E4M3;
    else if (!strcmp(v, "f8e5m2") || !strcmp(v, "e5m2"))
      o->dtype = FA_F8E5M2;
    else
      ok = 0;
  } else if (!strcmp(a, "--hdims")) {
    ok = parse_list(v, 1, 1024, o->hdims, MAX_LIST, &o->n_hdims);
    o->given |= GIVEN_HDIMS;
  } else if (!strcmp(a, "--seqlens")) {
    ok = parse_list(v, 1, 1 << 22, o->seqlens, MAX_LIST, &o->n_seqlens);
    o->given |= GIVEN_SEQLENS;
  } else if (!strcmp(a, "--causal")) {
    ok = parse_list(v, 0, 1, o->causal, 2, &o->n_causal);
  } else if (!strcmp(a, "--tokens")) {
    ok = cli_parse_i64(v, 1, INT64_C(1) << 32, &o->tokens);
    o->given |= GIVEN_TOKENS;
  } else if (!strcmp(a, "--hidden")) {
    ok = cli_parse_i64(v, 1, 1 << 20, &o->hidden);
    o->given |= GIVEN_HIDDEN;
  } else if (!strcmp(a, "--batch")) {
    ok = cli_parse_i64(v, 1, 1 << 20, &o->batch);
  } else if (!strcmp(a, "--heads")) {
    ok = cli_parse_i64(v, 1, 1 << 16, &o->heads);
  } else if (!strcmp(a, "--pass")) {
    o->fwd = strstr(v, "fwd") != NULL;
    o->bwd = strstr(v, "bwd") != NULL;
    ok = o->fwd || o->bwd;
    o->given |= GIVEN_PASS;
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
  } else if (!strcmp(a, "--page-size")) {
    ok = cli_parse_i64(v, 0, 1 << 20, &o->page_size);
  } else if (!strcmp(a, "--kv-layout")) {
    ok = !strcmp(v, "token") || !strcmp(v, "head");
    o->kv_head_major = !strcmp(v, "head");
  } else if (!strcmp(a, "--scales")) {
    ok = !strcmp(v, "block") || !strcmp(v, "head") || !strcmp(v, "tensor");
    o->quant_scales = !strcmp(v, "head")     ? QUANT_HEAD
                      : !strcmp(v, "tensor") ? QUANT_TENSOR
                                             : QUANT_BLOCK;
    o->given |= GIVEN_SCALES;
  } else if (!strcmp(a, "--splits")) {
    ok = cli_parse_i64(v, 0, 1024, &x);
    o->splits = (int)x;
  } else if (!strcmp(a, "--progress")) {
    ok = cli_parse_i64(v, -1, 1000000, &x);
    o->progress_s = (int)x;
  } else {
    return -1;
  }
  return ok;
}

int parse_args(int argc, char **argv, options *o) {
  defaults(o);
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    int *flag = !strcmp(a, "--decode")     ? &o->decode
                : !strcmp(a, "--varlen")   ? &o->varlen
                : !strcmp(a, "--quantize") ? &o->quantize
                : !strcmp(a, "--full")     ? &o->full
                : !strcmp(a, "--list")     ? &o->list
                                           : NULL;
    if (flag) {
      *flag = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "fa-bench: %s needs a value\n", a);
      return 0;
    }
    ++i;
    int ok = parse_one(o, a, v);
    if (ok < 0) {
      fprintf(stderr, "fa-bench: unknown option %s\n", a);
      usage(stderr);
      return 0;
    }
    if (!ok) {
      fprintf(stderr, "fa-bench: bad value for %s: '%s'\n", a, v);
      return 0;
    }
  }
  if (o->list && (o->decode || o->varlen || o->quantize)) {
    fprintf(stderr,
            "fa-bench: --list lists the sweep's shapes; not with --decode, --varlen or "
            "--quantize\n");
    return 0;
  }
  if ((o->given & GIVEN_SCALES) && !o->quantize) {
    fprintf(stderr, "fa-bench: --scales sets fa_quantize's descales: only with --quantize\n");
    return 0;
  }
  if (o->decode + o->varlen + o->quantize > 1) {
    fprintf(stderr, "fa-bench: --decode, --varlen and --quantize are separate modes\n");
    return 0;
  }
  if (o->quantize && (o->dtype == FA_F8E4M3 || o->dtype == FA_F8E5M2)) {
    /* --dtype is x's: the input fa_quantize turns into FP8 */
    fprintf(stderr,
            "fa-bench: --quantize takes x in bf16, f16 or f32 (--dtype) and writes f8e4m3: "
            "--dtype %s is an FP8 type, not an input of fa_quantize\n",
            fa_dtype_name(o->dtype));
    return 0;
  }
  if (o->dtype == FA_F8E4M3 || o->dtype == FA_F8E5M2) {
    /* FP8 inputs are dense and forward-only (docs/fp8.md) */
    if (o->decode || o->varlen || (o->bwd && (o->given & GIVEN_PASS))) {
      fprintf(stderr,
              "fa-bench: --dtype %s is a dense forward: not with --decode, --varlen or "
              "--pass bwd\n",
              fa_dtype_name(o->dtype));
      return 0;
    }
    o->fwd = 1;
    o->bwd = 0;
  }
  return 1;
}
