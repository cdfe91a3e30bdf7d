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

/* A contiguous float32 tensor with t's shape at data (NULL in decide), and its bytes rounded up to
   CPU_FP8_ALIGN; 0 when they do not fit in size_t (validated shapes address < 2^63 one-byte
   elements, not necessarily four bytes each). */
static int f32_like(const fa_tensor *t, float *data, fa_tensor *f, size_t *bytes) {
  memset(f, 0, sizeof *f);
  f->data = data;
  f->device = t->device;
  f->dtype = FA_F32;
  f->ndim = t->ndim;
  for (int i = 0; i < t->ndim; ++i) f->shape[i] = t->shape[i];
  const int64_t numel = fa_tensor_set_contiguous(f);
  if ((uint64_t)numel > SIZE_MAX / 8) return 0;
  *bytes = align_up((size_t)numel * sizeof(float));
  return 1;
}

int cpu_fp8_inner_init(const fa_request *req, char *base, cpu_fp8_inner *in) {
  const fa_tensor *src[4] = {req->q, req->k, req->v, req->out};
  fa_tensor *dst[4] = {&in->q, &in->k, &in->v, &in->out};
  size_t offset = 0;
  for (int i = 0; i < 4; ++i) {
    size_t bytes;
    if (!f32_like(src[i], base ? (float *)(base + offset) : NULL, dst[i], &bytes) ||
        offset > SIZE_MAX / 2)
      return 0;
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

/* src (FP8, [batch, seqlen, heads, dim], any strides) to dst (its contiguous float32 copy): each
   code's value from a table of the 256, times its descale (1 without a tensor). */
static void dequantize(const fa_tensor *src, const fa_tensor *descale, int64_t rows,
                       const fa_tensor *dst) {
  float value[256];
  for (int c = 0; c < 256; ++c)
    value[c] =
        src->dtype == FA_F8E4M3 ? fa_f8e4m3_to_f32((uint8_t)c) : fa_f8e5m2_to_f32((uint8_t)c);
  const uint8_t *s = (const uint8_t *)fa_tensor_base(src);
  float *o = (float *)dst->data;
  const int64_t B = src->shape[0], S = src->shape[1], H = src->shape[2], D = src->shape[3];
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float m = descale ? *cpu_descale_ptr(descale, rows, b, h, t) : 1.0f;
        const uint8_t *row = s + b * src->strides[0] + t * src->strides[1] + h * src->strides[2];
        float *out = o + ((b * S + t) * H + h) * D;
        for (int64_t c = 0; c < D; ++c) out[c] = value[row[c * src->strides[3]]] * m;
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
