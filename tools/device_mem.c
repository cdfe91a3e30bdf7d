/*
 * device_mem.c: see device_mem.h. The API checks its arguments and dispatches by device kind:
 * host memory here, CUDA memory in device_mem_cuda.c, OpenCL memory in device_mem_opencl.c
 * (each compiled in only where the build has that runtime).
 */
#include "device_mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_mem_impl.h"

int devmem_set_err(char *err, size_t n, const char *fmt, ...) {
  if (err && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int devmem_ok(char *err, size_t n) {
  if (err && n) err[0] = '\0';
  return 0;
}

/* ----------------------------------------------------------------------------------------------
 * Host memory: plain malloc / memcpy / memset; sync does nothing.
 * -------------------------------------------------------------------------------------------- */

static int host_name(fa_device dev, char *name, size_t name_n, char *err, size_t n) {
  (void)dev;
  snprintf(name, name_n, "host");
  return devmem_ok(err, n);
}

static int host_stream(fa_device dev, void **stream, char *err, size_t n) {
  (void)dev;
  *stream = NULL;
  return devmem_ok(err, n);
}

static int host_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n) {
  (void)dev;
  if (!(*ptr = malloc(bytes)))
    return devmem_set_err(err, n, "out of host memory allocating %zu bytes", bytes);
  return devmem_ok(err, n);
}

static int host_free(fa_device dev, void *ptr, char *err, size_t n) {
  (void)dev;
  free(ptr);
  return devmem_ok(err, n);
}

static int host_copy(fa_device dev, void *dst, const void *src, size_t dev_off, size_t bytes,
                     int to_device, char *err, size_t n) {
  (void)dev;
  if (to_device)
    dst = (unsigned char *)dst + dev_off;
  else
    src = (const unsigned char *)src + dev_off;
  if (dst != src) memmove(dst, src, bytes);
  return devmem_ok(err, n);
}

static int host_copy_on_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                               size_t n) {
  (void)dev;
  memcpy(dst, src, bytes);
  return devmem_ok(err, n);
}

static int host_memset(fa_device dev, void *ptr, size_t offset, int value, size_t bytes, char *err,
                       size_t n) {
  (void)dev;
  memset((unsigned char *)ptr + offset, value, bytes);
  return devmem_ok(err, n);
}

static int host_sync(fa_device dev, char *err, size_t n) {
  (void)dev;
  return devmem_ok(err, n);
}

static const devmem_backend devmem_host = {.name = host_name,
                                           .stream = host_stream,
                                           .alloc = host_alloc,
                                           .free = host_free,
                                           .copy = host_copy,
                                           .memset = host_memset,
                                           .copy_on_device = host_copy_on_device,
                                           .sync = host_sync};

/* The runtime of a device kind, or NULL with the reason in err (a kind device_mem has no memory
   for, or a runtime this build lacks). */
static const devmem_backend *backend_of(fa_device_kind kind, char *err, size_t n) {
  const devmem_backend *b = kind == FA_DEVICE_CPU      ? &devmem_host
                            : kind == FA_DEVICE_CUDA   ? &devmem_cuda
                            : kind == FA_DEVICE_OPENCL ? &devmem_opencl
                                                       : NULL;
  if (!b) {
    devmem_set_err(err, n, "device memory for %s is not implemented",
                   fa_device_kind_name((int32_t)kind));
    return NULL;
  }
  if (b->missing) {
    devmem_set_err(err, n, "%s", b->missing);
    return NULL;
  }
  return b;
}

/* ----------------------------------------------------------------------------------------------
 * The API
 * -------------------------------------------------------------------------------------------- */

void devmem_shutdown(void) {
  if (!devmem_opencl.missing) devmem_opencl.shutdown();
}

int devmem_supported(fa_device_kind kind) {
  return kind == FA_DEVICE_CPU || (kind == FA_DEVICE_CUDA && !devmem_cuda.missing) ||
         (kind == FA_DEVICE_OPENCL && !devmem_opencl.missing);
}

int devmem_default_device(fa_device_kind kind, fa_device *dev, char *err, size_t n) {
  if (!dev) return devmem_set_err(err, n, "devmem_default_device: dev is NULL");
  if (kind == FA_DEVICE_CPU || kind == FA_DEVICE_CUDA || kind == FA_DEVICE_HIP) {
    dev->kind = kind;
    dev->id = 0;
    return devmem_ok(err, n);
  }
  const devmem_backend *b = backend_of(kind, err, n);
  return b ? b->default_device(dev, err, n) : -1;
}

int devmem_opencl_device_count(int *count, char *err, size_t n) {
  if (!count) return devmem_set_err(err, n, "devmem_opencl_device_count: count is NULL");
  *count = 0;
  const devmem_backend *b = backend_of(FA_DEVICE_OPENCL, err, n);
  if (!b) return -1;
  return b->count(count, err, n) ? -1 : devmem_ok(err, n);
}

int devmem_device_name(fa_device dev, char *name, size_t name_n, char *err, size_t n) {
  if (!name || !name_n) return devmem_set_err(err, n, "devmem_device_name: no room for the name");
  name[0] = '\0';
  const devmem_backend *b = backend_of(dev.kind, err, n);
  return b ? b->name(dev, name, name_n, err, n) : -1;
}

int devmem_stream(fa_device dev, void **stream, char *err, size_t n) {
  if (!stream) return devmem_set_err(err, n, "devmem_stream: stream is NULL");
  *stream = NULL;
  const devmem_backend *b = backend_of(dev.kind, err, n);
  return b ? b->stream(dev, stream, err, n) : -1;
}

int devmem_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n) {
  if (!ptr) return devmem_set_err(err, n, "devmem_alloc: ptr is NULL");
  *ptr = NULL;
  const devmem_backend *b = backend_of(dev.kind, err, n);
  return b ? b->alloc(dev, bytes ? bytes : 1, ptr, err, n) : -1;
}

int devmem_free(fa_device dev, void *ptr, char *err, size_t n) {
  if (!ptr) return devmem_ok(err, n);
  const devmem_backend *b = backend_of(dev.kind, err, n);
  return b ? b->free(dev, ptr, err, n) : -1;
}

/* Both copy directions: the same checks, one direction apart. dev_off is the byte offset inside
   the device allocation (dst when to_device, src otherwise). */
static int copy_between(fa_device dev, void *dst, const void *src, size_t dev_off, size_t bytes,
                        int to_device, char *err, size_t n) {
  const char *name = to_device ? "devmem_copy_to_device" : "devmem_copy_to_host";
  if (bytes && (!dst || !src)) return devmem_set_err(err, n, "%s: NULL pointer", name);
  const devmem_backend *b = backend_of(dev.kind, err, n);
  if (!b) return -1;
  if (!bytes) return devmem_ok(err, n);
  return b->copy(dev, dst, src, dev_off, bytes, to_device, err, n);
}

int devmem_copy_to_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                          size_t n) {
  return copy_between(dev, dst, src, 0, bytes, 1, err, n);
}

int devmem_copy_to_device_at(fa_device dev, void *dst, size_t dst_offset, const void *src,
                             size_t bytes, char *err, size_t n) {
  return copy_between(dev, dst, src, dst_offset, bytes, 1, err, n);
}

int devmem_copy_to_host(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                        size_t n) {
  return copy_between(dev, dst, src, 0, bytes, 0, err, n);
}

int devmem_copy_to_host_at(fa_device dev, void *dst, const void *src, size_t src_offset,
                           size_t bytes, char *err, size_t n) {
  return copy_between(dev, dst, src, src_offset, bytes, 0, err, n);
}

int devmem_copy_on_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                          size_t n) {
  if (bytes && (!dst || !src)) return devmem_set_err(err, n, "devmem_copy_on_device: NULL pointer");
  const devmem_backend *b = backend_of(dev.kind, err, n);
  if (!b) return -1;
  if (!bytes || dst == src) return devmem_ok(err, n);
  return b->copy_on_device(dev, dst, src, bytes, err, n);
}

int devmem_memset_at(fa_device dev, void *ptr, size_t offset, int value, size_t bytes, char *err,
                     size_t n) {
  if (bytes && !ptr) return devmem_set_err(err, n, "devmem_memset: NULL pointer");
  const devmem_backend *b = backend_of(dev.kind, err, n);
  if (!b) return -1;
  if (!bytes) return devmem_ok(err, n);
  return b->memset(dev, ptr, offset, value, bytes, err, n);
}

int devmem_memset(fa_device dev, void *ptr, int value, size_t bytes, char *err, size_t n) {
  return devmem_memset_at(dev, ptr, 0, value, bytes, err, n);
}

int devmem_sync(fa_device dev, char *err, size_t n) {
  const devmem_backend *b = backend_of(dev.kind, err, n);
  return b ? b->sync(dev, err, n) : -1;
}
