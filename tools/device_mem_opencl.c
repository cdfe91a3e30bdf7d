/*
 * device_mem_opencl.c: device_mem's OpenCL memory, through the OpenCL 1.2 API and the ICD loader.
 * Compiled in only with FA_DEVMEM_OPENCL=1, which the build sets when CMake finds OpenCL; without
 * it the table says why there is no OpenCL memory.
 *
 * The global device list is every platform's devices in order, numbered the way the OpenCL plugin
 * numbers them; one context and one in-order queue per device are made at its first use.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "device_mem_impl.h"

#if defined(FA_DEVMEM_OPENCL) && FA_DEVMEM_OPENCL
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <pthread.h>

/* The name of an OpenCL error code ("CL_INVALID_VALUE"), or "unknown OpenCL error". */
static const char *cl_err_name(cl_int e) {
  switch (e) {
    case 0:
      return "CL_SUCCESS";
    case -1:
      return "CL_DEVICE_NOT_FOUND";
    case -2:
      return "CL_DEVICE_NOT_AVAILABLE";
    case -3:
      return "CL_COMPILER_NOT_AVAILABLE";
    case -4:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5:
      return "CL_OUT_OF_RESOURCES";
    case -6:
      return "CL_OUT_OF_HOST_MEMORY";
    case -7:
      return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case -8:
      return "CL_MEM_COPY_OVERLAP";
    case -9:
      return "CL_IMAGE_FORMAT_MISMATCH";
    case -10:
      return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
    case -11:
      return "CL_BUILD_PROGRAM_FAILURE";
    case -12:
      return "CL_MAP_FAILURE";
    case -13:
      return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case -14:
      return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -15:
      return "CL_COMPILE_PROGRAM_FAILURE";
    case -16:
      return "CL_LINKER_NOT_AVAILABLE";
    case -17:
      return "CL_LINK_PROGRAM_FAILURE";
    case -18:
      return "CL_DEVICE_PARTITION_FAILED";
    case -19:
      return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
    case -30:
      return "CL_INVALID_VALUE";
    case -31:
      return "CL_INVALID_DEVICE_TYPE";
    case -32:
      return "CL_INVALID_PLATFORM";
    case -33:
      return "CL_INVALID_DEVICE";
    case -34:
      return "CL_INVALID_CONTEXT";
    case -35:
      return "CL_INVALID_QUEUE_PROPERTIES";
    case -36:
      return "CL_INVALID_COMMAND_QUEUE";
    case -37:
      return "CL_INVALID_HOST_PTR";
    case -38:
      return "CL_INVALID_MEM_OBJECT";
    case -39:
      return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
    case -40:
      return "CL_INVALID_IMAGE_SIZE";
    case -41:
      return "CL_INVALID_SAMPLER";
    case -42:
      return "CL_INVALID_BINARY";
    case -43:
      return "CL_INVALID_BUILD_OPTIONS";
    case -44:
      return "CL_INVALID_PROGRAM";
    case -45:
      return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46:
      return "CL_INVALID_KERNEL_NAME";
    case -47:
      return "CL_INVALID_KERNEL_DEFINITION";
    case -48:
      return "CL_INVALID_KERNEL";
    case -49:
      return "CL_INVALID_ARG_INDEX";
    case -50:
      return "CL_INVALID_ARG_VALUE";
    case -51:
      return "CL_INVALID_ARG_SIZE";
    case -52:
      return "CL_INVALID_KERNEL_ARGS";
    case -53:
      return "CL_INVALID_WORK_DIMENSION";
    case -54:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case -55:
      return "CL_INVALID_WORK_ITEM_SIZE";
    case -56:
      return "CL_INVALID_GLOBAL_OFFSET";
    case -57:
      return "CL_INVALID_EVENT_WAIT_LIST";
    case -58:
      return "CL_INVALID_EVENT";
    case -59:
      return "CL_INVALID_OPERATION";
    case -60:
      return "CL_INVALID_GL_OBJECT";
    case -61:
      return "CL_INVALID_BUFFER_SIZE";
    case -62:
      return "CL_INVALID_MIP_LEVEL";
    case -63:
      return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -64:
      return "CL_INVALID_PROPERTY";
    case -65:
      return "CL_INVALID_IMAGE_DESCRIPTOR";
    case -66:
      return "CL_INVALID_COMPILER_OPTIONS";
    case -67:
      return "CL_INVALID_LINKER_OPTIONS";
    case -68:
      return "CL_INVALID_DEVICE_PARTITION_COUNT";
    case -69:
      return "CL_INVALID_PIPE_SIZE";
    case -70:
      return "CL_INVALID_DEVICE_QUEUE";
    case -71:
      return "CL_INVALID_SPEC_ID";
    case -72:
      return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
    case -1000:
      return "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR";
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    case -1002:
      return "CL_INVALID_D3D10_DEVICE_KHR";
    case -1057:
      return "CL_DEVICE_PARTITION_FAILED_EXT";
    case -1058:
      return "CL_INVALID_PARTITION_COUNT_EXT";
    case -1059:
      return "CL_INVALID_PARTITION_NAME_EXT";
    case -1121:
      return "CL_CONTEXT_TERMINATED_KHR";
    default:
      return "unknown OpenCL error";
  }
}

static int cl_fail(cl_int e, const char *call, int id, char *err, size_t n) {
  if (id >= 0)
    return devmem_set_err(err, n, "%s on opencl:%d failed: %s (%d)", call, id, cl_err_name(e),
                          (int)e);
  return devmem_set_err(err, n, "%s failed: %s (%d)", call, cl_err_name(e), (int)e);
}

/* One entry of the global device list; ctx and queue are made at the device's first use. */
typedef struct cl_slot {
  cl_platform_id platform;
  cl_device_id device;
  cl_device_type type;
  cl_context ctx;
  cl_command_queue queue;
} cl_slot;

static pthread_mutex_t g_cl_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_cl_listed;      /* the list below is valid */
static cl_slot *g_cl;        /* the global device list */
static int g_cl_count;       /* its length */
static int g_cl_atexit_done; /* devmem_shutdown registered with atexit */

/* Builds the global device list (under g_cl_mu), the way the plugin (backends/opencl) numbers
   devices: no platform (CL_PLATFORM_NOT_FOUND_KHR from the ICD loader) is no device, and a platform
   whose clGetDeviceIDs fails (CL_DEVICE_NOT_FOUND, a broken driver) contributes none. */
static int cl_list_locked(char *err, size_t n) {
  if (g_cl_listed) return 0;
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(0, NULL, &np);
  if (e == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (e == CL_SUCCESS && np == 0)) {
    g_cl = NULL;
    g_cl_count = 0;
    g_cl_listed = 1;
    return 0;
  }
  if (e != CL_SUCCESS) return cl_fail(e, "clGetPlatformIDs", -1, err, n);
  cl_platform_id *plats = (cl_platform_id *)calloc(np, sizeof *plats);
  if (!plats) return devmem_set_err(err, n, "out of host memory listing OpenCL platforms");
  e = clGetPlatformIDs(np, plats, NULL);
  if (e != CL_SUCCESS) {
    free(plats);
    return cl_fail(e, "clGetPlatformIDs", -1, err, n);
  }
  cl_slot *list = NULL;
  int count = 0;
  for (cl_uint p = 0; p < np; ++p) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
      continue;
    cl_device_id *devs = (cl_device_id *)calloc(nd, sizeof *devs);
    cl_slot *grown =
        devs ? (cl_slot *)realloc(list, sizeof *list * ((size_t)count + (size_t)nd)) : NULL;
    if (!grown) {
      free(devs);
      free(list);
      free(plats);
      return devmem_set_err(err, n, "out of host memory listing OpenCL devices");
    }
    list = grown;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, &nd) != CL_SUCCESS) nd = 0;
    for (cl_uint d = 0; d < nd; ++d) {
      cl_slot *s = &list[count++];
      memset(s, 0, sizeof *s);
      s->platform = plats[p];
      s->device = devs[d];
      if (clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof s->type, &s->type, NULL) != CL_SUCCESS)
        s->type = 0;
    }
    free(devs);
  }
  free(plats);
  g_cl = list;
  g_cl_count = count;
  g_cl_listed = 1;
  return 0;
}

static int cl_count(int *count, char *err, size_t n) {
  pthread_mutex_lock(&g_cl_mu);
  int r = cl_list_locked(err, n);
  *count = r ? 0 : g_cl_count;
  pthread_mutex_unlock(&g_cl_mu);
  return r;
}

static int cl_range(int id, int count, char *err, size_t n) {
  if (id >= 0 && id < count) return 0;
  if (count == 0) return devmem_set_err(err, n, "no OpenCL device (no platform lists a device)");
  return devmem_set_err(err, n, "opencl:%d does not exist: %d OpenCL device%s (0..%d)", id, count,
                        count == 1 ? "" : "s", count - 1);
}

/* The context and queue of global device id, made at first use. */
static int cl_get(int id, cl_context *ctx, cl_command_queue *queue, char *err, size_t n) {
  pthread_mutex_lock(&g_cl_mu);
  int r = cl_list_locked(err, n);
  if (!r) r = cl_range(id, g_cl_count, err, n);
  cl_slot *s = r ? NULL : &g_cl[id];
  if (s && !s->ctx) {
    cl_int e = CL_SUCCESS;
    const cl_context_properties props[3] = {CL_CONTEXT_PLATFORM, (cl_context_properties)s->platform,
                                            0};
    cl_context c = clCreateContext(props, 1, &s->device, NULL, NULL, &e);
    if (!c || e != CL_SUCCESS) {
      r = cl_fail(e, "clCreateContext", id, err, n);
    } else {
      /* In order (no CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE): each command after the previous. */
      cl_command_queue q = clCreateCommandQueue(c, s->device, 0, &e);
      if (!q || e != CL_SUCCESS) {
        clReleaseContext(c);
        r = cl_fail(e, "clCreateCommandQueue", id, err, n);
      } else {
        s->ctx = c;
        s->queue = q;
        if (!g_cl_atexit_done) g_cl_atexit_done = atexit(devmem_shutdown) == 0;
      }
    }
  }
  if (!r) {
    if (ctx) *ctx = s->ctx;
    if (queue) *queue = s->queue;
  }
  pthread_mutex_unlock(&g_cl_mu);
  return r;
}

/* Checks that [offset, offset + bytes) lies inside buffer mem (a clearer message than the copy's
   CL_INVALID_VALUE), and that mem is a buffer at all. */
static int cl_bounds(cl_mem mem, size_t offset, size_t bytes, const char *what, int id, char *err,
                     size_t n) {
  size_t size = 0;
  cl_int e = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (e != CL_SUCCESS) return cl_fail(e, "clGetMemObjectInfo(CL_MEM_SIZE)", id, err, n);
  if (offset > size || bytes > size - offset)
    return devmem_set_err(err, n, "%s: bytes %zu at offset %zu run past the buffer's %zu bytes",
                          what, bytes, offset, size);
  return 0;
}

static int cl_default(fa_device *dev, char *err, size_t n) {
  int count = 0;
  /* read as the plugin reads it (core/env.h) */
  long long v = 0;
  const fa_env_result set = fa_env_int("FA_OPENCL_DEVICE", 0, INT32_MAX, &v);
  if (set == FA_ENV_INVALID)
    return devmem_set_err(err, n, "FA_OPENCL_DEVICE='%s' is not a device index (a number from 0)",
                          getenv("FA_OPENCL_DEVICE"));
  if (set == FA_ENV_SET) {
    if (cl_count(&count, err, n)) return -1;
    if (v >= count) {
      if (count == 0)
        return devmem_set_err(err, n, "FA_OPENCL_DEVICE=%lld but there is no OpenCL device", v);
      return devmem_set_err(err, n, "FA_OPENCL_DEVICE=%lld but there %s %d OpenCL device%s (0..%d)",
                            v, count == 1 ? "is" : "are", count, count == 1 ? "" : "s", count - 1);
    }
    dev->kind = FA_DEVICE_OPENCL;
    dev->id = (int32_t)v;
    return devmem_ok(err, n);
  }
  pthread_mutex_lock(&g_cl_mu);
  int r = cl_list_locked(err, n);
  int pick = -1;
  if (!r) {
    count = g_cl_count;
    for (int i = 0; i < count && pick < 0; ++i)
      if (g_cl[i].type & CL_DEVICE_TYPE_GPU) pick = i;
    if (pick < 0 && count > 0) pick = 0;
  }
  pthread_mutex_unlock(&g_cl_mu);
  if (r) return -1;
  if (pick < 0) return devmem_set_err(err, n, "no OpenCL device (no platform lists a device)");
  dev->kind = FA_DEVICE_OPENCL;
  dev->id = (int32_t)pick;
  return devmem_ok(err, n);
}

#define CL_TRY(call, what)                                               \
  do {                                                                   \
    cl_int e_ = (call);                                                  \
    if (e_ != CL_SUCCESS) return cl_fail(e_, what, (int)dev.id, err, n); \
  } while (0)

static void cl_shutdown(void) {
  pthread_mutex_lock(&g_cl_mu);
  for (int i = 0; i < g_cl_count; ++i) {
    if (g_cl[i].queue) {
      (void)clFinish(g_cl[i].queue);
      (void)clReleaseCommandQueue(g_cl[i].queue);
    }
    if (g_cl[i].ctx) (void)clReleaseContext(g_cl[i].ctx);
  }
  free(g_cl);
  g_cl = NULL;
  g_cl_count = 0;
  g_cl_listed = 0;
  pthread_mutex_unlock(&g_cl_mu);
}

static int cl_name(fa_device dev, char *name, size_t name_n, char *err, size_t n) {
  char dn[256] = "", pn[256] = "";
  pthread_mutex_lock(&g_cl_mu);
  int r = cl_list_locked(err, n);
  if (!r) r = cl_range((int)dev.id, g_cl_count, err, n);
  cl_int e = CL_SUCCESS;
  if (!r) {
    e = clGetDeviceInfo(g_cl[dev.id].device, CL_DEVICE_NAME, sizeof dn - 1, dn, NULL);
    if (e == CL_SUCCESS)
      e = clGetPlatformInfo(g_cl[dev.id].platform, CL_PLATFORM_NAME, sizeof pn - 1, pn, NULL);
  }
  pthread_mutex_unlock(&g_cl_mu);
  if (r) return -1;
  if (e != CL_SUCCESS) return cl_fail(e, "clGetDeviceInfo(CL_DEVICE_NAME)", dev.id, err, n);
  snprintf(name, name_n, "%s (%s)", dn, pn);
  return devmem_ok(err, n);
}

static int cl_stream(fa_device dev, void **stream, char *err, size_t n) {
  cl_command_queue q = NULL;
  if (cl_get((int)dev.id, NULL, &q, err, n)) return -1;
  *stream = (void *)q;
  return devmem_ok(err, n);
}

static int cl_alloc(fa_device dev, size_t bytes, void **ptr, char *err, size_t n) {
  cl_context ctx = NULL;
  if (cl_get((int)dev.id, &ctx, NULL, err, n)) return -1;
  cl_int e = CL_SUCCESS;
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
  if (!m || e != CL_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "clCreateBuffer(%zu bytes)", bytes);
    int r = cl_fail(e, what, (int)dev.id, err, n);
    cl_ulong max = 0;
    cl_device_id d = NULL;
    if (e == CL_INVALID_BUFFER_SIZE && err && n &&
        clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof d, &d, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max, &max, NULL) == CL_SUCCESS) {
      size_t u = strlen(err);
      snprintf(err + u, n - u, "; the device allocates at most %llu bytes at once",
               (unsigned long long)max);
    }
    return r;
  }
  *ptr = (void *)m;
  return devmem_ok(err, n);
}

static int cl_free(fa_device dev, void *ptr, char *err, size_t n) {
  CL_TRY(clReleaseMemObject((cl_mem)ptr), "clReleaseMemObject");
  return devmem_ok(err, n);
}

static int cl_copy(fa_device dev, void *dst, const void *src, size_t dev_off, size_t bytes,
                   int to_device, char *err, size_t n) {
  const char *name = to_device ? "devmem_copy_to_device" : "devmem_copy_to_host";
  cl_command_queue q = NULL;
  if (cl_get((int)dev.id, NULL, &q, err, n)) return -1;
  cl_mem m = to_device ? (cl_mem)dst : (cl_mem)(uintptr_t)src;
  if (cl_bounds(m, dev_off, bytes, name, (int)dev.id, err, n)) return -1;
  if (to_device) {
    CL_TRY(clEnqueueWriteBuffer(q, m, CL_TRUE, dev_off, bytes, src, 0, NULL, NULL),
           "clEnqueueWriteBuffer");
  } else {
    CL_TRY(clEnqueueReadBuffer(q, m, CL_TRUE, dev_off, bytes, dst, 0, NULL, NULL),
           "clEnqueueReadBuffer");
  }
  return devmem_ok(err, n);
}

static int cl_memset(fa_device dev, void *ptr, size_t offset, int value, size_t bytes, char *err,
                     size_t n) {
  cl_command_queue q = NULL;
  if (cl_get((int)dev.id, NULL, &q, err, n)) return -1;
  cl_mem m = (cl_mem)ptr;
  if (cl_bounds(m, offset, bytes, "devmem_memset", (int)dev.id, err, n)) return -1;
  const unsigned char byte = (unsigned char)value;
  CL_TRY(clEnqueueFillBuffer(q, m, &byte, 1, offset, bytes, 0, NULL, NULL), "clEnqueueFillBuffer");
  /* Finished before returning, so another queue (the plugin's) sees the bytes. */
  CL_TRY(clFinish(q), "clFinish");
  return devmem_ok(err, n);
}

static int cl_copy_on_device(fa_device dev, void *dst, const void *src, size_t bytes, char *err,
                             size_t n) {
  cl_command_queue q = NULL;
  if (cl_get((int)dev.id, NULL, &q, err, n)) return -1;
  cl_mem d = (cl_mem)dst, s = (cl_mem)(uintptr_t)src;
  if (cl_bounds(s, 0, bytes, "devmem_copy_on_device (source)", (int)dev.id, err, n) ||
      cl_bounds(d, 0, bytes, "devmem_copy_on_device (destination)", (int)dev.id, err, n))
    return -1;
  CL_TRY(clEnqueueCopyBuffer(q, s, d, 0, 0, bytes, 0, NULL, NULL), "clEnqueueCopyBuffer");
  /* Finished before returning, as the other copies are. */
  CL_TRY(clFinish(q), "clFinish");
  return devmem_ok(err, n);
}

static int cl_sync(fa_device dev, char *err, size_t n) {
  cl_command_queue q = NULL;
  if (cl_get((int)dev.id, NULL, &q, err, n)) return -1;
  CL_TRY(clFinish(q), "clFinish");
  return devmem_ok(err, n);
}

const devmem_backend devmem_opencl = {.name = cl_name,
                                      .stream = cl_stream,
                                      .alloc = cl_alloc,
                                      .free = cl_free,
                                      .copy = cl_copy,
                                      .memset = cl_memset,
                                      .copy_on_device = cl_copy_on_device,
                                      .sync = cl_sync,
                                      .default_device = cl_default,
                                      .count = cl_count,
                                      .shutdown = cl_shutdown};
#else
const devmem_backend devmem_opencl = {
    .missing = "this build has no OpenCL support (OpenCL not found at configure time)"};
#endif
