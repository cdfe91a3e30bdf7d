/*
 * cuda_check_indices.c: params.check_indices on the CUDA backend. The index tensors (device
 * memory: the host cannot read them in place) are copied back on params.stream, the stream is
 * synchronised, and the core checks the copies by the rule it applies to host tensors
 * (fa_core_check_indices), before the call writes anything.
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

enum { TABLE_COUNT = 5 };

/* Elements from the first to the last one a tensor addresses (strides are non-negative); 0 when
   it has none. */
static size_t span_of(const fa_tensor *t) {
  size_t last = 0;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] == 0) return 0;
    last += (size_t)(t->shape[i] - 1) * (size_t)t->strides[i];
  }
  return last + 1;
}

/* *dst: src's shape and strides over a host buffer (*buf, malloc'd) that the copy queued on
   stream fills. */
static fa_status copy_back(const fa_tensor *src, cudaStream_t stream, fa_tensor *dst, void **buf) {
  *dst = *src;
  dst->device.kind = FA_DEVICE_CPU;
  dst->device.id = 0;
  dst->byte_offset = 0;
  dst->data = NULL;
  const size_t n = span_of(src);
  if (n == 0) return FA_OK;
  *buf = malloc(n * 4);
  if (!*buf)
    return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "cuda: check_indices: %zu bytes of host memory",
                             n * 4);
  dst->data = *buf;
  cudaError_t e = cudaMemcpyAsync(*buf, fa_tensor_base(src), n * 4, cudaMemcpyDeviceToHost, stream);
  return e == cudaSuccess ? FA_OK : cuda_failure(e, "check_indices: reading an index tensor back");
}

fa_status cuda_check_indices(const fa_request *req) {
  const fa_params *p = req->params;
  fa_params hp = *p;
  fa_kvcache_args hkv;
  const fa_tensor *const *src[TABLE_COUNT] = {&p->cu_seqlens_q, &p->cu_seqlens_k, &p->seqused_k,
                                              &p->block_table, NULL};
  const fa_tensor **dst[TABLE_COUNT] = {&hp.cu_seqlens_q, &hp.cu_seqlens_k, &hp.seqused_k,
                                        &hp.block_table, NULL};
  if (req->kv) {
    hkv = *req->kv;
    src[4] = &req->kv->cache_seqlens;
    dst[4] = &hkv.cache_seqlens;
  }
  int any = 0;
  for (int i = 0; i < TABLE_COUNT; ++i) any |= src[i] && *src[i];
  if (!any) return FA_OK;

  cudaStream_t stream = (cudaStream_t)p->stream;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &capture);
  if (e != cudaSuccess) return cuda_failure(e, "check_indices: cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "params.check_indices: params.stream is capturing a CUDA graph, and "
                             "the check reads the index tensors back with a synchronisation");

  fa_tensor copies[TABLE_COUNT];
  void *bufs[TABLE_COUNT] = {0};
  fa_status st = FA_OK;
  for (int i = 0; i < TABLE_COUNT && st == FA_OK; ++i) {
    if (!src[i] || !*src[i]) continue;
    st = copy_back(*src[i], stream, &copies[i], &bufs[i]);
    *dst[i] = &copies[i];
  }
  if (st == FA_OK && (e = cudaStreamSynchronize(stream)) != cudaSuccess)
    st = cuda_failure(e, "check_indices: synchronising the stream");
  if (st == FA_OK) {
    fa_request host = *req;
    host.params = &hp;
    if (req->kv) host.kv = &hkv;
    st = fa_core_check_indices(&host);
  }
  for (int i = 0; i < TABLE_COUNT; ++i) free(bufs[i]);
  return st;
}
