/*
 * device.c: the DEVICE HOOK, how the suite puts tensors where a backend can read them.
 *
 * One entry per device kind. The whole host buffer (gaps included) goes to the device and comes
 * back whole, with the same strides and byte_offset, so the host-side checks (gaps untouched,
 * inputs unchanged) hold for device memory too. CPU: the library reads the host buffer itself.
 * CUDA and OpenCL: tools/device_mem on the device the backend uses by default
 * (devmem_default_device: cuda:0; for OpenCL FA_OPENCL_DEVICE, else the first GPU, else device 0),
 * a build without that runtime says so. CUDA: view.data = the device pointer (cudaMalloc /
 * cudaMemcpy). OpenCL: view.data = the cl_mem of a buffer the size of the whole host buffer
 * (clCreateBuffer / blocking clEnqueueWriteBuffer and ReadBuffer), view.byte_offset = the host
 * view's byte offset inside its buffer; nothing is ever added to the cl_mem handle. Index tensors
 * (cu_seqlens, seqused_k, block_table, cache lengths) and ALiBi slopes go the same way. HIP: no
 * copy routines yet; its cases fail with "not implemented in the suite yet", never counted as
 * passed.
 */
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "device_mem.h"

/* CPU: the library reads the host buffer directly, so copies are nothing. */
static int cpu_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)err, (void)n;
  d->view = host->t;
  d->mem = NULL;
  d->bytes = host->buf_elems * host->elem_bytes;
  return 0;
}
static int cpu_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)d, (void)host, (void)err, (void)n;
  return 0;
}
static int cpu_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  (void)d, (void)host, (void)err, (void)n;
  return 0;
}
static void cpu_release(dev_tensor *d) { memset(d, 0, sizeof *d); }

/* Device memory through tools/device_mem (CUDA, OpenCL; any kind device_mem learns later), on the
   device the backend uses by default. The whole buffer is copied at offset 0 and the view keeps
   the host's byte_offset, so the handle is used as device_mem returned it (for OpenCL it is a
   cl_mem, not an address). */
static int dm_alloc(dev_tensor *d, const tu_tensor *host, fa_device_kind kind, char *err,
                    size_t n) {
  memset(d, 0, sizeof *d);
  fa_device dev;
  if (devmem_default_device(kind, &dev, err, n)) return -1;
  const size_t bytes = host->buf_elems * host->elem_bytes;
  if (devmem_alloc(dev, bytes, &d->mem, err, n)) return -1;
  d->bytes = bytes;
  d->view = host->t; /* strides, shape, byte_offset as the host's (data = the buffer's start) */
  d->view.data = d->mem;
  d->view.device = dev;
  return 0;
}
static int dm_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  return devmem_copy_to_device(d->view.device, d->mem, host->buf, d->bytes, err, n);
}
static int dm_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  return devmem_copy_to_host(d->view.device, host->buf, d->mem, d->bytes, err, n);
}
static void dm_release(dev_tensor *d) {
  if (d->mem) (void)devmem_free(d->view.device, d->mem, NULL, 0);
  memset(d, 0, sizeof *d);
}
static int cuda_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  return dm_alloc(d, host, FA_DEVICE_CUDA, err, n);
}
static int opencl_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  return dm_alloc(d, host, FA_DEVICE_OPENCL, err, n);
}

/* Every device kind the suite has no copy routines for yet. */
static int todo(char *err, size_t n) {
  snprintf(err, n,
           "device memory for this backend is not implemented in the suite yet (see the "
           "DEVICE HOOK in tests/conformance/device.c)");
  return -1;
}
static int todo_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)host;
  memset(d, 0, sizeof *d);
  return todo(err, n);
}
static int todo_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)d, (void)host;
  return todo(err, n);
}
static int todo_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  (void)d, (void)host;
  return todo(err, n);
}
static void todo_release(dev_tensor *d) { memset(d, 0, sizeof *d); }

static const dev_ops g_dev_ops[] = {
    {FA_DEVICE_CPU, "cpu", cpu_alloc, cpu_copy_in, cpu_copy_out, cpu_release},
    {FA_DEVICE_CUDA, "cuda", cuda_alloc, dm_copy_in, dm_copy_out, dm_release},
    {FA_DEVICE_HIP, "hip", todo_alloc, todo_copy_in, todo_copy_out, todo_release},
    {FA_DEVICE_OPENCL, "opencl", opencl_alloc, dm_copy_in, dm_copy_out, dm_release},
};

const dev_ops *dev_ops_for(fa_device_kind kind) {
  for (size_t i = 0; i < sizeof g_dev_ops / sizeof g_dev_ops[0]; ++i)
    if (g_dev_ops[i].kind == kind) return &g_dev_ops[i];
  return &g_dev_ops[2]; /* no copy routines: every case fails with the reason */
}

int dev_put(const dev_ops *ops, dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  if (ops->alloc(d, host, err, n)) return -1;
  return ops->copy_in(d, host, err, n);
}

void dev_release_all(const dev_ops *ops, dev_tensor *d, tu_tensor *t, int n) {
  for (int i = 0; i < n; ++i) {
    ops->release(&d[i]);
    tu_free(&t[i]);
  }
}
