/*
 * device_mem.h: host-side device memory for the tests and tools (devmem_ prefix).
 *
 * Allocates, fills, copies and frees the memory a backend computes on, for a device kind:
 *   FA_DEVICE_CPU     plain malloc / memcpy / memset (sync does nothing)
 *   FA_DEVICE_CUDA    the CUDA runtime's C API (cudaMalloc, cudaMemcpy, cudaMemset,
 *                     cudaDeviceSynchronize, cudaFree) on device ordinal dev.id; only in builds
 *                     with the CUDA backend (FA_BACKEND_CUDA, which defines FA_DEVMEM_CUDA=1)
 *   FA_DEVICE_OPENCL  OpenCL 1.2 (clCreateBuffer, clEnqueueWriteBuffer / ReadBuffer, blocking,
 *                     clEnqueueCopyBuffer, clEnqueueFillBuffer, clFinish, clReleaseMemObject) on
 *                     global device dev.id; only in builds that found OpenCL (FA_DEVMEM_OPENCL=1)
 *   anything else     refused: "device memory for <kind> is not implemented"
 * (tools/device_mem.c dispatches; device_mem_cuda.c and device_mem_opencl.c hold the runtimes.)
 *
 * Every function returns 0 on success, or -1 with a message in err (n bytes, always terminated
 * when n > 0; err may be NULL). A CUDA failure's message names the call and carries
 * cudaGetErrorString's text; an OpenCL failure's names the call and the error code's name
 * ("clCreateBuffer(64 bytes) on opencl:0 failed: CL_INVALID_BUFFER_SIZE (-61)"). Nothing is
 * printed and nothing aborts.
 *
 * CUDA: copies are cudaMemcpy: synchronous for the host, ordered after the work already queued on
 * the default stream (the stream fa_* calls use when params.stream is NULL); a copy from device
 * memory to device memory is queued there and may return before it is done (devmem_sync waits).
 * A kernel's asynchronous error surfaces at the next copy or sync as that call's failure.
 *
 * OpenCL: the "pointer" of this API is the cl_mem handle itself (cast to void *), as fa_tensor.data
 * holds it for FA_DEVICE_OPENCL. Never add an offset to it: pass offsets to the *_at functions
 * (and to the library through fa_tensor.byte_offset). The global device list is every platform in
 * clGetPlatformIDs order, and within each platform every device in clGetDeviceIDs(platform,
 * CL_DEVICE_TYPE_ALL) order; dev.id indexes it. Per device, one context (that device alone) and
 * one in-order command queue are made at first use (thread-safe) and kept until devmem_shutdown()
 * or process exit. Copies block until done; memset and sync wait (clFinish) too, so the memory is
 * ready for any other queue of the same context (the plugin's own queue, for example).
 */
#ifndef FA_TOOLS_DEVICE_MEM_H
#define FA_TOOLS_DEVICE_MEM_H

#include <stddef.h>

#include "flash_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build can allocate memory of dev's kind (CPU always; CUDA with FA_DEVMEM_CUDA;
   OpenCL with FA_DEVMEM_OPENCL). Whether a device is present is only known at first use. */
int devmem_supported(fa_device_kind kind);

/* The device a backend uses by default for memory of this kind, so tests and tools put tensors
   where the plugin computes by default:
     FA_DEVICE_CPU -> {CPU, 0}; FA_DEVICE_CUDA -> {CUDA, 0}; FA_DEVICE_HIP -> {HIP, 0};
     FA_DEVICE_OPENCL -> the documented rule, as the OpenCL plugin applies it: if the environment
       variable FA_OPENCL_DEVICE is set and not empty, it must be a decimal index N of the global
       device list (read with strtol: leading spaces and a sign allowed, nothing after the digits)
       and gives {OPENCL, N}; anything else (not a number, negative, N >= the number of devices)
       is an error naming the variable. Unset or empty: the first device of type
       CL_DEVICE_TYPE_GPU in the global list, otherwise global device 0; no device is an error.
   The environment is read at every call; the device list once (until devmem_shutdown). */
int devmem_default_device(fa_device_kind kind, fa_device *dev, char *err, size_t n);

/* Number of OpenCL devices in the global list (0 when there is no platform) in *count. */
int devmem_opencl_device_count(int *count, char *err, size_t n);

/* The device's name as the runtime reports it (CUDA: cudaGetDeviceProperties' name; OpenCL:
   "<CL_DEVICE_NAME> (<CL_PLATFORM_NAME>)"; CPU: "host"). */
int devmem_device_name(fa_device dev, char *name, size_t name_n, char *err, size_t n);

/* The queue/stream devmem's copies go through, for params.stream: NULL for CPU and CUDA (the
   default stream), the device's cl_command_queue for OpenCL (owned by devmem: do not release). */
int devmem_stream(fa_device dev, void **stream, char *err, size_t n);

/* *ptr = bytes of device memory (bytes 0 allocates 1 byte, so *ptr is never NULL on success).
   OpenCL: a CL_MEM_READ_WRITE buffer in dev.id's context. */
int devmem_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n);

/* Frees what devmem_alloc returned (NULL is fine). */
int devmem_free(fa_device dev, void *ptr, char *err, size_t n);

/* bytes from host memory src to device memory dst (at byte offset dst_offset in the allocation:
   pointer arithmetic for CPU/CUDA, the copy's offset argument for OpenCL). */
int devmem_copy_to_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                          size_t n);
int devmem_copy_to_device_at(fa_device dev, void *dst, size_t dst_offset, const void *src,
                             size_t bytes, char *err, size_t n);

/* bytes from device memory src (at byte offset src_offset) to host memory dst. */
int devmem_copy_to_host(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                        size_t n);
int devmem_copy_to_host_at(fa_device dev, void *dst, const void *src, size_t src_offset,
                           size_t bytes, char *err, size_t n);

/* bytes from device memory src to device memory dst, both allocations of dev (from their
   starts; the ranges must not overlap, and dst == src copies nothing): memcpy on the CPU;
   cudaMemcpy(cudaMemcpyDeviceToDevice) on the default stream for CUDA, which may return before the
   copy is done (devmem_sync waits); clEnqueueCopyBuffer on devmem's queue of dev.id for OpenCL,
   finished (clFinish) before it returns, where a range past either buffer's end is refused. */
int devmem_copy_on_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                          size_t n);

/* Sets bytes of device memory at ptr (plus byte offset) to the byte value. */
int devmem_memset(fa_device dev, void *ptr, int value, size_t bytes, char *err, size_t n);
int devmem_memset_at(fa_device dev, void *ptr, size_t offset, int value, size_t bytes, char *err,
                     size_t n);

/* Waits until the device has finished all queued work (cudaDeviceSynchronize; clFinish on
   devmem's queue of dev.id); reports a kernel's asynchronous error. */
int devmem_sync(fa_device dev, char *err, size_t n);

/* Releases every OpenCL queue and context devmem made (and forgets the device list). Buffers still
   allocated keep their context alive until freed. Also registered with atexit at the first
   context; calling it earlier is fine, and later use starts afresh. */
void devmem_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* FA_TOOLS_DEVICE_MEM_H */
