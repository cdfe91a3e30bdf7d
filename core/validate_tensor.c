/*
 * validate_tensor.c: the checks of one tensor (core/validate.h): its structure, its shape, dtype
 * and device against the call's, and that an output does not alias itself. Nothing here reads
 * tensor data but fa_read_i32, on index tensors in host memory.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "validate.h"

/* Structure of one tensor: non-NULL, rank, dtype, device, shapes, strides, and that every byte it
 * can address, and every stride in bytes, is representable in 64 bits. */
fa_status fa_check_tensor(const char *name, const fa_tensor *t, int32_t ndim) {
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
  if (t->device.kind == FA_DEVICE_CPU && t->device.id != 0)
    return fa_core_set_error(INVALID,
                             "%s.device.id = %d but host memory (FA_DEVICE_CPU) is device 0", name,
                             (int)t->device.id);
  int64_t numel = 1, extent = 0;
  int overflow = 0;
  for (int32_t i = 0; i < ndim; ++i) {
    if (t->shape[i] < 0)
      return fa_core_set_error(INVALID, "%s.shape[%d] = %lld is negative", name, (int)i,
                               (long long)t->shape[i]);
    if (t->strides[i] < 0)
      return fa_core_set_error(INVALID, "%s.strides[%d] = %lld is negative", name, (int)i,
                               (long long)t->strides[i]);
    /* The extent bound below covers every stride but those of dimensions of size 0 or 1, which
       reach nothing; backends still scale each stride to bytes. */
    int64_t stride_bytes;
    if (__builtin_mul_overflow(t->strides[i], (int64_t)esize, &stride_bytes))
      return fa_core_set_error(INVALID,
                               "%s.strides[%d] = %lld is more than 2^63 bytes (%zu-byte "
                               "elements)",
                               name, (int)i, (long long)t->strides[i], esize);
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
fa_status fa_check_no_self_overlap(const char *name, const fa_tensor *t) {
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

fa_status fa_expect_dim(const char *name, const fa_tensor *t, int dim, int64_t want,
                        const char *want_name) {
  if (t->shape[dim] != want)
    return fa_core_set_error(INVALID, "%s.shape[%d] = %lld but must equal %s = %lld", name, dim,
                             (long long)t->shape[dim], want_name, (long long)want);
  return FA_OK;
}

fa_status fa_expect_dim_of(const char *name, const fa_tensor *t, int dim, const char *ref_name,
                           const fa_tensor *ref, int ref_dim) {
  if (t->shape[dim] != ref->shape[ref_dim])
    return fa_core_set_error(INVALID, "%s.shape[%d] = %lld but must equal %s.shape[%d] = %lld",
                             name, dim, (long long)t->shape[dim], ref_name, ref_dim,
                             (long long)ref->shape[ref_dim]);
  return FA_OK;
}

fa_status fa_expect_same_shape(const char *name, const fa_tensor *t, const char *ref_name,
                               const fa_tensor *ref) {
  for (int i = 0; i < ref->ndim; ++i) {
    if (t->shape[i] != ref->shape[i])
      return fa_core_set_error(INVALID, "%s.shape[%d] = %lld but must equal %s.shape[%d] = %lld",
                               name, i, (long long)t->shape[i], ref_name, i,
                               (long long)ref->shape[i]);
  }
  return FA_OK;
}

fa_status fa_expect_dtype(const char *name, const fa_tensor *t, fa_dtype want, const char *why) {
  if (t->dtype != want)
    return fa_core_set_error(INVALID, "%s.dtype = %s but must be %s (%s)", name,
                             fa_dtype_name(t->dtype), fa_dtype_name(want), why);
  return FA_OK;
}

fa_status fa_expect_device(const char *name, const fa_tensor *t, fa_device want) {
  if (t->device.kind != want.kind || t->device.id != want.id)
    return fa_core_set_error(INVALID,
                             "%s.device = %s:%d but q.device = %s:%d (all tensors of a "
                             "call must live on one device)",
                             name, fa_device_kind_name(t->device.kind), (int)t->device.id,
                             fa_device_kind_name(want.kind), (int)want.id);
  return FA_OK;
}

/* Index tensors (cu_seqlens, seqused_k, block_table): int32, on q's device, of the given shape. */
fa_status fa_check_index(const char *name, const fa_tensor *t, int32_t ndim, fa_device dev) {
  TRY(fa_check_tensor(name, t, ndim));
  TRY(fa_expect_dtype(name, t, FA_I32, "an index tensor"));
  TRY(fa_expect_device(name, t, dev));
  return FA_OK;
}

int32_t fa_read_i32(const fa_tensor *t, int64_t i) {
  int32_t v;
  memcpy(&v, (const char *)fa_tensor_base(t) + (size_t)(i * t->strides[0]) * 4, 4);
  return v;
}
