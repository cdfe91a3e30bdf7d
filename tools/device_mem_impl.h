/*
 * device_mem_impl.h: what the parts of tools/device_mem share: the error helpers and one table of
 * functions per runtime (device_mem_cuda.c, device_mem_opencl.c), through which device_mem.c
 * dispatches by device kind.
 */
#ifndef FA_TOOLS_DEVICE_MEM_IMPL_H
#define FA_TOOLS_DEVICE_MEM_IMPL_H

#include <stddef.h>

#include "device_mem.h"

/* Writes the message to err (when err and n allow) and returns -1. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int devmem_set_err(char *err, size_t n, const char *fmt, ...);

/* Clears err and returns 0. */
int devmem_ok(char *err, size_t n);

/* One runtime's device memory. A build without the runtime has missing set (why) and no
   functions. The dispatcher has checked the pointers and handles bytes == 0 before copy,
   copy_on_device and memset (and dst == src before copy_on_device); alloc gets at least one byte.
 */
typedef struct devmem_backend {
  const char *missing;
  int (*name)(fa_device dev, char *name, size_t name_n, char *err, size_t n);
  int (*stream)(fa_device dev, void **stream, char *err, size_t n);
  int (*alloc)(fa_device dev, size_t bytes, void **ptr, char *err, size_t n);
  int (*free)(fa_device dev, void *ptr, char *err, size_t n);
  /* bytes between host memory and the device allocation, at byte offset dev_off inside it (dst
     is the allocation when to_device, src otherwise). */
  int (*copy)(fa_device dev, void *dst, const void *src, size_t dev_off, size_t bytes,
              int to_device, char *err, size_t n);
  int (*memset)(fa_device dev, void *ptr, size_t offset, int value, size_t bytes, char *err,
                size_t n);
  /* bytes from one allocation of dev to another, both device memory. */
  int (*copy_on_device)(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                        size_t n);
  int (*sync)(fa_device dev, char *err, size_t n);
  /* OpenCL only (NULL elsewhere): the default device rule, the device count, releasing every
     queue and context. */
  int (*default_device)(fa_device *dev, char *err, size_t n);
  int (*count)(int *count, char *err, size_t n);
  void (*shutdown)(void);
} devmem_backend;

extern const devmem_backend devmem_cuda;
extern const devmem_backend devmem_opencl;

#endif /* FA_TOOLS_DEVICE_MEM_IMPL_H */
