/*
 * cuda_buffer_ops.c: the CUDA plugin's buffer_op (core/plugin.h's fa_buffer_op), the element-wise
 * steps a ring call takes over CUDA device memory: stream-ordered allocation and free from the
 * device's pool, and fill, copy, add and merge launched from common/buffer_ops.cu. Each step is
 * enqueued on op->stream with op->device current (the caller's device restored after), without
 * synchronising the host. The cheap checks come first, so a step refused launches nothing; one
 * over tensors without elements launches nothing either.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "common/buffer_args.h"
#include "cuda_internal.h"

static const char *kind_name(int32_t kind) {
  switch (kind) {
    case FA_BUFFER_ALLOC:
      return "alloc";
    case FA_BUFFER_FREE:
      return "free";
    case FA_BUFFER_FILL:
      return "fill";
    case FA_BUFFER_COPY:
      return "copy";
    case FA_BUFFER_ADD:
      return "add";
    case FA_BUFFER_MERGE:
      return "merge";
    default:
      return NULL;
  }
}

/* Checks tensor t, the step's argument `arg` (float32 only where f32), and writes its view padded
   at the front to 4 dims and its element count. */
static fa_status view_of(const fa_buffer_op *op, const char *name, const char *arg,
                         const fa_tensor *t, int f32, cuda_buffer_view *v, int64_t *count) {
  if (!t) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op %s: %s is NULL", name, arg);
  if (t->ndim < 1 || t->ndim > 4)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "buffer op %s: %s has %d dimensions; 1 to 4 are taken", name, arg,
                             (int)t->ndim);
  if (t->dtype != FA_F32 && (f32 || (t->dtype != FA_F16 && t->dtype != FA_BF16)))
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op %s: %s is %s; %s", name, arg,
                             fa_dtype_name(t->dtype),
                             f32 ? "float32 is taken" : "float32, float16 or bfloat16 are taken");
  if (t->device.kind != op->device.kind || t->device.id != op->device.id)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "buffer op %s: %s is on %s device %d, the step on %s device %d", name,
                             arg, fa_device_kind_name(t->device.kind), (int)t->device.id,
                             fa_device_kind_name(op->device.kind), (int)op->device.id);
  const int pad = 4 - t->ndim;
  int64_t n = 1;
  for (int i = 0; i < 4; ++i) {
    const int64_t s = i < pad ? 1 : t->shape[i - pad];
    if (s < 0)
      return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op %s: %s.shape[%d] = %lld < 0",
                               name, arg, i - pad, (long long)s);
    if (s > 0 && n > INT64_MAX / s)
      return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                               "buffer op %s: %s has more elements than int64 counts", name, arg);
    n *= s;
    v->shape[i] = s;
    v->strides[i] = i < pad ? 0 : t->strides[i - pad];
  }
  v->data = fa_tensor_base(t);
  v->dtype = t->dtype;
  if (n > 0 && !v->data)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op %s: %s.data is NULL", name, arg);
  *count = n;
  return FA_OK;
}

/* FA_OK where b has a's shape (the same dims, each of the same extent). */
static fa_status same_shape(const char *name, const char *arg_a, const fa_tensor *a,
                            const char *arg_b, const fa_tensor *b) {
  int same = a->ndim == b->ndim;
  for (int i = 0; same && i < a->ndim; ++i) same = a->shape[i] == b->shape[i];
  if (same) return FA_OK;
  return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                           "buffer op %s: %s's shape differs from %s's (%d dims)", name, arg_b,
                           arg_a, (int)a->ndim);
}

/* MERGE: src and dst [b, n, h, d], dst_lse and src_lse [b, h, n]. */
static fa_status merge_views(const fa_buffer_op *op, cuda_buffer_args *a, int64_t *rows) {
  const char *name = "merge";
  int64_t count;
  fa_status st = view_of(op, name, "dst", op->dst, 1, &a->dst, &count);
  if (st == FA_OK) st = view_of(op, name, "src", op->src, 0, &a->src, &count);
  if (st == FA_OK) st = view_of(op, name, "dst_lse", op->dst_lse, 1, &a->dst_lse, &count);
  if (st == FA_OK) st = view_of(op, name, "src_lse", op->src_lse, 1, &a->src_lse, &count);
  if (st != FA_OK) return st;
  if (op->dst->ndim != 4)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "buffer op merge: dst has %d dimensions; [b, n, h, d] is taken",
                             (int)op->dst->ndim);
  if ((st = same_shape(name, "dst", op->dst, "src", op->src)) != FA_OK) return st;
  const fa_tensor *lses[2] = {op->dst_lse, op->src_lse};
  const char *lse_names[2] = {"dst_lse", "src_lse"};
  const int64_t b = op->dst->shape[0], n = op->dst->shape[1], h = op->dst->shape[2];
  for (int k = 0; k < 2; ++k) {
    const fa_tensor *l = lses[k];
    if (l->ndim != 3 || l->shape[0] != b || l->shape[1] != h || l->shape[2] != n)
      return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                               "buffer op merge: %s is not [b, h, n] = [%lld, %lld, %lld] of dst "
                               "[b, n, h, d]",
                               lse_names[k], (long long)b, (long long)h, (long long)n);
  }
  *rows = b * n * h; /* dst's element count fits int64 (view_of), so does this */
  return FA_OK;
}

fa_status cuda_buffer_op(const fa_buffer_op *op) {
  if (!op) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op: op is NULL");
  const char *name = kind_name(op->kind);
  if (!name)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op: unknown kind %d", (int)op->kind);
  if (op->device.kind != FA_DEVICE_CUDA)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "buffer op %s: device is %s memory; the cuda backend takes CUDA", name,
                             fa_device_kind_name(op->device.kind));
  cuda_buffer_args a;
  memset(&a, 0, sizeof a);
  a.stream = op->stream;
  a.value = op->value;
  int64_t work = 0, src_count = 0;
  fa_status st = FA_OK;
  switch (op->kind) {
    case FA_BUFFER_ALLOC:
      if (!op->alloc_out)
        return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "buffer op alloc: alloc_out is NULL");
      *op->alloc_out = NULL;
      work = 1;
      break;
    case FA_BUFFER_FREE:
      work = op->ptr != NULL;
      break;
    case FA_BUFFER_FILL:
      st = view_of(op, name, "dst", op->dst, 1, &a.dst, &work);
      break;
    case FA_BUFFER_COPY:
    case FA_BUFFER_ADD:
      st = view_of(op, name, "dst", op->dst, op->kind == FA_BUFFER_ADD, &a.dst, &work);
      if (st == FA_OK) st = view_of(op, name, "src", op->src, 0, &a.src, &src_count);
      if (st == FA_OK) st = same_shape(name, "dst", op->dst, "src", op->src);
      break;
    default: /* FA_BUFFER_MERGE; rows without columns still merge their LSEs */
      st = merge_views(op, &a, &work);
      break;
  }
  if (st != FA_OK || work == 0) return st;

  const int id = op->device.id;
  int previous;
  if ((st = cuda_device_enter(id, &previous)) != FA_OK) return st;
  const cudaStream_t stream = (cudaStream_t)op->stream;
  int err = 0;
  const char *what = "";
  switch (op->kind) {
    case FA_BUFFER_ALLOC:
      err = (int)cudaMallocAsync(op->alloc_out, op->bytes ? op->bytes : 1, stream);
      if (err != 0) *op->alloc_out = NULL;
      what = "cudaMallocAsync (buffer op alloc)";
      break;
    case FA_BUFFER_FREE:
      err = (int)cudaFreeAsync(op->ptr, stream);
      what = "cudaFreeAsync (buffer op free)";
      break;
    case FA_BUFFER_FILL:
      err = cuda_buffer_fill_launch(&a);
      what = "the buffer op fill kernel";
      break;
    case FA_BUFFER_COPY:
      err = cuda_buffer_copy_launch(&a);
      what = "the buffer op copy kernel";
      break;
    case FA_BUFFER_ADD:
      err = cuda_buffer_add_launch(&a);
      what = "the buffer op add kernel";
      break;
    default:
      err = cuda_buffer_merge_launch(&a);
      what = "the buffer op merge kernel";
      break;
  }
  cuda_device_leave(id, previous);
  return err == 0 ? FA_OK : cuda_failure(err, what);
}
