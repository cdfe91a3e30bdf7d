/*
 * ring_tensor.c: the ring's tensors and its element-wise steps on host memory. The caller's shards
 * may have any strides and a 16-bit dtype; the host ring computes its blocks on contiguous float32
 * copies (bf16 and f16 widen exactly) and sends K/V packed contiguously in their own dtype, so only
 * the bytes of the elements travel. On a device the backend does the same steps (ring_mem.c).
 */
#include <string.h>

#include "math/dtype.h"
#include "math/softmax.h"
#include "ring.h"

fa_tensor fa_ring_view(const fa_ring_mem *m, void *data, fa_dtype dtype, int ndim,
                       const int64_t *shape) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device = m->device;
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

fa_tensor fa_ring_rows(const fa_tensor *t, int dim, int64_t row0, int64_t rows) {
  fa_tensor r = *t;
  r.byte_offset += (uint64_t)(row0 * t->strides[dim]) * fa_dtype_size(t->dtype);
  r.shape[dim] = rows;
  return r;
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

/* A tensor of 1 to 4 dimensions seen as 4 (leading dimensions of one element): its elements are
   visited in row-major logical order, so two tensors of one shape are walked in step. */
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

static char *at(const walk *w, const int64_t *i) {
  return w->base + (size_t)(i[0] * w->strides[0] + i[1] * w->strides[1] + i[2] * w->strides[2] +
                            i[3] * w->strides[3]) *
                       w->elem;
}

/* Visits the indices of w's elements in row-major order. */
#define FOR_EACH_INDEX(w, i)                                     \
  for (int64_t i[4] = {0, 0, 0, 0}; i[0] < (w).shape[0]; ++i[0]) \
    for (i[1] = 0; i[1] < (w).shape[1]; ++i[1])                  \
      for (i[2] = 0; i[2] < (w).shape[2]; ++i[2])                \
        for (i[3] = 0; i[3] < (w).shape[3]; ++i[3])

/* Whether w's elements are contiguous in row-major order (extents of 1 have any stride). */
static int dense(const walk *w) {
  int64_t want = 1;
  for (int d = 3; d >= 0; --d) {
    if (w->shape[d] != 1 && w->strides[d] != want) return 0;
    want *= w->shape[d];
  }
  return 1;
}

static int64_t count_of(const walk *w) {
  return w->shape[0] * w->shape[1] * w->shape[2] * w->shape[3];
}

/* n contiguous elements of dtype at src widened to float32, or float32 ones narrowed to dtype:
   the loops the ring's buffers take (the walk's per-element dispatch costs as much as a block's
   compute at short shards). */
static void widen(const void *src, fa_dtype dtype, int64_t n, float *dst) {
  const uint16_t *h = src;
  if (dtype == FA_BF16)
    for (int64_t i = 0; i < n; ++i) dst[i] = fa_bf16_to_f32(h[i]);
  else if (dtype == FA_F16)
    for (int64_t i = 0; i < n; ++i) dst[i] = fa_f16_to_f32(h[i]);
  else
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void narrow(const float *src, int64_t n, fa_dtype dtype, void *dst) {
  uint16_t *h = dst;
  if (dtype == FA_BF16)
    for (int64_t i = 0; i < n; ++i) h[i] = fa_f32_to_bf16(src[i]);
  else if (dtype == FA_F16)
    for (int64_t i = 0; i < n; ++i) h[i] = fa_f32_to_f16(src[i]);
  else
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void fa_ring_host_fill(const fa_tensor *dst, float value) {
  const walk w = walk_of(dst);
  if (!w.base) return;
  FOR_EACH_INDEX(w, i) store(at(&w, i), dst->dtype, value);
}

void fa_ring_host_copy(const fa_tensor *src, const fa_tensor *dst) {
  const walk s = walk_of(src), d = walk_of(dst);
  if (!s.base || !d.base) return;
  if (dense(&s) && dense(&d)) {
    if (src->dtype == dst->dtype)
      memcpy(d.base, s.base, (size_t)count_of(&s) * s.elem);
    else if (dst->dtype == FA_F32)
      widen(s.base, src->dtype, count_of(&s), (float *)(void *)d.base);
    else if (src->dtype == FA_F32)
      narrow((const float *)(const void *)s.base, count_of(&s), dst->dtype, d.base);
    else
      FOR_EACH_INDEX(s, i) store(at(&d, i), dst->dtype, load(at(&s, i), src->dtype));
  } else if (src->dtype == dst->dtype) {
    FOR_EACH_INDEX(s, i) memcpy(at(&d, i), at(&s, i), s.elem);
  } else {
    FOR_EACH_INDEX(s, i) store(at(&d, i), dst->dtype, load(at(&s, i), src->dtype));
  }
}

/* Row i (i[3] = 0) of dst (float32) = w1 * dst + w2 * src, element by element, src widened: a
   row at a time where both are contiguous along it (the blocks' views cut rows, not columns). */
static void blend_row(const walk *s, fa_dtype sdt, const walk *d, int64_t *i, float w1, float w2) {
  const int64_t cols = s->shape[3];
  float row[256];
  if (s->strides[3] == 1 && d->strides[3] == 1 && cols <= 256) {
    float *o = (float *)(void *)at(d, i);
    widen(at(s, i), sdt, cols, row);
    for (int64_t c = 0; c < cols; ++c) o[c] = w1 * o[c] + w2 * row[c];
    return;
  }
  for (i[3] = 0; i[3] < cols; ++i[3]) {
    float *o = (float *)(void *)at(d, i);
    *o = w1 * *o + w2 * load(at(s, i), sdt);
  }
  i[3] = 0;
}

/* dst += src as the blend with weights 1 (1 * x is x exactly, so the sum is rounded once). */
void fa_ring_host_add(const fa_tensor *src, const fa_tensor *dst) {
  const walk s = walk_of(src), d = walk_of(dst);
  if (!s.base || !d.base) return;
  for (int64_t i0 = 0; i0 < s.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < s.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < s.shape[2]; ++i2) {
        int64_t i[4] = {i0, i1, i2, 0};
        blend_row(&s, src->dtype, &d, i, 1.0f, 1.0f);
      }
}

void fa_ring_host_merge(const fa_tensor *src, const fa_tensor *src_lse, const fa_tensor *dst,
                        const fa_tensor *dst_lse) {
  const walk s = walk_of(src), d = walk_of(dst), sl = walk_of(src_lse), dl = walk_of(dst_lse);
  if (!s.base || !d.base) return;
  /* [b, n, h, dim] rows against the LSEs' [b, h, n] (seen as [1, b, h, n]). */
  for (int64_t z = 0; z < s.shape[0]; ++z)
    for (int64_t n = 0; n < s.shape[1]; ++n)
      for (int64_t h = 0; h < s.shape[2]; ++h) {
        const int64_t li[4] = {0, z, h, n};
        float *lse = (float *)(void *)at(&dl, li);
        float w1, w2;
        *lse = fa_softmax_merge_lse(*lse, load(at(&sl, li), FA_F32), &w1, &w2);
        int64_t i[4] = {z, n, h, 0};
        blend_row(&s, src->dtype, &d, i, w1, w2);
      }
}
