/*
 * ocl_call.c: what every call of the plugin (run(), fa_quantize) does around its kernels. The
 * context is the buffers' own (clGetMemObjectInfo); the device is fa_tensor.device.id of the
 * probe's list, which must belong to that context; the queue is the caller's stream (a
 * cl_command_queue, left running as a CUDA stream would be) or one the plugin makes per call and
 * finishes before returning. On PoCL every call is finished before it returns, one at a time
 * (ocl_device_info.serialize_runs says why).
 */
#include <pthread.h>
#include <string.h>

#include "ocl_internal.h"

/* Held through a call on a device with serialize_runs. */
static pthread_mutex_t serial_runs = PTHREAD_MUTEX_INITIALIZER;

fa_status ocl_fail(cl_int e, const char *what) {
  fa_status st = (e == CL_OUT_OF_HOST_MEMORY || e == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                  e == CL_OUT_OF_RESOURCES)
                     ? FA_ERR_OUT_OF_MEMORY
                     : FA_ERR_BACKEND_FAILURE;
  return fa_core_set_error(st, "opencl: %s failed: %s (%d)", what, ocl_error_name(e), (int)e);
}

cl_long8 ocl_desc4(const fa_tensor *t) {
  cl_long8 d;
  memset(&d, 0, sizeof d);
  d.s[0] = (cl_long)(t->byte_offset / fa_dtype_size(t->dtype));
  for (int i = 0; i < 4; ++i) d.s[1 + i] = (cl_long)t->strides[i];
  return d;
}

cl_long4 ocl_desc3(const fa_tensor *t) {
  cl_long4 d;
  memset(&d, 0, sizeof d);
  if (!t) return d;
  d.s[0] = (cl_long)(t->byte_offset / fa_dtype_size(t->dtype));
  for (int i = 0; i < 3; ++i) d.s[1 + i] = (cl_long)t->strides[i];
  return d;
}

fa_status ocl_call_context(ocl_call *c, const ocl_device_info *dev, const char *dev_tensor,
                           int32_t dev_id, const fa_tensor *first, const char *first_name) {
  memset(c, 0, sizeof *c);
  c->dev = dev;
  cl_int e = clGetMemObjectInfo((cl_mem)first->data, CL_MEM_CONTEXT, sizeof c->ctx, &c->ctx, NULL);
  if (e != CL_SUCCESS)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "%s.data is not an OpenCL buffer (clGetMemObjectInfo: %s)", first_name,
                             ocl_error_name(e));
  cl_uint ndev = 0;
  cl_device_id devs[OCL_MAX_DEVICES];
  e = clGetContextInfo(c->ctx, CL_CONTEXT_DEVICES, sizeof devs, devs, NULL);
  clGetContextInfo(c->ctx, CL_CONTEXT_NUM_DEVICES, sizeof ndev, &ndev, NULL);
  int found = 0;
  for (cl_uint i = 0; e == CL_SUCCESS && i < ndev && i < OCL_MAX_DEVICES; ++i)
    found |= devs[i] == dev->id;
  if (!found)
    return fa_core_set_error(
        FA_ERR_INVALID_ARGUMENT,
        "%s.device.id = %d (%s) is not a device of the buffers' OpenCL context", dev_tensor,
        (int)dev_id, dev->name);
  return FA_OK;
}

fa_status ocl_call_start(ocl_call *c, void *stream) {
  c->queue = (cl_command_queue)stream;
  if (!c->queue) {
    cl_int e = CL_SUCCESS;
    c->queue = clCreateCommandQueue(c->ctx, c->dev->id, 0, &e);
    if (e != CL_SUCCESS) return ocl_fail(e, "clCreateCommandQueue");
    c->own_queue = 1;
  }
  /* On PoCL one call at a time, finished (the caller's queue too) before the next starts. */
  if (c->dev->serialize_runs) pthread_mutex_lock(&serial_runs);
  return FA_OK;
}

fa_status ocl_call_end(ocl_call *c, fa_status st) {
  if (c->own_queue || c->dev->serialize_runs) {
    cl_int e = clFinish(c->queue);
    if (st == FA_OK && e != CL_SUCCESS) st = ocl_fail(e, "clFinish");
  }
  if (c->dev->serialize_runs) pthread_mutex_unlock(&serial_runs);
  if (c->own_queue) clReleaseCommandQueue(c->queue);
  c->queue = NULL;
  c->own_queue = 0;
  return st;
}
