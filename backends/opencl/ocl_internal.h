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
} ocl_device_info;

typedef struct ocl_state {
  int available;
  char reason[FA_REASON_LEN];
  int count;
  int default_device; /* the documented rule: FA_OPENCL_DEVICE, else the first GPU, else 0 */
  ocl_device_info devices[OCL_MAX_DEVICES];
} ocl_state;

const ocl_state *ocl_state_get(void);
const char *ocl_error_name(cl_int e);

/* Tiles for a device and head dim (core/plan): rows per work-group and keys per local tile. */
typedef struct ocl_tiles {
  int br, bc;
} ocl_tiles;
ocl_tiles ocl_plan(const ocl_device_info *dev, int head_dim);

/* The program for (context, device, head dim, dtype, tiles), built at first use and cached;
   FA_ERR_BACKEND_FAILURE with the build log on a build failure. */
fa_status ocl_program_get(cl_context ctx, const ocl_device_info *dev, int head_dim, int dtype_code,
                          ocl_tiles tiles, cl_program *out);
void ocl_program_release_all(void);

void ocl_probe(fa_plugin_probe *out);
void ocl_decide(const fa_request *req, fa_decision *out);
fa_status ocl_run(const fa_request *req, const fa_decision *decision, void *workspace);

#endif /* FA_OPENCL_INTERNAL_H */
