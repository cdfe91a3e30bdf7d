/*
 * device_mem.c: see device_mem.h. The CUDA part is compiled only with FA_DEVMEM_CUDA=1 (set by the
 * build when the CUDA backend is built) and uses the CUDA runtime's C API, so this file stays C.
 */
#include "device_mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(FA_DEVMEM_CUDA) && FA_DEVMEM_CUDA
#include <cuda_runtime_api.h>
#define DEVMEM_HAVE_CUDA 1
#else
#define DEVMEM_HAVE_CUDA 0
#endif

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
set_err(char *err, size_t n, const char *fmt, ...) {
  if (err && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int ok(char *err, size_t n) {
  if (err && n) err[0] = '\0';
  return 0;
}

static int not_implemented(fa_device dev, char *err, size_t n) {
  return set_err(err, n, "device memory for %s is not implemented",
                 fa_device_kind_name((int32_t)dev.kind));
}

#if DEVMEM_HAVE_CUDA
static int cuda_fail(cudaError_t e, const char *call, fa_device dev, char *err, size_t n) {
  return set_err(err, n, "%s on cuda:%d failed: %s (%s)", call, (int)dev.id, cudaGetErrorString(e),
                 cudaGetErrorName(e));
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
#else
static int no_cuda(char *err, size_t n) {
  return set_err(err, n, "this build has no CUDA support (FA_BACKEND_CUDA off)");
}
#endif

int devmem_supported(fa_device_kind kind) {
  return kind == FA_DEVICE_CPU || (kind == FA_DEVICE_CUDA && DEVMEM_HAVE_CUDA);
}

int devmem_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n) {
  if (!ptr) return set_err(err, n, "devmem_alloc: ptr is NULL");
  *ptr = NULL;
  const size_t want = bytes ? bytes : 1;
  switch (dev.kind) {
    case FA_DEVICE_CPU:
      if (!(*ptr = malloc(want)))
        return set_err(err, n, "out of host memory allocating %zu bytes", want);
      return ok(err, n);
    case FA_DEVICE_CUDA:
#if DEVMEM_HAVE_CUDA
    {
      if (cuda_use(dev, err, n)) return -1;
      void *p = NULL;
      cudaError_t e = cudaMalloc(&p, want);
      if (e != cudaSuccess) {
        char what[64];
        snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", want);
        return cuda_fail(e, what, dev, err, n);
      }
      *ptr = p;
      return ok(err, n);
    }
#else
      return no_cuda(err, n);
#endif
    default:
      return not_implemented(dev, err, n);
  }
}

int devmem_free(fa_device dev, void *ptr, char *err, size_t n) {
  switch (dev.kind) {
    case FA_DEVICE_CPU:
      free(ptr);
      return ok(err, n);
    case FA_DEVICE_CUDA:
#if DEVMEM_HAVE_CUDA
      if (!ptr) return ok(err, n);
      if (cuda_use(dev, err, n)) return -1;
      CUDA_TRY(cudaFree(ptr), "cudaFree");
      return ok(err, n);
#else
      if (!ptr) return ok(err, n);
      return no_cuda(err, n);
#endif
    default:
      if (!ptr) return ok(err, n);
      return not_implemented(dev, err, n);
  }
}

/* Both copy directions: the same checks, one cudaMemcpy kind apart. */
static int copy_between(fa_device dev, void *dst, const void *src, size_t bytes, int to_device,
                        char *err, size_t n) {
  const char *name = to_device ? "devmem_copy_to_device" : "devmem_copy_to_host";
  if (bytes && (!dst || !src)) return set_err(err, n, "%s: NULL pointer", name);
  switch (dev.kind) {
    case FA_DEVICE_CPU:
      if (bytes && dst != src) memmove(dst, src, bytes);
      return ok(err, n);
    case FA_DEVICE_CUDA:
#if DEVMEM_HAVE_CUDA
      if (!bytes) return ok(err, n);
      if (cuda_use(dev, err, n)) return -1;
      if (to_device) {
        CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(host to device)");
      } else {
        CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(device to host)");
      }
      return ok(err, n);
#else
      (void)to_device;
      return no_cuda(err, n);
#endif
    default:
      return not_implemented(dev, err, n);
  }
}

int devmem_copy_to_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                          size_t n) {
  return copy_between(dev, dst, src, bytes, 1, err, n);
}

int devmem_copy_to_host(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                        size_t n) {
  return copy_between(dev, dst, src, bytes, 0, err, n);
}

int devmem_memset(fa_device dev, void *ptr, int value, size_t bytes, char *err, size_t n) {
  if (bytes && !ptr) return set_err(err, n, "devmem_memset: NULL pointer");
  switch (dev.kind) {
    case FA_DEVICE_CPU:
      if (bytes) memset(ptr, value, bytes);
      return ok(err, n);
    case FA_DEVICE_CUDA:
#if DEVMEM_HAVE_CUDA
      if (!bytes) return ok(err, n);
      if (cuda_use(dev, err, n)) return -1;
      CUDA_TRY(cudaMemset(ptr, value, bytes), "cudaMemset");
      return ok(err, n);
#else
      return no_cuda(err, n);
#endif
    default:
      return not_implemented(dev, err, n);
  }
}

int devmem_sync(fa_device dev, char *err, size_t n) {
  switch (dev.kind) {
    case FA_DEVICE_CPU:
      return ok(err, n);
    case FA_DEVICE_CUDA:
#if DEVMEM_HAVE_CUDA
      if (cuda_use(dev, err, n)) return -1;
      CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return ok(err, n);
#else
      return no_cuda(err, n);
#endif
    default:
      return not_implemented(dev, err, n);
  }
}
