/*
 * device_mem_cuda.c: device_mem's CUDA memory, through the CUDA runtime's C API (so this file
 * stays C). Compiled in only with FA_DEVMEM_CUDA=1, which the build sets when it builds the CUDA
 * backend; without it the table says why there is no CUDA memory.
 */
#include <stdio.h>

#include "device_mem_impl.h"

#if defined(FA_DEVMEM_CUDA) && FA_DEVMEM_CUDA
#include <cuda_runtime_api.h>

static int cuda_fail(cudaError_t e, const char *call, fa_device dev, char *err, size_t n) {
  return devmem_set_err(err, n, "%s on cuda:%d failed: %s (%s)", call, (int)dev.id,
                        cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Makes dev.id the calling thread's current device (cudaMalloc allocates there). */
static int cuda_use(fa_device dev, char *err, size_t n) {
  cudaError_t e = cudaSetDevice((int)dev.id);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaSetDevice", dev, err, n);
}

#define CUDA_TRY(call, what)                                        \
  do {                                                              \
    cudaError_t e_ = (call);                                        \
    if (e_ != cudaSuccess) return cuda_fail(e_, what, dev, err, n); \
  } while (0)

static int cuda_name(fa_device dev, char *name, size_t name_n, char *err, size_t n) {
  struct cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, (int)dev.id), "cudaGetDeviceProperties");
  snprintf(name, name_n, "%s", prop.name);
  return devmem_ok(err, n);
}

/* The default stream: the one fa_* calls use when params.stream is NULL. */
static int cuda_stream(fa_device dev, void **stream, char *err, size_t n) {
  (void)dev;
  *stream = NULL;
  return devmem_ok(err, n);
}

static int cuda_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n) {
  if (cuda_use(dev, err, n)) return -1;
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", bytes);
    return cuda_fail(e, what, dev, err, n);
  }
  *ptr = p;
  return devmem_ok(err, n);
}

static int cuda_free(fa_device dev, void *ptr, char *err, size_t n) {
  if (cuda_use(dev, err, n)) return -1;
  CUDA_TRY(cudaFree(ptr), "cudaFree");
  return devmem_ok(err, n);
}

static int cuda_copy(fa_device dev, void *dst, const void *src, size_t dev_off, size_t bytes,
                     int to_device, char *err, size_t n) {
  if (cuda_use(dev, err, n)) return -1;
  if (to_device) {
    CUDA_TRY(cudaMemcpy((unsigned char *)dst + dev_off, src, bytes, cudaMemcpyHostToDevice),
             "cudaMemcpy(host to device)");
  } else {
    CUDA_TRY(cudaMemcpy(dst, (const unsigned char *)src + dev_off, bytes, cudaMemcpyDeviceToHost),
             "cudaMemcpy(device to host)");
  }
  return devmem_ok(err, n);
}

/* Queued on the default stream; no host-side wait for a copy within the device. */
static int cuda_copy_on_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                               size_t n) {
  if (cuda_use(dev, err, n)) return -1;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy(device to device)");
  return devmem_ok(err, n);
}

static int cuda_memset(fa_device dev, void *ptr, size_t offset, int value, size_t bytes, char *err,
                       size_t n) {
  if (cuda_use(dev, err, n)) return -1;
  CUDA_TRY(cudaMemset((unsigned char *)ptr + offset, value, bytes), "cudaMemset");
  return devmem_ok(err, n);
}

static int cuda_sync(fa_device dev, char *err, size_t n) {
  if (cuda_use(dev, err, n)) return -1;
  CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return devmem_ok(err, n);
}

const devmem_backend devmem_cuda = {.name = cuda_name,
                                    .stream = cuda_stream,
                                    .alloc = cuda_alloc,
                                    .free = cuda_free,
                                    .copy = cuda_copy,
                                    .memset = cuda_memset,
                                    .copy_on_device = cuda_copy_on_device,
                                    .sync = cuda_sync};
#else
const devmem_backend devmem_cuda = {.missing =
                                        "this build has no CUDA support (FA_BACKEND_CUDA off)"};
#endif
