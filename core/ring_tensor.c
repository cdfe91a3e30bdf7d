/*
 * ring_tensor.c: the ring's host tensors. The caller's shards may have any strides and a 16-bit
 * dtype; the ring computes on contiguous float32 copies (bf16/f16 widen exactly) and sends K/V
 * packed contiguously in their own dtype, so only the bytes of the elements travel.
 */
#include <stdlib.h>
#include <string.h>

#include "math/dtype.h"
#include "ring.h"

fa_tensor fa_ring_view(void *data, fa_dtype dtype, int ndim, const int64_t *shape) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.kind = FA_DEVICE_CPU;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  fa_tensor_set_contiguous(&t);
  return t;
}

static int64_t count(const int64_t *shape, int n) {
  int64_t c = 1;
  for (int i = 0; i < n; ++i) c *= shape[i];
  return c;
}

void fa_ring_shapes_of(const fa_request *r, fa_ring_shapes *s) {
  const int64_t q[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
  const int64_t k[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
  const int64_t v[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim_v};
  const int64_t o[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim_v};
  const int64_t l[3] = {r->batch, r->heads_q, r->seqlen_q};
  memcpy(s->q, q, sizeof q);
  memcpy(s->k, k, sizeof k);
  memcpy(s->v, v, sizeof v);
  memcpy(s->o, o, sizeof o);
  memcpy(s->lse, l, sizeof l);
  s->nq = count(q, 4), s->nk = count(k, 4), s->nv = count(v, 4), s->no = count(o, 4);
  s->nlse = count(l, 3);
}

void *fa_ring_alloc(int64_t n, size_t size) { return malloc(n > 0 ? (size_t)n * size : 1); }

fa_tensor fa_ring_rows(const fa_tensor *t, int dim, int64_t row0, int64_t rows) {
  fa_tensor r = *t;
  r.byte_offset += (uint64_t)(row0 * t->strides[dim]) * fa_dtype_size(t->dtype);
  r.shape[dim] = rows;
  return r;
}

int64_t fa_ring_numel(const fa_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

static float load(const char *p, fa_dtype dtype) {
  uint16_t h;
  float f;
  switch (dtype) {
    case FA_BF16:
      memcpy(&h, p, 2);
      return fa_bf16_to_f32(h);
    case FA_F16:
      memcpy(&h, p, 2);
      return fa_f16_to_f32(h);
    default:
      memcpy(&f, p, 4);
      return f;
  }
}

static void store(char *p, fa_dtype dtype, float value) {
  uint16_t h;
  switch (dtype) {
    case FA_BF16:
      h = fa_f32_to_bf16(value);
      memcpy(p, &h, 2);
      return;
    case FA_F16:
      h = fa_f32_to_f16(value);
      memcpy(p, &h, 2);
      return;
    default:
      memcpy(p, &value, 4);
  }
}

/* Calls fn on every element of t in row-major logical order: the element's address and its
   position in that order. The ring's tensors have 3 or 4 dimensions. */
typedef struct walk {
  int64_t shape[4], strides[4];
  char *base;
  size_t elem;
} walk;

static walk walk_of(const fa_tensor *t) {
  walk w;
  const int pad = 4 - t->ndim;
  for (int d = 0; d < 4; ++d) {
    w.shape[d] = d < pad ? 1 : t->shape[d - pad];
    w.strides[d] = d < pad ? 0 : t->strides[d - pad];
  }
  w.elem = fa_dtype_size(t->dtype);
  w.base = (char *)fa_tensor_base(t);
  return w;
}

#define FOR_EACH(w, ptr, flat)                                                              \
  for (int64_t i0 = 0, flat = 0; i0 < (w).shape[0]; ++i0)                                   \
    for (int64_t i1 = 0; i1 < (w).shape[1]; ++i1)                                           \
      for (int64_t i2 = 0; i2 < (w).shape[2]; ++i2)                                         \
        for (int64_t i3 = 0; i3 < (w).shape[3]; ++i3, ++flat)                               \
          for (char *ptr = (w).base + (size_t)(i0 * (w).strides[0] + i1 * (w).strides[1] +  \
                                               i2 * (w).strides[2] + i3 * (w).strides[3]) * \
                                          (w).elem;                                         \
               ptr; ptr = NULL)

void fa_ring_to_f32(const fa_tensor *src, float *dst) {
  walk w = walk_of(src);
  if (!w.base) return;
  FOR_EACH(w, p, flat) dst[flat] = load(p, src->dtype);
}

void fa_ring_pack(const fa_tensor *src, void *dst) {
  walk w = walk_of(src);
  if (!w.base) return;
  char *out = (char *)dst;
  FOR_EACH(w, p, flat) memcpy(out + (size_t)flat * w.elem, p, w.elem);
}

void fa_ring_widen(const void *src, fa_dtype dtype, int64_t n, float *dst) {
  const size_t elem = fa_dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i) dst[i] = load((const char *)src + (size_t)i * elem, dtype);
}

void fa_ring_from_f32(const float *src, fa_tensor *dst) {
  walk w = walk_of(dst);
  if (!w.base) return;
  FOR_EACH(w, p, flat) store(p, dst->dtype, src[flat]);
}

void fa_ring_widen_kv(const void *kv, fa_dtype dtype, int64_t nk, int64_t nv, float *k, float *v) {
  fa_ring_widen(kv, dtype, nk, k);
  fa_ring_widen((const char *)kv + (size_t)nk * fa_dtype_size(dtype), dtype, nv, v);
}
