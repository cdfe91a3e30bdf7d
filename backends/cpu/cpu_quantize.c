/*
 * cpu_quantize.c: fa_quantize on host memory (docs/fp8.md). Each row (one head's vector of a
 * token) is widened to fp32 and rotated (core/math/hadamard.h) when asked; for FP8 output each
 * descale block's largest finite magnitude is found, then its rows are divided by the descale and
 * rounded (core/math/fp8.h). Two forms:
 *   one pass, where each descale element covers rows of one (batch, head) and a block's rows fit
 *     QUANT_BLOCK_FLOATS: a thread takes a block, keeps its widened (rotated) rows in its scratch,
 *     takes their maximum, then quantizes them from there (x read and rotated once);
 *   two passes otherwise (descales shared across batches or heads, long blocks): the maxima, then
 *     the stores, each row read and rotated in both, no scratch beyond one row a thread.
 * The per-row steps are the kernel build's (cpu_quant_rows.c: vectorised, bit for bit the scalar
 * rule), so both forms give the same bytes.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/fp8.h"
#include "core/math/hadamard.h"
#include "cpu_internal.h"
#include "cpu_tensor.h"

#define QUANT_MAX_DIM 1024 /* FA_MAX_HEAD_DIM, checked by the core */
/* A one-pass item's rows (heads x block rows x head dim) at most: 256 KiB of fp32 a thread,
   within a core's L2 */
#define QUANT_BLOCK_FLOATS (256 * 256)
#define QUANT_GROUP_MAX 64 /* heads a one-pass item takes together */

typedef struct quant_job {
  const fa_quantize_request *req;
  const cpu_kernels *kern;
  int64_t rows; /* tokens per descale block (args.block_rows, or the whole sequence) */
  float norm;
  uint32_t neg[QUANT_MAX_DIM]; /* the rotation's signs: 0 or the sign bit */
} quant_job;

/* Row (b, t, h) of x in fp32, rotated when asked. */
static void load_rotated(const quant_job *j, int64_t b, int64_t t, int64_t h, float *row) {
  const fa_tensor *x = j->req->x;
  cpu_load_row(j->kern, x->dtype, fa_tensor_base(x),
               b * x->strides[0] + t * x->strides[1] + h * x->strides[2], x->strides[3],
               j->req->head_dim, row);
  if (j->req->args->rotate) j->kern->quant_rotate(row, (int)j->req->log2_dim, j->neg, j->norm);
}

/* The descale of a block whose largest finite |value| is amax: amax / the FP8 maximum, or 1 where
   that is 0 (a block of zeros, or a descale that underflows: any value quantizes it alike). */
static float block_descale(const quant_job *j, float amax) {
  const float fmax = j->req->y->dtype == FA_F8E4M3 ? FA_F8E4M3_MAX : FA_F8E5M2_MAX;
  const float scale = amax / fmax;
  return scale > 0.0f ? scale : 1.0f;
}

/* The largest finite |value| of the rows one descale element covers: batches [b0, b1), heads
   [h0, h1), tokens [t0, t1). Parallel over the tokens when `team` (few elements, many rows). */
static float block_amax(const quant_job *j, int64_t b0, int64_t b1, int64_t h0, int64_t h1,
                        int64_t t0, int64_t t1, int team) {
  const int64_t D = j->req->head_dim;
  float amax = 0.0f;
  if (D == 0) return amax; /* rows without elements (x's data may be NULL) */
#pragma omp parallel for collapse(2) reduction(max : amax) schedule(static) if (team)
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = h0; h < h1; ++h) {
        float row[QUANT_MAX_DIM];
        load_rotated(j, b, t, h, row);
        const float a = j->kern->quant_amax(row, D); /* NaN and infinities left out */
        amax = a > amax ? a : amax;
      }
  return amax;
}

static void find_descales(const quant_job *j) {
  const fa_quantize_request *r = j->req;
  const fa_tensor *d = r->descale;
  const int64_t nb = d->shape[0], nh = d->shape[1], nblk = d->shape[2];
  const int64_t rows = j->rows;
  const int64_t n = nb * nh * nblk;
  const int team = n < 4 * (int64_t)omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (!team)
  for (int64_t e = 0; e < n; ++e) {
    const int64_t b = e / (nh * nblk), h = e / nblk % nh, blk = e % nblk;
    const int64_t b0 = nb > 1 ? b : 0, b1 = nb > 1 ? b + 1 : r->batch;
    const int64_t h0 = nh > 1 ? h : 0, h1 = nh > 1 ? h + 1 : r->heads;
    const int64_t t0 = blk * rows, t1 = rows < r->seqlen - t0 ? t0 + rows : r->seqlen;
    *cpu_descale_ptr(d, rows, b, h, t0) =
        block_descale(j, block_amax(j, b0, b1, h0, h1, t0, t1, team));
  }
}

/* Row (b, t, h) into y: FP8 divided by the descale s and rounded where there are descales, else
   the float type as it is. */
static void store_row(const quant_job *j, int64_t b, int64_t t, int64_t h, const float *row,
                      float s) {
  const fa_tensor *y = j->req->y;
  const int64_t D = j->req->head_dim;
  char *base = (char *)fa_tensor_base(y);
  const int64_t off = b * y->strides[0] + t * y->strides[1] + h * y->strides[2];
  if (!j->req->descale) {
    cpu_store_row(y->dtype, base, off, y->strides[3], D, row, 1.0f);
    return;
  }
  uint8_t *out = (uint8_t *)base + off;
  const int e5m2 = y->dtype == FA_F8E5M2;
  if (y->strides[3] == 1) {
    j->kern->quant_fp8(row, D, s, e5m2, out);
  } else {
    uint8_t codes[QUANT_MAX_DIM];
    j->kern->quant_fp8(row, D, s, e5m2, codes);
    for (int64_t c = 0; c < D; ++c) out[c * y->strides[3]] = codes[c];
  }
}

static void store_rows(const quant_job *j) {
  const fa_quantize_request *r = j->req;
  const fa_tensor *d = r->descale;
  const int64_t rows = j->rows;
  if (r->head_dim == 0) return; /* nothing to store (the data may be NULL) */
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < r->batch; ++b)
    for (int64_t t = 0; t < r->seqlen; ++t)
      for (int64_t h = 0; h < r->heads; ++h) {
        float row[QUANT_MAX_DIM];
        load_rotated(j, b, t, h, row);
        store_row(j, b, t, h, row, d ? *cpu_descale_ptr(d, rows, b, h, t) : 1.0f);
      }
}

/* Whether the one pass applies: descales per (batch, head) (batch or heads of 1 included), a
   block's rows within QUANT_BLOCK_FLOATS, something to store. */
static int one_pass_fits(const quant_job *j) {
  const fa_quantize_request *r = j->req;
  const fa_tensor *d = r->descale;
  const int64_t rows = j->rows;
  return d && d->shape[0] == r->batch && d->shape[1] == r->heads && r->head_dim > 0 &&
         rows <= QUANT_BLOCK_FLOATS / r->head_dim;
}

/* The one pass. A thread takes one descale block of tokens for a group of adjacent heads, so that
   it reads each token's rows of the group as one run of memory (token-major x) rather than one
   head's rows far apart; the group's rows stay in the thread's scratch for the stores. */
static fa_status quantize_one_pass(const quant_job *j) {
  const fa_quantize_request *r = j->req;
  const fa_tensor *d = r->descale;
  const int64_t rows = j->rows, D = r->head_dim, nblk = d->shape[2];
  int64_t group = rows > 0 ? QUANT_BLOCK_FLOATS / (rows * D) : 1;
  if (group > QUANT_GROUP_MAX) group = QUANT_GROUP_MAX;
  if (group > r->heads) group = r->heads;
  if (group < 1) group = 1;
  const int64_t groups = (r->heads + group - 1) / group, n = r->batch * nblk * groups;
  const int threads = omp_get_max_threads();
  const size_t per_thread = (size_t)(group * rows * D);
  /* at least one float: a sequence of no tokens still gets its descales of 1 below */
  float *scratch = malloc(((size_t)threads * per_thread + 1) * sizeof(float));
  if (!scratch)
    return fa_core_set_error(FA_ERR_OUT_OF_MEMORY,
                             "cpu.quantize: no memory for %d scratch blocks of %lld floats",
                             threads, (long long)per_thread);
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < n; ++e) {
    float *block = scratch + (size_t)omp_get_thread_num() * per_thread;
    const int64_t b = e / (nblk * groups), blk = e / groups % nblk, h0 = e % groups * group;
    const int64_t g = group < r->heads - h0 ? group : r->heads - h0;
    const int64_t t0 = blk * rows, t1 = rows < r->seqlen - t0 ? t0 + rows : r->seqlen;
    float amax[QUANT_GROUP_MAX] = {0.0f}, s[QUANT_GROUP_MAX];
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t k = 0; k < g; ++k) {
        float *row = block + (k * rows + (t - t0)) * D;
        load_rotated(j, b, t, h0 + k, row);
        const float a = j->kern->quant_amax(row, D); /* NaN and infinities left out */
        amax[k] = a > amax[k] ? a : amax[k];
      }
    for (int64_t k = 0; k < g; ++k) {
      s[k] = block_descale(j, amax[k]);
      *cpu_descale_ptr(d, rows, b, h0 + k, t0) = s[k];
    }
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t k = 0; k < g; ++k)
        store_row(j, b, t, h0 + k, block + (k * rows + (t - t0)) * D, s[k]);
  }
  free(scratch);
  return FA_OK;
}

fa_status cpu_quantize(const fa_quantize_request *req, char *kernel) {
  if (req->device.kind != FA_DEVICE_CPU)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "tensors are in %s memory; cpu reads host memory only",
                             fa_device_kind_name(req->device.kind));
  if (req->args->stream)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "args.stream is set: cpu runs on the calling thread and takes no "
                             "stream (NULL)");
  if (req->head_dim > QUANT_MAX_DIM)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "x.shape[3] = %lld > %d for cpu.quantize",
                             (long long)req->head_dim, QUANT_MAX_DIM);
  quant_job j;
  j.req = req;
  j.kern = cpu_kernels_get();
  j.rows = req->args->block_rows > 0 ? req->args->block_rows : req->seqlen;
  j.norm = req->args->rotate ? fa_hadamard_norm((uint32_t)req->log2_dim) : 1.0f;
  if (req->args->rotate)
    for (int64_t c = 0; c < req->head_dim; ++c)
      j.neg[c] = fa_hadamard_sign_negative(req->args->rotate_seed, (uint32_t)c) ? 0x80000000u : 0u;
  if (one_pass_fits(&j)) {
    const fa_status st = quantize_one_pass(&j);
    if (st != FA_OK) return st;
  } else {
    if (req->descale) find_descales(&j); /* a block without elements gets 1 too */
    store_rows(&j);
  }
  fa_quantize_kernel_name(req, "cpu", kernel);
  return FA_OK;
}
