/*
 * ocl_internal.h: what the OpenCL plugin's files share. Devices are numbered in one list: for each
 * platform in clGetPlatformIDs order, each of its devices in clGetDeviceIDs(CL_DEVICE_TYPE_ALL)
 * order; fa_tensor.device.id for OpenCL memory is an index into that list.
 */
#ifndef FA_OPENCL_INTERNAL_H
#define FA_OPENCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "core/plugin.h"

#define OCL_MAX_DEVICES 32
#define OCL_MAX_HEAD_DIM 256

typedef struct ocl_device_info {
  cl_platform_id platform;
  cl_device_id id;
  char name[96];
  char platform_name[64];
  char vendor[64];
  cl_device_type type;
  cl_uint compute_units;
  cl_ulong local_mem;
  size_t max_work_group;
  int fp16; /* cl_khr_fp16: noted only; f16 storage works without it (vload_half) */
  /* CL_DEVICE_SINGLE_FP_CONFIG: fa_quantize needs CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT (IEEE
     division) for FP8 and CL_FP_DENORM (subnormals kept, as on the host) to match the CPU
     backend bit for bit */
  cl_device_fp_config single_fp;
  /* PoCL: the plugin's runs on it go one at a time, each finished before the next starts. PoCL
     (3.x, 5.x) keeps one loaded binary per (kernel, work-group size, widest grid) and releases a
     finished command's reference on the first entry of the kernel and work-group size it finds,
     which under concurrent commands of one kernel at different grid sizes can be another entry
     than the command took, and an assertion aborts the process. */
  int serialize_runs;
} ocl_device_info;

typedef struct ocl_state {
  int available;
  char reason[FA_REASON_LEN];
  int count;
  int default_device; /* the documented rule: FA_OPENCL_DEVICE, else the first GPU, else 0 */
  int kernels;        /* FA_OPENCL_KERNELS: -1 unset (by device type), 0 gpu, 1 cpu */
  ocl_device_info devices[OCL_MAX_DEVICES];
} ocl_state;

const ocl_state *ocl_state_get(void);
const char *ocl_error_name(cl_int e);

/* The GPU kernel set's forward kernel (FA_FWD in the program): forward_gpu.cl's for every head
   dim, or forward_gpu_pipelined.cl's up to head dim 128 with 16-byte or element-wise loads. The
   CPU kernel set has one forward (forward_cpu.cl) and carries OCL_FWD_TILED. */
enum { OCL_FWD_TILED = 1, OCL_FWD_PIPELINED_VEC = 2, OCL_FWD_PIPELINED = 3 };

/* The kernel set and tiles for a device and head dim (ocl_probe.c documents the rule):
   cpu: 1 for the CPU kernels (16 rows per work-item in vector lanes), 0 for the GPU kernels;
   br: query (or key) rows per work-group; bc: keys (or query rows) per local-memory tile;
   wg: work-items per work-group of every kernel but the GPU forward (OCL_GPU_FWD_WG, rows
   OCL_GPU_FWD_ROWS, keys OCL_GPU_FWD_KEYS per tile: fixed by forward_gpu*.cl);
   fwd: the forward kernel, OCL_FWD_* (ocl_plan gives OCL_FWD_TILED; decide() chooses). */
typedef struct ocl_tiles {
  int cpu, br, bc, wg, fwd;
} ocl_tiles;
#define OCL_GPU_FWD_WG 128
#define OCL_GPU_FWD_ROWS 64
#define OCL_GPU_FWD_KEYS 64
#define OCL_GPU_FWD_LOCAL_BYTES 36864           /* forward_gpu.cl: 2 x 17 KB + 2 KB */
#define OCL_GPU_FWD_PIPELINED_LOCAL_BYTES 38400 /* forward_gpu_pipelined.cl: 18 + 17 + 2.5 KB */
#define OCL_GPU_FWD_PIPELINED_MAX_HEAD_DIM 128
ocl_tiles ocl_plan(const ocl_device_info *dev, int head_dim);
/* The tile shape a call reports (fa_run_info tile_m x tile_n) for an operation. */
void ocl_tiles_reported(ocl_tiles t, int forward, int *tile_m, int *tile_n);

/* What decide() records in the decision's payload for run(): the device (an index into the
   probe's list) and the program's kernel set, tiles and forward kernel. */
typedef struct ocl_choice {
  int32_t device;
  ocl_tiles tiles;
} ocl_choice;
FA_DECISION_PAYLOAD_FITS(ocl_choice);

/* The program for (context, device, head dim, dtype, tiles), built at first use and cached;
   FA_ERR_BACKEND_FAILURE with the build log on a build failure. */
fa_status ocl_program_get(cl_context ctx, const ocl_device_info *dev, int head_dim, int dtype_code,
                          ocl_tiles tiles, cl_program *out);
/* fa_quantize's program (kernels/quantize.cl) for (context, device), cached the same way; built
   with -cl-fp32-correctly-rounded-divide-sqrt where the device has it. */
fa_status ocl_quantize_program_get(cl_context ctx, const ocl_device_info *dev, cl_program *out);
void ocl_program_release_all(void);

/* One call's context and queue (ocl_call.c). */
typedef struct ocl_call {
  const ocl_device_info *dev;
  cl_context ctx;
  cl_command_queue queue;
  int own_queue;
} ocl_call;
/* FA_ERR_OUT_OF_MEMORY or FA_ERR_BACKEND_FAILURE naming the OpenCL call that failed with e. */
fa_status ocl_fail(cl_int e, const char *what);
/* A 4-D tensor as the kernels take it: (element offset, the four strides, 0, 0, 0); and a 3-D one
   (LSE, descale) as (element offset, the three strides), all 0 for NULL. */
cl_long8 ocl_desc4(const fa_tensor *t);
cl_long4 ocl_desc3(const fa_tensor *t);
/* c->ctx: the context of first's buffer (first_name in messages), which must hold dev, device
   dev_id of the tensor named dev_tensor. */
fa_status ocl_call_context(ocl_call *c, const ocl_device_info *dev, const char *dev_tensor,
                           int32_t dev_id, const fa_tensor *first, const char *first_name);
/* c->queue: stream (a cl_command_queue) or one made for the call; on PoCL the call's turn. */
fa_status ocl_call_start(ocl_call *c, void *stream);
/* After the call's kernels: finishes an own queue (and any on PoCL) and releases what start took;
   returns st, or the finish's error. */
fa_status ocl_call_end(ocl_call *c, fa_status st);

/* Kernel arguments appended in order; the first error is kept. */
typedef struct ocl_args {
  cl_kernel k;
  cl_uint n;
  cl_int err;
} ocl_args;

static inline void ocl_arg(ocl_args *a, size_t size, const void *value) {
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->k, a->n, size, value);
  a->n++;
}

void ocl_probe(fa_plugin_probe *out);
void ocl_decide(const fa_request *req, fa_decision *out);
fa_status ocl_run(const fa_request *req, const fa_decision *decision, void *workspace);
fa_status ocl_quantize(const fa_quantize_request *req, char *kernel);

#endif /* FA_OPENCL_INTERNAL_H */
