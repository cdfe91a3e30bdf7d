/*
 * validate.c: every argument of every call is checked here, once, before any backend sees it.
 * Messages name the argument and the constraint ("k.shape[3] = 72 but must equal q.shape[3] = 64").
 * Nothing here reads tensor data except index tensors that live in host memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#define FA_MAX_HEAD_DIM 1024
#define INVALID FA_ERR_INVALID_ARGUMENT

/* Structure of one tensor: non-NULL, rank, dtype, device, shapes, strides, and that every byte it
 * can address is representable in 64 bits. */
static fa_status check_tensor(const char *name, const fa_tensor *t, int32_t ndim) {
  if (!t) return fa_core_set_error(INVALID, "%s: NULL tensor", name);
  if (t->ndim != ndim)
    return fa_core_set_error(INVALID, "%s.ndim = %d but must be %d", name, (int)t->ndim, (int)ndim);
  size_t esize = fa_dtype_size(t->dtype);
  if (esize == 0)
    return fa_core_set_error(INVALID, "%s.dtype = %d is not an fa_dtype", name, (int)t->dtype);
  if (!fa_device_kind_known(t->device.kind))
    return fa_core_set_error(INVALID, "%s.device.kind = %d is not an fa_device_kind", name,
                             (int)t->device.kind);
  if (t->device.id < 0)
    return fa_core_set_error(INVALID, "%s.device.id = %d is negative", name, (int)t->device.id);
  int64_t numel = 1, extent = 0;
  int overflow = 0;
  for (int32_t i = 0; i < ndim; ++i) {
    if (t->shape[i] < 0)
      return fa_core_set_error(INVALID, "%s.shape[%d] = %lld is negative", name, (int)i,
                               (long long)t->shape[i]);
    if (t->strides[i] < 0)
      return fa_core_set_error(INVALID, "%s.strides[%d] = %lld is negative", name, (int)i,
                               (long long)t->strides[i]);
  }
  /* The byte bound holds for empty tensors too, with each zero extent counted as 1: the other
     extents still size the problem (a q of [0, 2^62, ...] has 2^62 rows to plan for), and every
     count derived from them must stay representable. */
  int empty = 0;
  for (int32_t i = 0; i < ndim; ++i) {
    int64_t s = t->shape[i];
    if (s == 0) {
      empty = 1;
      s = 1;
    }
    if (numel > INT64_MAX / s)
      overflow = 1;
    else
      numel *= s;
    int64_t reach;
    if (__builtin_mul_overflow(s - 1, t->strides[i], &reach) ||
        __builtin_add_overflow(extent, reach, &extent))
      overflow = 1;
  }
  int64_t bytes, span;
  if (overflow || __builtin_mul_overflow(numel, (int64_t)esize, &bytes) ||
      __builtin_add_overflow(extent, 1, &span) ||
      __builtin_mul_overflow(span, (int64_t)esize, &bytes) ||
      t->byte_offset > (uint64_t)INT64_MAX - (uint64_t)bytes)
    return fa_core_set_error(INVALID,
                             "%s: shape and strides address more than 2^63 bytes (64-bit byte "
                             "counts would overflow)",
                             name);
  if (empty) numel = 0;
  if (numel > 0) {
    if (!t->data)
      return fa_core_set_error(INVALID, "%s.data is NULL but the tensor has %lld elements", name,
                               (long long)numel);
    /* Misaligned elements are undefined behaviour for every backend that dereferences them; an
       OpenCL handle is not an address, only its offset counts. */
    uintptr_t addr =
        (t->device.kind == FA_DEVICE_OPENCL ? 0 : (uintptr_t)t->data) + (uintptr_t)t->byte_offset;
    if (addr % esize != 0)
      return fa_core_set_error(INVALID,
                               "%s: data + byte_offset is not aligned to its %zu-byte "
                               "elements",
                               name, esize);
  }
  return FA_OK;
}

/* An output must not alias itself: with the dims ordered by stride, each stride must step past
 * everything the smaller dims reach (sufficient, and what every dense or padded layout meets). */
static fa_status check_no_self_overlap(const char *name, const fa_tensor *t) {
  int32_t order[FA_MAX_DIMS], n = 0;
  for (int32_t i = 0; i < t->ndim; ++i)
    if (t->shape[i] == 0) return FA_OK; /* no elements, nothing can alias */
  for (int32_t i = 0; i < t->ndim; ++i)
    if (t->shape[i] > 1) order[n++] = i;
  for (int32_t a = 1; a < n; ++a) /* insertion sort by stride */
    for (int32_t b = a; b > 0 && t->strides[order[b]] < t->strides[order[b - 1]]; --b) {
      int32_t tmp = order[b];
      order[b] = order[b - 1];
      order[b - 1] = tmp;
    }
  int64_t reach = 0;
  for (int32_t a = 0; a < n; ++a) {
    int32_t d = order[a];
    if (t->strides[d] <= reach)
      return fa_core_set_error(INVALID,
                               "%s.strides[%d] = %lld makes elements overlap (an output must not "
                               "alias itself)",
                               name, (int)d, (long long)t->strides[d]);
    reach += (t->shape[d] - 1) * t->strides[d];
  }
  return FA_OK;
}

static fa_status expect_dim(const char *name, const fa_tensor *t, int dim, int64_t want,
                            const char *want_name) {
  if (t->shape[dim] != want)
    return fa_core_set_error(INVALID, "%s.shape[%d] = %lld but must equal %s = %lld", name, dim,
                             (long long)t->shape[dim], want_name, (long long)want);
  return FA_OK;
}

static fa_status expect_same_shape(const char *name, const fa_tensor *t, const char *ref_name,
                                   const fa_tensor *ref) {
  for (int i = 0; i < ref->ndim; ++i) {
    if (t->shape[i] != ref->shape[i])
      return fa_core_set_error(INVALID, "%s.shape[%d] = %lld but must equal %s.shape[%d] = %lld",
                               name, i, (long long)t->shape[i], ref_name, i,
                               (long long)ref->shape[i]);
  }
  return FA_OK;
}

static fa_status expect_dtype(const char *name, const fa_tensor *t, fa_dtype want,
                              const char *why) {
  if (t->dtype != want)
    return fa_core_set_error(INVALID, "%s.dtype = %s but must be %s (%s)", name,
                             fa_dtype_name(t->dtype), fa_dtype_name(want), why);
  return FA_OK;
}

static fa_status expect_device(const char *name, const fa_tensor *t, fa_device want) {
  if (t->device.kind != want.kind || t->device.id != want.id)
    return fa_core_set_error(INVALID,
                             "%s.device = %s:%d but q.device = %s:%d (all tensors of a "
                             "call must live on one device)",
                             name, fa_device_kind_name(t->device.kind), (int)t->device.id,
                             fa_device_kind_name(want.kind), (int)want.id);
  return FA_OK;
}

#define TRY(expr)                 \
  do {                            \
    fa_status st_ = (expr);       \
    if (st_ != FA_OK) return st_; \
  } while (0)

/* Copies a caller's versioned struct (struct_size first) into this version's. A smaller one is
 * uninitialised or from no version of this library: refused. A larger one comes from a newer
 * header: the fields this version does not know must all be zero, never silently ignored. */
static fa_status resolve_versioned(const char *name, const char *type, const char *init,
                                   const void *user, size_t known, void *out) {
  size_t size;
  memcpy(&size, user, sizeof size);
  if (size < known)
    return fa_core_set_error(INVALID,
                             "%s.struct_size = %zu but this library's %s has %zu bytes: initialise "
                             "it with %s",
                             name, size, type, known, init);
  const unsigned char *extra = (const unsigned char *)user + known;
  for (size_t i = 0; i < size - known; ++i)
    if (extra[i])
      return fa_core_set_error(FA_ERR_UNSUPPORTED,
                               "%s: byte %zu is set, beyond the %zu bytes of %s this library knows "
                               "(a field of a newer version is not supported)",
                               name, known + i, known, type);
  memcpy(out, user, known);
  memcpy(out, &known, sizeof known); /* struct_size: this version's */
  return FA_OK;
}

static fa_status resolve_params(const fa_params *user, fa_params *out) {
  memset(out, 0, sizeof *out);
  if (!user) {
    out->struct_size = sizeof *out;
    return FA_OK;
  }
  return resolve_versioned("params", "fa_params", "fa_params_init() or FA_PARAMS_INIT", user,
                           sizeof *out, out);
}

static fa_status check_params(const fa_params *p) {
  if (!isfinite(p->softmax_scale) || p->softmax_scale < 0.0f)
    return fa_core_set_error(INVALID,
                             "params.softmax_scale = %g must be finite and >= 0 (0 means "
                             "1/sqrt(head_dim))",
                             (double)p->softmax_scale);
  if (p->causal_align != FA_CAUSAL_BOTTOM_RIGHT && p->causal_align != FA_CAUSAL_TOP_LEFT)
    return fa_core_set_error(INVALID, "params.causal_align = %d is not an fa_causal_align",
                             (int)p->causal_align);
  if (p->window_enabled && (p->window_left < -1 || p->window_right < -1))
    return fa_core_set_error(INVALID,
                             "params.window_left/window_right = %lld/%lld must be >= -1 "
                             "(-1 = unbounded)",
                             (long long)p->window_left, (long long)p->window_right);
  if (!isfinite(p->softcap) || p->softcap < 0.0f)
    return fa_core_set_error(INVALID, "params.softcap = %g must be finite and >= 0 (0 = off)",
                             (double)p->softcap);
  if (!(p->dropout_p >= 0.0f && p->dropout_p < 1.0f))
    return fa_core_set_error(INVALID, "params.dropout_p = %g must be in [0, 1)",
                             (double)p->dropout_p);
  if (p->max_seqlen_q < 0 || p->max_seqlen_k < 0)
    return fa_core_set_error(INVALID, "params.max_seqlen_q/max_seqlen_k = %lld/%lld must be >= 0",
                             (long long)p->max_seqlen_q, (long long)p->max_seqlen_k);
  if (p->page_size < 0)
    return fa_core_set_error(INVALID, "params.page_size = %lld is negative",
                             (long long)p->page_size);
  if (p->num_splits < 0)
    return fa_core_set_error(INVALID, "params.num_splits = %d is negative (0 = choose)",
                             (int)p->num_splits);
  if (p->backend < FA_BACKEND_AUTO || p->backend >= FA_BACKEND_COUNT_)
    return fa_core_set_error(INVALID, "params.backend = %d is not an fa_backend_id",
                             (int)p->backend);
  if (p->workspace_size > 0 && !p->workspace)
    return fa_core_set_error(INVALID, "params.workspace is NULL but params.workspace_size = %zu",
                             p->workspace_size);
  return FA_OK;
}

/* Index tensors (cu_seqlens, seqused_k, block_table): int32, on q's device, of the given shape. */
static fa_status check_index(const char *name, const fa_tensor *t, int32_t ndim, fa_device dev) {
  TRY(check_tensor(name, t, ndim));
  TRY(expect_dtype(name, t, FA_I32, "an index tensor"));
  TRY(expect_device(name, t, dev));
  return FA_OK;
}

static int32_t read_i32(const fa_tensor *t, int64_t i) {
  int32_t v;
  memcpy(&v, (const char *)fa_tensor_base(t) + (size_t)(i * t->strides[0]) * 4, 4);
  return v;
}

/* Offsets of packed sequences must start at 0, never decrease and end at the packed total. Only
 * checked where the host can read them. */
static fa_status check_cu_seqlens(const char *name, const fa_tensor *cu, int64_t total,
                                  int64_t max_len, const char *max_name) {
  if (cu->device.kind != FA_DEVICE_CPU) return FA_OK;
  int64_t n = cu->shape[0];
  if (read_i32(cu, 0) != 0)
    return fa_core_set_error(INVALID, "%s[0] = %d but must be 0", name, (int)read_i32(cu, 0));
  for (int64_t i = 1; i < n; ++i)
    if (read_i32(cu, i) < read_i32(cu, i - 1))
      return fa_core_set_error(INVALID, "%s[%lld] = %d is less than %s[%lld] = %d", name,
                               (long long)i, (int)read_i32(cu, i), name, (long long)(i - 1),
                               (int)read_i32(cu, i - 1));
  for (int64_t i = 1; i < n; ++i)
    if (read_i32(cu, i) - read_i32(cu, i - 1) > max_len)
      return fa_core_set_error(
          INVALID, "%s: sequence %lld has %d tokens, more than %s = %lld", name, (long long)(i - 1),
          (int)(read_i32(cu, i) - read_i32(cu, i - 1)), max_name, (long long)max_len);
  if (read_i32(cu, n - 1) > total)
    return fa_core_set_error(INVALID, "%s[%lld] = %d exceeds the %lld packed tokens", name,
                             (long long)(n - 1), (int)read_i32(cu, n - 1), (long long)total);
  return FA_OK;
}

/* Index values a host backend will dereference: block_table entries inside the pool, seqused_k
 * within the keys there are. Checked where the host can read them. */
static fa_status check_host_indices(const fa_params *p, int64_t batch, const fa_tensor *k,
                                    int64_t seqlen_k) {
  if (p->block_table && p->block_table->device.kind == FA_DEVICE_CPU) {
    const fa_tensor *bt = p->block_table;
    for (int64_t b = 0; b < bt->shape[0]; ++b)
      for (int64_t j = 0; j < bt->shape[1]; ++j) {
        int32_t v;
        size_t at = (size_t)(b * bt->strides[0] + j * bt->strides[1]) * 4;
        memcpy(&v, (const char *)fa_tensor_base(bt) + at, 4);
        if (v < 0 || v >= k->shape[0])
          return fa_core_set_error(INVALID,
                                   "params.block_table[%lld][%lld] = %d is outside the %lld pages "
                                   "of k.shape[0]",
                                   (long long)b, (long long)j, (int)v, (long long)k->shape[0]);
      }
  }
  if (p->seqused_k && p->seqused_k->device.kind == FA_DEVICE_CPU) {
    for (int64_t b = 0; b < batch; ++b) {
      int32_t used = read_i32(p->seqused_k, b);
      int64_t avail = seqlen_k;
      if (p->cu_seqlens_k && p->cu_seqlens_k->device.kind == FA_DEVICE_CPU)
        avail = read_i32(p->cu_seqlens_k, b + 1) - read_i32(p->cu_seqlens_k, b);
      if (used < 0 || used > avail)
        return fa_core_set_error(INVALID,
                                 "params.seqused_k[%lld] = %d is outside [0, %lld] (the keys "
                                 "sequence %lld has)",
                                 (long long)b, (int)used, (long long)avail, (long long)b);
    }
  }
  return FA_OK;
}

static fa_status resolve_kvcache_args(const fa_kvcache_args *user, fa_kvcache_args *out) {
  memset(out, 0, sizeof *out);
  if (!user) return fa_core_set_error(INVALID, "kv: NULL (kv.cache_seqlens is required)");
  return resolve_versioned("kv", "fa_kvcache_args", "fa_kvcache_args_init()", user, sizeof *out,
                           out);
}

/* fa_forward_kvcache's own arguments: the new tokens, the cache lengths and the rotary tables. */
static fa_status check_kvcache(const fa_call_args *a, const fa_params *p, fa_kvcache_args *kv,
                               int64_t batch, int64_t seqlen_q, int64_t capacity, int64_t heads_kv,
                               int64_t head_dim, int64_t head_dim_v, int64_t *seqlen_new,
                               int64_t *rotary_dim) {
  TRY(resolve_kvcache_args(a->kv, kv));
  const fa_device dev = a->q->device;
  TRY(check_index("kv.cache_seqlens", kv->cache_seqlens, 1, dev));
  TRY(expect_dim("kv.cache_seqlens", kv->cache_seqlens, 0, batch, "batch"));
  if (!kv->k_new != !kv->v_new)
    return fa_core_set_error(INVALID, "kv.k_new and kv.v_new must be given together");
  *seqlen_new = 0;
  if (kv->k_new) {
    static const char *const names[2] = {"kv.k_new", "kv.v_new"};
    const fa_tensor *t[2] = {kv->k_new, kv->v_new};
    for (int i = 0; i < 2; ++i) {
      TRY(check_tensor(names[i], t[i], 4));
      TRY(expect_dtype(names[i], t[i], a->q->dtype, "as q"));
      TRY(expect_device(names[i], t[i], dev));
      TRY(expect_dim(names[i], t[i], 0, batch, "q.shape[0]"));
      TRY(expect_dim(names[i], t[i], 2, heads_kv, "heads_kv"));
    }
    TRY(expect_dim("kv.v_new", kv->v_new, 1, kv->k_new->shape[1], "kv.k_new.shape[1]"));
    TRY(expect_dim("kv.k_new", kv->k_new, 3, head_dim, "head_dim"));
    TRY(expect_dim("kv.v_new", kv->v_new, 3, head_dim_v, "head_dim_v"));
    *seqlen_new = kv->k_new->shape[1];
  }
  *rotary_dim = 0;
  if (!kv->rotary_cos != !kv->rotary_sin)
    return fa_core_set_error(INVALID, "kv.rotary_cos and kv.rotary_sin must be given together");
  if (kv->rotary_cos) {
    TRY(check_tensor("kv.rotary_cos", kv->rotary_cos, 2));
    TRY(check_tensor("kv.rotary_sin", kv->rotary_sin, 2));
    if (kv->rotary_cos->dtype != FA_F32 && kv->rotary_cos->dtype != a->q->dtype)
      return fa_core_set_error(INVALID, "kv.rotary_cos.dtype = %s but must be f32 or q's %s",
                               fa_dtype_name(kv->rotary_cos->dtype), fa_dtype_name(a->q->dtype));
    TRY(expect_dtype("kv.rotary_sin", kv->rotary_sin, kv->rotary_cos->dtype, "as rotary_cos"));
    TRY(expect_device("kv.rotary_cos", kv->rotary_cos, dev));
    TRY(expect_device("kv.rotary_sin", kv->rotary_sin, dev));
    TRY(expect_same_shape("kv.rotary_sin", kv->rotary_sin, "kv.rotary_cos", kv->rotary_cos));
    *rotary_dim = 2 * kv->rotary_cos->shape[1];
    if (*rotary_dim < 2 || *rotary_dim > head_dim)
      return fa_core_set_error(INVALID,
                               "kv.rotary_cos.shape[1] = %lld: the rotary dim (twice it) must be "
                               "in [2, head_dim = %lld]",
                               (long long)kv->rotary_cos->shape[1], (long long)head_dim);
  }
  /* Host-readable lengths: the append must fit the cache, the positions the tables. */
  if (kv->cache_seqlens->device.kind == FA_DEVICE_CPU) {
    int64_t rows_q = (p->causal || p->window_enabled) ? seqlen_q : 1;
    for (int64_t b = 0; b < batch; ++b) {
      int32_t len = read_i32(kv->cache_seqlens, b);
      if (len < 0 || len + *seqlen_new > capacity)
        return fa_core_set_error(INVALID,
                                 "kv.cache_seqlens[%lld] = %d: with %lld new tokens it must stay "
                                 "within the cache's %lld positions",
                                 (long long)b, (int)len, (long long)*seqlen_new,
                                 (long long)capacity);
      int64_t last = len + (*seqlen_new > rows_q ? *seqlen_new : rows_q);
      if (kv->rotary_cos && last > kv->rotary_cos->shape[0])
        return fa_core_set_error(INVALID,
                                 "kv.rotary_cos.shape[0] = %lld but sequence %lld needs positions "
                                 "up to %lld",
                                 (long long)kv->rotary_cos->shape[0], (long long)b,
                                 (long long)(last - 1));
    }
  }
  return FA_OK;
}

fa_status fa_validate(fa_op op, const fa_params *user_params, const fa_call_args *a, fa_params *p,
                      fa_kvcache_args *kv, fa_request *req) {
  TRY(resolve_params(user_params, p));
  TRY(check_params(p));

  const int varlen_q = p->cu_seqlens_q != NULL;
  const int varlen_k = p->cu_seqlens_k != NULL;
  const int paged = p->block_table != NULL;
  if (varlen_k && !varlen_q)
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_k is set but params.cu_seqlens_q is not "
                             "(variable length needs both)");
  if (paged && varlen_k)
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_k is set with params.block_table: paged "
                             "keys take their lengths from params.seqused_k");
  if (op == FA_OP_KVCACHE && (varlen_q || varlen_k || p->seqused_k))
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_q/cu_seqlens_k/seqused_k must be NULL "
                             "for fa_forward_kvcache (kv->cache_seqlens gives the lengths)");
  if (varlen_q && !varlen_k && !paged)
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_q is set but params.cu_seqlens_k is not "
                             "(variable length needs both, or a block_table)");

  const int32_t qdim = varlen_q ? 3 : 4;
  const int32_t kdim = paged ? 4 : (varlen_k ? 3 : 4);
  TRY(check_tensor("q", a->q, qdim));
  TRY(check_tensor("k", a->k, kdim));
  TRY(check_tensor("v", a->v, kdim));
  TRY(check_tensor("out", a->out, qdim));

  const fa_tensor *q = a->q, *k = a->k, *v = a->v, *out = a->out;
  const fa_device dev = q->device;
  if (q->dtype != FA_F32 && q->dtype != FA_F16 && q->dtype != FA_BF16)
    return fa_core_set_error(INVALID, "q.dtype = %s but must be f32, f16 or bf16",
                             fa_dtype_name(q->dtype));
  TRY(expect_dtype("k", k, q->dtype, "as q"));
  TRY(expect_dtype("v", v, q->dtype, "as q"));
  TRY(expect_dtype("out", out, q->dtype, "as q"));
  TRY(expect_device("k", k, dev));
  TRY(expect_device("v", v, dev));
  TRY(expect_device("out", out, dev));

  /* Dimensions by role; packed tensors drop the batch dimension. */
  const int qh = qdim - 2, kh = kdim - 2; /* index of the heads dim */
  int64_t batch, seqlen_q, seqlen_k;
  const int64_t heads_q = q->shape[qh], head_dim = q->shape[qh + 1];
  const int64_t heads_kv = k->shape[kh], head_dim_v = v->shape[kh + 1];

  if (varlen_q) {
    TRY(check_index("params.cu_seqlens_q", p->cu_seqlens_q, 1, dev));
    if (p->cu_seqlens_q->shape[0] < 1)
      return fa_core_set_error(INVALID,
                               "params.cu_seqlens_q.shape[0] = 0 but must be batch + 1 >= 1");
    batch = p->cu_seqlens_q->shape[0] - 1;
    TRY(check_cu_seqlens("params.cu_seqlens_q", p->cu_seqlens_q, q->shape[0], p->max_seqlen_q,
                         "params.max_seqlen_q"));
    seqlen_q = p->max_seqlen_q;
    if (seqlen_q == 0 && q->shape[0] > 0)
      return fa_core_set_error(INVALID,
                               "params.max_seqlen_q = 0 but must be set with cu_seqlens_q");
    /* No sequence is longer than the packed total: a larger bound only sizes an empty grid. */
    if (seqlen_q > q->shape[0]) seqlen_q = q->shape[0];
  } else {
    batch = q->shape[0];
    seqlen_q = q->shape[1];
  }

  if (paged) {
    TRY(check_index("params.block_table", p->block_table, 2, dev));
    TRY(expect_dim("params.block_table", p->block_table, 0, batch, "batch"));
    const int64_t page = k->shape[1];
    if (page < 1 || page > 1024 || (page & (page - 1)) != 0)
      return fa_core_set_error(INVALID,
                               "k.shape[1] = %lld (the page size) must be a power of two "
                               "in [1, 1024]",
                               (long long)page);
    if (p->page_size != 0 && p->page_size != page)
      return fa_core_set_error(INVALID, "params.page_size = %lld but k.shape[1] = %lld",
                               (long long)p->page_size, (long long)page);
    p->page_size = page;
    /* The keys a block_table row can address; a longer max_seqlen_k would index past the row. */
    int64_t table_keys;
    if (__builtin_mul_overflow(p->block_table->shape[1], page, &table_keys) ||
        table_keys > (INT64_C(1) << 62))
      return fa_core_set_error(INVALID,
                               "params.block_table.shape[1] = %lld pages of %lld keys address "
                               "more than 2^62 keys",
                               (long long)p->block_table->shape[1], (long long)page);
    if (p->max_seqlen_k > table_keys)
      return fa_core_set_error(INVALID,
                               "params.max_seqlen_k = %lld exceeds the %lld keys a block_table "
                               "row addresses (%lld pages of %lld)",
                               (long long)p->max_seqlen_k, (long long)table_keys,
                               (long long)p->block_table->shape[1], (long long)page);
    seqlen_k = p->max_seqlen_k ? p->max_seqlen_k : table_keys;
  } else if (varlen_k) {
    TRY(check_index("params.cu_seqlens_k", p->cu_seqlens_k, 1, dev));
    TRY(expect_dim("params.cu_seqlens_k", p->cu_seqlens_k, 0, batch + 1, "cu_seqlens_q.shape[0]"));
    TRY(check_cu_seqlens("params.cu_seqlens_k", p->cu_seqlens_k, k->shape[0], p->max_seqlen_k,
                         "params.max_seqlen_k"));
    seqlen_k = p->max_seqlen_k;
    if (seqlen_k == 0 && k->shape[0] > 0)
      return fa_core_set_error(INVALID,
                               "params.max_seqlen_k = 0 but must be set with cu_seqlens_k");
    if (seqlen_k > k->shape[0]) seqlen_k = k->shape[0];
  } else {
    TRY(expect_dim("k", k, 0, batch, "q.shape[0]"));
    seqlen_k = k->shape[1];
    if (p->page_size != 0)
      return fa_core_set_error(INVALID, "params.page_size = %lld but params.block_table is NULL",
                               (long long)p->page_size);
  }
  if (p->seqused_k) {
    TRY(check_index("params.seqused_k", p->seqused_k, 1, dev));
    TRY(expect_dim("params.seqused_k", p->seqused_k, 0, batch, "batch"));
  }

  /* k and v share every dim but the last. */
  for (int i = 0; i < kdim - 1; ++i) {
    if (v->shape[i] != k->shape[i])
      return fa_core_set_error(INVALID, "v.shape[%d] = %lld but must equal k.shape[%d] = %lld", i,
                               (long long)v->shape[i], i, (long long)k->shape[i]);
  }
  if (head_dim < 1 || head_dim > FA_MAX_HEAD_DIM)
    return fa_core_set_error(INVALID, "q.shape[%d] = %lld (head_dim) must be in [1, %d]", qh + 1,
                             (long long)head_dim, FA_MAX_HEAD_DIM);
  if (head_dim_v < 1 || head_dim_v > FA_MAX_HEAD_DIM)
    return fa_core_set_error(INVALID, "v.shape[%d] = %lld (head_dim_v) must be in [1, %d]", kh + 1,
                             (long long)head_dim_v, FA_MAX_HEAD_DIM);
  {
    char want[32];
    snprintf(want, sizeof want, "q.shape[%d]", qh + 1);
    TRY(expect_dim("k", k, kh + 1, head_dim, want));
  }
  if (heads_kv < 1)
    return fa_core_set_error(INVALID, "k.shape[%d] = %lld (heads_kv) must be >= 1", kh,
                             (long long)heads_kv);
  if (heads_q < 1)
    return fa_core_set_error(INVALID, "q.shape[%d] = %lld (heads_q) must be >= 1", qh,
                             (long long)heads_q);
  if (heads_q % heads_kv != 0)
    return fa_core_set_error(INVALID,
                             "q.shape[%d] = %lld (heads_q) must be a multiple of "
                             "k.shape[%d] = %lld (heads_kv)",
                             qh, (long long)heads_q, kh, (long long)heads_kv);

  /* out mirrors q with v's head dim. */
  for (int i = 0; i < qdim - 1; ++i) {
    char want[32];
    snprintf(want, sizeof want, "q.shape[%d]", i);
    TRY(expect_dim("out", out, i, q->shape[i], want));
  }
  {
    char want[32];
    snprintf(want, sizeof want, "v.shape[%d]", kh + 1);
    TRY(expect_dim("out", out, qdim - 1, head_dim_v, want));
  }

  /* lse: float32 [batch, heads_q, seqlen_q], or [heads_q, total_q] when q is packed. */
  const fa_tensor *lse = a->lse;
  if (op == FA_OP_BACKWARD && !lse)
    return fa_core_set_error(INVALID,
                             "lse: NULL tensor (the backward pass needs the forward's lse)");
  if (p->return_lse && !lse)
    return fa_core_set_error(INVALID, "lse: NULL tensor but params.return_lse is set");
  int32_t lse_packed = 0;
  if (lse) {
    /* Packed q: unpadded [heads_q, total_q] or padded [batch, heads_q, max_seqlen_q]. */
    lse_packed = varlen_q && lse->ndim == 2;
    TRY(check_tensor("lse", lse, lse_packed ? 2 : 3));
    TRY(expect_dtype("lse", lse, FA_F32, "the logsumexp is float32"));
    TRY(expect_device("lse", lse, dev));
    if (lse_packed) {
      TRY(expect_dim("lse", lse, 0, heads_q, "heads_q"));
      TRY(expect_dim("lse", lse, 1, q->shape[0], "q.shape[0] (total_q)"));
    } else {
      TRY(expect_dim("lse", lse, 0, batch, varlen_q ? "batch" : "q.shape[0]"));
      TRY(expect_dim("lse", lse, 1, heads_q, varlen_q ? "heads_q" : "q.shape[2]"));
      TRY(expect_dim("lse", lse, 2, varlen_q ? p->max_seqlen_q : seqlen_q,
                     varlen_q ? "params.max_seqlen_q" : "q.shape[1]"));
    }
  }

  if (p->alibi_slopes) {
    const fa_tensor *al = p->alibi_slopes;
    if (al->ndim != 1 && al->ndim != 2)
      return fa_core_set_error(INVALID,
                               "params.alibi_slopes.ndim = %d but must be 1 ([heads_q]) "
                               "or 2 ([batch, heads_q])",
                               (int)al->ndim);
    TRY(check_tensor("params.alibi_slopes", al, al->ndim));
    TRY(expect_dtype("params.alibi_slopes", al, FA_F32, "slopes are float32"));
    TRY(expect_device("params.alibi_slopes", al, dev));
    if (al->ndim == 2) TRY(expect_dim("params.alibi_slopes", al, 0, batch, "batch"));
    TRY(expect_dim("params.alibi_slopes", al, al->ndim - 1, heads_q, "heads_q"));
  }

  if (op == FA_OP_BACKWARD) {
    static const char *names[4] = {"dout", "dq", "dk", "dv"};
    const fa_tensor *grads[4] = {a->dout, a->dq, a->dk, a->dv};
    const fa_tensor *like[4] = {out, q, k, v};
    static const char *like_names[4] = {"out", "q", "k", "v"};
    for (int i = 0; i < 4; ++i) {
      TRY(check_tensor(names[i], grads[i], like[i]->ndim));
      TRY(expect_dtype(names[i], grads[i], q->dtype, "as q"));
      TRY(expect_device(names[i], grads[i], dev));
      TRY(expect_same_shape(names[i], grads[i], like_names[i], like[i]));
    }
    for (int i = 1; i < 4; ++i) TRY(check_no_self_overlap(names[i], grads[i]));
  } else {
    TRY(check_no_self_overlap("out", out));
  }
  if (lse && op == FA_OP_FORWARD) TRY(check_no_self_overlap("lse", lse));

  /* A window side at least seqlen_q + seqlen_k wide cuts nothing: it is the unbounded side
     (-1), exactly, for every row and alignment, and the mask arithmetic stays far from 2^63. */
  if (p->window_enabled) {
    int64_t span;
    if (__builtin_add_overflow(seqlen_q, seqlen_k, &span)) span = INT64_MAX;
    if (p->window_left >= span) p->window_left = -1;
    if (p->window_right >= span) p->window_right = -1;
  }

  int64_t seqlen_new = 0, rotary_dim = 0;
  if (op == FA_OP_KVCACHE)
    TRY(check_kvcache(a, p, kv, batch, seqlen_q, seqlen_k, heads_kv, head_dim, head_dim_v,
                      &seqlen_new, &rotary_dim));
  TRY(check_host_indices(p, batch, k, seqlen_k));

  memset(req, 0, sizeof *req);
  req->op = op;
  req->lse_packed = lse_packed;
  if (op == FA_OP_KVCACHE) {
    req->kv = kv;
    req->seqlen_new = seqlen_new;
    req->rotary_dim = rotary_dim;
  }
  req->params = p;
  req->q = q;
  req->k = k;
  req->v = v;
  req->out = out;
  req->lse = lse;
  if (op == FA_OP_BACKWARD) {
    req->dout = a->dout;
    req->dq = a->dq;
    req->dk = a->dk;
    req->dv = a->dv;
  }
  req->dtype = q->dtype;
  req->device = dev;
  req->batch = batch;
  req->seqlen_q = seqlen_q;
  req->seqlen_k = seqlen_k;
  req->heads_q = heads_q;
  req->heads_kv = heads_kv;
  req->head_dim = head_dim;
  req->head_dim_v = head_dim_v;
  req->scale = p->softmax_scale > 0.0f ? p->softmax_scale : (float)(1.0 / sqrt((double)head_dim));
  return FA_OK;
}
