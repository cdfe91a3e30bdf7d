/*
 * fa_bench.h: the pieces of `fa-bench` shared between its files.
 *
 *   options.c  the command line (options, usage)
 *   memory.c   tensors in the memory of the backend being timed, filled with random values
 *   timing.c   one shape's problem and the timed calls of fa_forward / fa_backward
 *   sweep.c    the training sweep (forward and backward over head dims, lengths, masks)
 *   decode.c   decode mode (fa_forward_kvcache, one query token per sequence)
 *   varlen.c   varlen mode (packed sequences of mixed lengths against the same padded)
 *   quantize.c quantize mode (fa_quantize's GB/s, with and without the rotation, against a copy)
 *   json.c     the JSON record of the sweep
 *   main.c     the header lines, where the tensors live, and the choice of mode
 *
 * FLOPs follow the FlashAttention papers: forward 4 * batch * heads * seqlen_q * seqlen_k *
 * head_dim, halved when causal (the exact count of visible pairs with --window); backward 2.5x
 * the forward.
 */
#ifndef FA_BENCH_H
#define FA_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flash_attn.h"

enum { MAX_LIST = 16 };

/* Which shape options the command line set (options.given): the others take their defaults, the
   CPU-sized ones when the tensors live in host memory (apply_host_defaults). */
enum {
  GIVEN_HDIMS = 1,
  GIVEN_SEQLENS = 2,
  GIVEN_TOKENS = 4,
  GIVEN_HIDDEN = 8,
  GIVEN_PASS = 16,
  GIVEN_SCALES = 32
};

typedef struct options {
  int32_t backend;
  fa_dtype dtype;
  int64_t tokens, hidden, heads, batch;
  int64_t hdims[MAX_LIST], seqlens[MAX_LIST], causal[2];
  int n_hdims, n_seqlens, n_causal;
  int fwd, bwd;
  int warmup, iters;
  const char *json;
  int64_t window;    /* >= 0: causal sliding window of this many keys to the left; -1: none */
  int decode;        /* decode mode: fa_forward_kvcache, one query token */
  int varlen;        /* varlen mode: packed sequences of mixed lengths */
  int quantize;      /* quantize mode: fa_quantize to FP8 against a device copy */
  int quant_scales;  /* quantize: QUANT_BLOCK, QUANT_HEAD or QUANT_TENSOR descales */
  int64_t kv_heads;  /* decode: KV heads (0: as many as query heads) */
  int64_t page_size; /* decode: pages of this many keys through a block table (0: dense) */
  int kv_head_major; /* decode: caches [.., kv_heads, keys, hdim] in memory (token-major: 0) */
  int splits;        /* params.num_splits (0: the backend chooses) */
  int given;         /* GIVEN_* bits */
  int full;          /* --full: FlashAttention's GPU sweep whatever the memory */
  int list;          /* --list: print the sweep's shapes and exit */
  int progress_s;    /* progress on stderr once a sweep has run this long (-1: never) */
} options;

/* fa-bench --quantize --scales: a descale per 128 rows of each (batch, head), per (batch, head),
   or one for the tensor. */
enum { QUANT_BLOCK, QUANT_HEAD, QUANT_TENSOR };

/* options.c: fills o from argv; 0 (after a message on stderr) on a bad command line. --help
   prints the usage and exits. */
int parse_args(int argc, char **argv, options *o);
/* For a sweep in host memory without --full: the CPU-sized set for every shape option the command
   line left at its default. Returns whether anything changed. */
int apply_host_defaults(options *o);
/* A shape's batch at sequence length s (--batch, else --tokens / s, at least 1) and its heads at
   head dim d (--heads, else --hidden / d, at least 1). */
int64_t shape_batch(const options *o, int64_t s);
int64_t shape_heads(const options *o, int64_t d);

/* ---- memory.c ---------------------------------------------------------------------------- */

/* Where the tensors live: CUDA device 0 for --backend cuda, the default OpenCL device for
   --backend opencl, else host memory. */
extern fa_device g_dev;
/* The last memory error (allocation, copy, synchronize), for the row that failed. */
extern char g_mem_err[256];

typedef struct buffer {
  fa_tensor t;
  void *mem; /* g_dev's memory (host memory for the CPU) */
} buffer;

/* A contiguous tensor of the given shape in g_dev's memory; 0 when that fails (g_mem_err). */
int buffer_alloc(buffer *b, fa_dtype dtype, int ndim, const int64_t *shape);
void buffer_free(buffer *b);
/* Host memory to fill b's values in: b's own on the CPU, else a staging copy that buffer_upload
   sends and frees. NULL when out of host memory. */
void *buffer_host(buffer *b);
int buffer_upload(buffer *b, void *host);
/* Standard-normal values, redrawn where they round to zero in the storage dtype. */
int fill_random(buffer *b);
/* Every element of a float32 buffer 1 (FP8 descales); 0 on a memory error. */
int fill_ones(buffer *b);

/* ---- timing.c ---------------------------------------------------------------------------- */

typedef struct measurement {
  int ok;
  double ms_median, ms_min, tflops;
  double b2b_ms;  /* per call, o->iters calls back to back (no synchronisation between them) */
  double host_us; /* host time per call issuing them */
  fa_run_info info;
  char error[FA_REASON_LEN + 64];
} measurement;

typedef struct problem {
  buffer q, k, v, out, lse, dout, dq, dk, dv;
  buffer descale[3]; /* FP8 inputs: q's, k's and v's descales [batch, heads, 1] */
  buffer cu;         /* varlen: cu_seqlens of q and k (unused otherwise) */
  fa_params params;
} problem;

/* Tensors of one square shape (and the gradients' when o->bwd) with random inputs, and the call's
   params; 0 on a memory error (g_mem_err). */
int make_problem(problem *p, const options *o, int64_t b, int64_t s, int64_t h, int64_t d,
                 int causal);
void free_problem(problem *p);
/* Times o->iters calls of the forward (bwd 0) or the backward after o->warmup untimed ones. */
void measure(problem *p, int bwd, const options *o, double flops, measurement *m);
/* One API call on ctx's tensors (info may be NULL). */
typedef fa_status (*api_call_fn)(void *ctx, fa_run_info *info);
/* measure() for any call: o->warmup untimed calls, o->iters synchronised ones (median and minimum,
   TFLOP/s of flops), then o->iters back to back (b2b_ms, host_us). */
void measure_calls(api_call_fn call, void *ctx, const options *o, double flops, measurement *m);

/* ---- sweep.c, decode.c, varlen.c, quantize.c: the modes; each returns the exit status ------ */

int run_sweep(const options *o);
int run_decode(const options *o);
int run_varlen(const options *o);
int run_quantize(const options *o);

/* ---- json.c ------------------------------------------------------------------------------ */

FILE *json_begin(const options *o);
void json_record(FILE *f, int first, const options *o, int64_t batch, int64_t seqlen, int64_t heads,
                 int64_t hdim, int causal, const char *pass, double flops, const measurement *m);
/* 0 when the file was written completely. */
int json_end(FILE *f);

#endif /* FA_BENCH_H */
