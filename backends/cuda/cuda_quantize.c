/*
 * cuda_quantize.c: fa_quantize on the CUDA backend (docs/fp8.md): the tensors' device made
 * current, the launches of common/quantize.cu on args.stream (asynchronous, as every CUDA call),
 * bit for bit the CPU backend's results.
 */
#include <cuda_runtime.h>
#include <string.h>

#include "common/quant_args.h"
#include "core/math/fp8.h"
#include "cuda_internal.h"

static const void *base_of(const fa_tensor *t) {
  return t->data ? (const char *)t->data + t->byte_offset : NULL;
}

static void strides4(const fa_tensor *t, int64_t *s) {
  for (int i = 0; i < 4; ++i) s[i] = t->strides[i];
}

fa_status cuda_quantize(const fa_quantize_request *req, char *kernel) {
  if (req->device.kind != FA_DEVICE_CUDA)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "tensors are in %s memory; cuda.quantize reads CUDA device memory",
                             fa_device_kind_name(req->device.kind));
  const cuda_state *s = cuda_state_get();
  if (req->device.id >= s->device_count)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "x.device.id = %d but %d CUDA devices exist",
                             (int)req->device.id, (int)s->device_count);
  fa_quantize_kernel_name(req, "cuda", kernel);
  cuda_quant_args a;
  memset(&a, 0, sizeof a);
  a.x = base_of(req->x);
  a.y = (void *)base_of(req->y);
  a.descale = req->descale ? (float *)base_of(req->descale) : NULL;
  a.xdt = req->x->dtype;
  a.ydt = req->y->dtype;
  a.batch = req->batch;
  a.seqlen = req->seqlen;
  a.heads = req->heads;
  a.dim = req->head_dim;
  strides4(req->x, a.xs);
  strides4(req->y, a.ys);
  if (req->descale)
    for (int i = 0; i < 3; ++i) {
      a.dshape[i] = req->descale->shape[i];
      a.ds[i] = req->descale->strides[i];
    }
  a.block_rows = req->args->block_rows > 0 ? req->args->block_rows : req->seqlen;
  if (a.block_rows < 1) a.block_rows = 1; /* no rows: no row kernel divides by it */
  a.rotate = req->args->rotate != 0;
  a.log2_dim = req->log2_dim;
  a.seed = req->args->rotate_seed;
  a.fp8_max = req->y->dtype == FA_F8E4M3 ? FA_F8E4M3_MAX : FA_F8E5M2_MAX;
  a.stream = req->args->stream;

  const int id = req->device.id;
  int previous;
  const fa_status st = cuda_device_enter(id, &previous);
  if (st != FA_OK) return st;
  const int err = cuda_quant_launch(&a);
  cuda_device_leave(id, previous);
  return err == cudaSuccess ? FA_OK : cuda_failure(err, "the fa_quantize kernels");
}
