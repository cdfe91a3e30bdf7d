/*
 * device_mem.h: host-side device memory for the tests and tools (devmem_ prefix).
 *
 * Allocates, fills, copies and frees the memory a backend computes on, for a device kind:
 *   FA_DEVICE_CPU   plain malloc / memcpy / memset (sync does nothing)
 *   FA_DEVICE_CUDA  the CUDA runtime's C API (cudaMalloc, cudaMemcpy, cudaMemset,
 *                   cudaDeviceSynchronize, cudaFree) on device ordinal dev.id; only in builds with
 *                   the CUDA backend (FA_BACKEND_CUDA, which defines FA_DEVMEM_CUDA=1)
 *   anything else   refused: "device memory for <kind> is not implemented"
 *
 * Every function returns 0 on success, or -1 with a message in err (n bytes, always terminated
 * when n > 0; err may be NULL). A CUDA failure's message names the call and carries
 * cudaGetErrorString's text. Nothing is printed and nothing aborts.
 *
 * Copies are cudaMemcpy: synchronous for the host, ordered after the work already queued on the
 * default stream (the stream fa_* calls use when params.stream is NULL). A kernel's asynchronous
 * error surfaces at the next copy or sync as that call's failure.
 */
#ifndef FA_TOOLS_DEVICE_MEM_H
#define FA_TOOLS_DEVICE_MEM_H

#include <stddef.h>

#include "flash_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build can allocate memory of dev's kind (CPU always; CUDA with FA_DEVMEM_CUDA). */
int devmem_supported(fa_device_kind kind);

/* *ptr = bytes of device memory (bytes 0 allocates 1 byte, so *ptr is never NULL on success). */
int devmem_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n);

/* Frees what devmem_alloc returned (NULL is fine). */
int devmem_free(fa_device dev, void *ptr, char *err, size_t n);

/* bytes from host memory src to device memory dst. */
int devmem_copy_to_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                          size_t n);

/* bytes from device memory src to host memory dst. */
int devmem_copy_to_host(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                        size_t n);

/* Sets bytes of device memory at ptr to the byte value. */
int devmem_memset(fa_device dev, void *ptr, int value, size_t bytes, char *err, size_t n);

/* Waits until the device has finished all queued work (cudaDeviceSynchronize); reports a kernel's
   asynchronous error. */
int devmem_sync(fa_device dev, char *err, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* FA_TOOLS_DEVICE_MEM_H */
