/*
 * cpu_fp8.c: FP8 inputs on the CPU, the correctness oracle of the FP8 kernels (docs/fp8.md): q, k
 * and v are dequantized (stored value x descale, in fp32) into contiguous float32 copies in the
 * workspace, the exact float32 forward runs on them, and its output is rounded once to out's
 * dtype. The f32 pass is decided and run as any f32 request, so every mask feature works alike.
 */
#include <stdio.h>
#include <string.h>

#include "core/math/fp8.h"
#include "cpu_internal.h"
#include "cpu_tensor.h"

static size_t align_up(size_t n) { return (n + CPU_FP8_ALIGN - 1) / CPU_FP8_ALIGN * CPU_FP8_ALIGN; }

/* A contiguous float32 tensor with t's shape and head dim `dim`, at data (NULL in decide). */
static fa_tensor f32_like(const fa_tensor *t, float *data, size_t *bytes) {
  fa_tensor f;
  memset(&f, 0, sizeof f);
  f.data = data;
  f.device = t->device;
  f.dtype = FA_F32;
  f.ndim = t->ndim;
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    f.shape[i] = t->shape[i];
    f.strides[i] = stride;
    stride *= t->shape[i] > 0 ? t->shape[i] : 1;
  }
  *bytes = align_up((size_t)stride * sizeof(float));
  return f;
}

int cpu_fp8_inner_init(const fa_request *req, char *base, cpu_fp8_inner *in) {
  const fa_tensor *src[4] = {req->q, req->k, req->v, req->out};
  fa_tensor *dst[4] = {&in->q, &in->k, &in->v, &in->out};
  size_t offset = 0;
  for (int i = 0; i < 4; ++i) {
    size_t bytes;
    /* validated shapes address < 2^63 one-byte elements: four bytes each may not fit */
    size_t numel = 1;
    for (int d = 0; d < src[i]->ndim; ++d)
      if (__builtin_mul_overflow(numel, (size_t)(src[i]->shape[d] > 0 ? src[i]->shape[d] : 1),
                                 &numel))
        return 0;
    if (numel > SIZE_MAX / 8 || offset > SIZE_MAX / 2) return 0;
    *dst[i] = f32_like(src[i], base ? (float *)(base + offset) : NULL, &bytes);
    offset += bytes;
  }
  in->bytes = offset;
  in->params = *req->params;
  in->params.q_descale = in->params.k_descale = in->params.v_descale = NULL;
  in->params.descale_rows_q = in->params.descale_rows_k = 0;
  in->req = *req;
  in->req.params = &in->params;
  in->req.q = &in->q;
  in->req.k = &in->k;
  in->req.v = &in->v;
  in->req.out = &in->out;
  in->req.dtype = FA_F32;
  return 1;
}

static float fp8_value(fa_dtype dt, uint8_t c) {
  return dt == FA_F8E4M3 ? fa_f8e4m3_to_f32(c) : fa_f8e5m2_to_f32(c);
}

/* The descale of element (b, row, h): descale[b or 0][h or 0][row / rows]; 1 without a tensor. */
static float descale_at(const fa_tensor *d, int64_t rows, int64_t b, int64_t h, int64_t row) {
  if (!d) return 1.0f;
  const float *p = (const float *)fa_tensor_base(d);
  const int64_t blk = rows > 0 ? row / rows : 0;
  return p[(d->shape[0] > 1 ? b : 0) * d->strides[0] + (d->shape[1] > 1 ? h : 0) * d->strides[1] +
           blk * d->strides[2]];
}

/* src (FP8, [batch, seqlen, heads, dim], any strides) to dst (its contiguous float32 copy). */
static void dequantize(const fa_tensor *src, const fa_tensor *descale, int64_t rows,
                       const fa_tensor *dst) {
  const uint8_t *s = (const uint8_t *)fa_tensor_base(src);
  float *o = (float *)dst->data;
  const int64_t B = src->shape[0], S = src->shape[1], H = src->shape[2], D = src->shape[3];
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float m = descale_at(descale, rows, b, h, t);
        const uint8_t *row = s + b * src->strides[0] + t * src->strides[1] + h * src->strides[2];
        float *out = o + ((b * S + t) * H + h) * D;
        for (int64_t c = 0; c < D; ++c)
          out[c] = fp8_value(src->dtype, row[c * src->strides[3]]) * m;
      }
}

void cpu_fp8_dequantize(const fa_request *req, const cpu_fp8_inner *in) {
  const fa_params *p = req->params;
  dequantize(req->q, p->q_descale, p->descale_rows_q, &in->q);
  dequantize(req->k, p->k_descale, p->descale_rows_k, &in->k);
  dequantize(req->v, p->v_descale, p->descale_rows_k, &in->v);
}

void cpu_fp8_store_out(const fa_request *req, const cpu_fp8_inner *in) {
  const fa_tensor *out = req->out;
  const float *src = (const float *)in->out.data;
  const int64_t B = out->shape[0], S = out->shape[1], H = out->shape[2], D = out->shape[3];
  char *base = (char *)fa_tensor_base(out);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = 0; h < H; ++h)
        cpu_store_row(out->dtype, base,
                      b * out->strides[0] + t * out->strides[1] + h * out->strides[2],
                      out->strides[3], D, src + ((b * S + t) * H + h) * D, 1.0f);
}
