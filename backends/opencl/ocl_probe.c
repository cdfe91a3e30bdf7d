/*
 * ocl_probe.c: every OpenCL platform and device this process can see, read once, and the device
 * a caller gets by default. Two environment variables, read once:
 *   FA_OPENCL_DEVICE=N       the default device is device N of the list (else the first GPU,
 *                            else device 0)
 *   FA_OPENCL_KERNELS=cpu|gpu  the kernel set for every device, whatever its type (ocl_plan): the
 *                            tests run the GPU set on a CPU device with it
 * Any other value makes the backend unavailable, saying so.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/plan.h"
#include "ocl_internal.h"

static ocl_state state;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

const char *ocl_error_name(cl_int e) {
  switch (e) {
    case CL_SUCCESS:
      return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND:
      return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE:
      return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE:
      return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES:
      return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY:
      return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE:
      return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE:
      return "CL_INVALID_VALUE";
    case CL_INVALID_PLATFORM:
      return "CL_INVALID_PLATFORM";
    case CL_INVALID_DEVICE:
      return "CL_INVALID_DEVICE";
    case CL_INVALID_CONTEXT:
      return "CL_INVALID_CONTEXT";
    case CL_INVALID_COMMAND_QUEUE:
      return "CL_INVALID_COMMAND_QUEUE";
    case CL_INVALID_MEM_OBJECT:
      return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS:
      return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM:
      return "CL_INVALID_PROGRAM";
    case CL_INVALID_PROGRAM_EXECUTABLE:
      return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME:
      return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL:
      return "CL_INVALID_KERNEL";
    case CL_INVALID_ARG_INDEX:
      return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE:
      return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE:
      return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS:
      return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_DIMENSION:
      return "CL_INVALID_WORK_DIMENSION";
    case CL_INVALID_WORK_GROUP_SIZE:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE:
      return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_BUFFER_SIZE:
      return "CL_INVALID_BUFFER_SIZE";
    case -1001: /* CL_PLATFORM_NOT_FOUND_KHR */
      return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL platform)";
    default:
      return "an OpenCL error";
  }
}

static void describe(cl_platform_id p, cl_device_id d, ocl_device_info *o) {
  memset(o, 0, sizeof *o);
  o->platform = p;
  o->id = d;
  clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof o->platform_name - 1, o->platform_name, NULL);
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof o->name - 1, o->name, NULL);
  clGetDeviceInfo(d, CL_DEVICE_VENDOR, sizeof o->vendor - 1, o->vendor, NULL);
  clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof o->type, &o->type, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof o->compute_units, &o->compute_units, NULL);
  clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof o->local_mem, &o->local_mem, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof o->max_work_group, &o->max_work_group,
                  NULL);
  char ext[4096] = "";
  clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
  o->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
  clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof o->single_fp, &o->single_fp, NULL);
  o->serialize_runs = strstr(o->platform_name, "Portable Computing Language") != NULL;
}

static void probe_once(void) {
  ocl_state *s = &state;
  memset(s, 0, sizeof *s);
  cl_platform_id platforms[16];
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(16, platforms, &np);
  if (e != CL_SUCCESS || np == 0) {
    snprintf(s->reason, sizeof s->reason,
             "no OpenCL platform (%s): the ICD loader found no vendor library; install one "
             "(pocl-opencl-icd for CPUs, a GPU driver's ICD) or name it in OCL_ICD_VENDORS",
             e == CL_SUCCESS ? "none listed" : ocl_error_name(e));
    return;
  }
  for (cl_uint i = 0; i < np && i < 16 && s->count < OCL_MAX_DEVICES; ++i) {
    cl_device_id ids[OCL_MAX_DEVICES];
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, ids, &nd) != CL_SUCCESS)
      continue;
    for (cl_uint j = 0; j < nd && j < OCL_MAX_DEVICES && s->count < OCL_MAX_DEVICES; ++j)
      describe(platforms[i], ids[j], &s->devices[s->count++]);
  }
  if (s->count == 0) {
    snprintf(s->reason, sizeof s->reason, "OpenCL: %u platform(s) but no device", np);
    return;
  }
  s->default_device = 0;
  for (int i = 0; i < s->count; ++i)
    if (s->devices[i].type & CL_DEVICE_TYPE_GPU) {
      s->default_device = i;
      break;
    }
  s->kernels = -1;
  const char *kern = getenv("FA_OPENCL_KERNELS");
  if (kern && *kern) {
    if (strcmp(kern, "cpu") != 0 && strcmp(kern, "gpu") != 0) {
      snprintf(s->reason, sizeof s->reason,
               "FA_OPENCL_KERNELS=%s: expected cpu or gpu (unset: chosen by device type)", kern);
      return;
    }
    s->kernels = strcmp(kern, "cpu") == 0;
  }
  long long n;
  const fa_env_result dev = fa_env_int("FA_OPENCL_DEVICE", 0, (long long)s->count - 1, &n);
  if (dev == FA_ENV_INVALID) {
    snprintf(s->reason, sizeof s->reason,
             "FA_OPENCL_DEVICE=%s names no device (this process sees %d OpenCL device(s), "
             "numbered from 0)",
             getenv("FA_OPENCL_DEVICE"), s->count);
    return;
  }
  if (dev == FA_ENV_SET) s->default_device = (int)n;
  s->available = 1;
}

const ocl_state *ocl_state_get(void) {
  pthread_once(&state_once, probe_once);
  return &state;
}

/*
 * The kernel set, by CL_DEVICE_TYPE (FA_OPENCL_KERNELS=cpu|gpu overrides it, for tests):
 *
 *  - a CPU device gets the CPU kernels: one work-item per work-group, computing 64 query rows (or
 *    keys, in dK/dV) as four vectors of 16, a row in each lane of float16 vectors, against every
 *    key of a 64-key tile staged in local memory (br = 64, bc = 64 from core/plan with the
 *    device's local memory as the budget, a multiple of 8). A CPU OpenCL runtime (PoCL) runs a
 *    work-group as a loop over its work-items on one thread: it wants few work-items with long
 *    vector inner loops, and one is best: more work-items multiply PoCL's compile time (its
 *    work-item loops around every barrier) and run no faster.
 *  - any other device (GPU, accelerator) gets the GPU kernels, if it allows work-groups of 128
 *    and has 36 KB of local memory (else the CPU kernels, which need neither): the forward with
 *    128 work-items on a 64 x 64 tile, each computing a 4 x 8 block of scores and a 4-row block
 *    of the output from local memory (forward_gpu.cl, or forward_gpu_pipelined.cl where decide()
 *    picks it); the backward with a work-item per key or row (br = 64 per work-group) and bc from
 *    core/plan.
 */
ocl_tiles ocl_plan(const ocl_device_info *dev, int head_dim) {
  const ocl_state *s = ocl_state_get();
  int cpu = (dev->type & CL_DEVICE_TYPE_CPU) != 0;
  if (s->kernels >= 0) cpu = s->kernels;
  if (!cpu && (dev->max_work_group < OCL_GPU_FWD_WG || dev->local_mem < OCL_GPU_FWD_LOCAL_BYTES))
    cpu = 1;
  ocl_tiles t;
  if (cpu) {
    /* two d-wide tiles of bc rows (K and V, or Q and dO) are all the kernels stage */
    fa_tile_limits limits = {(size_t)dev->local_mem, 4, 8, 8, 64, 64};
    fa_tile_plan plan = fa_plan_tiles(&limits, head_dim);
    t.cpu = 1;
    t.bc = plan.tile_n;
    t.wg = 1;
    t.br = 64; /* four vectors of 16 rows, so each staged tile serves 64 */
    t.fwd = OCL_FWD_TILED;
  } else {
    /* the plan's four d-wide tiles leave room for the two the kernels stage and their LSE/D */
    fa_tile_limits limits = {(size_t)dev->local_mem, 4, 1, 1, 64, 64};
    fa_tile_plan plan = fa_plan_tiles(&limits, head_dim);
    t.cpu = 0;
    t.bc = plan.tile_n;
    t.wg = 64;
    t.br = 64;
    t.fwd = OCL_FWD_TILED; /* decide() picks the pipelined forward where it applies */
  }
  return t;
}

void ocl_tiles_reported(ocl_tiles t, int forward, int *tile_m, int *tile_n) {
  *tile_m = forward && !t.cpu ? OCL_GPU_FWD_ROWS : t.br;
  *tile_n = forward && !t.cpu ? OCL_GPU_FWD_KEYS : t.bc;
}

void ocl_probe(fa_plugin_probe *out) {
  const ocl_state *s = ocl_state_get();
  fa_probe_begin(out, s->available, s->reason, s->count);
  for (int i = 0; i < s->count; ++i) {
    const ocl_device_info *d = &s->devices[i];
    const int cpu_set = ocl_plan(d, 64).cpu;
    const int pipelined = !cpu_set && d->local_mem >= OCL_GPU_FWD_PIPELINED_LOCAL_BYTES;
    fa_probe_add_device(
        out, "ocl%d%s: %s (%s; platform %s; %s, %u CUs, %llu KiB local%s; %s kernels%s%s)", i,
        i == s->default_device ? " (default)" : "", d->name, d->vendor, d->platform_name,
        (d->type & CL_DEVICE_TYPE_GPU) ? "GPU" : ((d->type & CL_DEVICE_TYPE_CPU) ? "CPU" : "other"),
        d->compute_units, (unsigned long long)(d->local_mem / 1024),
        d->fp16 ? ", cl_khr_fp16" : ", no cl_khr_fp16", cpu_set ? "cpu" : "gpu",
        pipelined ? ", pipelined forward to head_dim 128" : "",
        d->serialize_runs ? "; one run at a time (PoCL)" : "");
  }
  snprintf(out->arch, sizeof out->arch, "OpenCL C 1.2 programs built at first use");
  snprintf(out->kernel_families, sizeof out->kernel_families, "flash");
  snprintf(out->dtypes, sizeof out->dtypes, "f32,f16,bf16");
}
