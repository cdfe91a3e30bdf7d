/*
 * ocl_fma_peak.c: `ocl-fma-peak` measures an OpenCL device's fp32 FMA rate, the ceiling the
 * OpenCL backend's speed is quoted against (OpenCL has no tensor-core path on an NVIDIA GPU, so
 * its results are read as a share of this number).
 *
 *   ocl-fma-peak [--device N] [--seconds S]
 *
 * The device: --device N, else FA_OPENCL_DEVICE (a value naming no device is an error), else the
 * first GPU, else device 0, numbered as the OpenCL plugin numbers them (each platform in
 * clGetPlatformIDs order, its devices in clGetDeviceIDs(CL_DEVICE_TYPE_ALL) order). The kernel:
 * every work-item runs 16 independent chains x = fma(x, a, b) (no chain waits on another, so the
 * FMA pipes stay full), 64 fmas per loop trip, in float (or float16 on a CPU device, whose runtime
 * vectorises within a work-item); enough work-items to fill every compute unit many times over. The
 * launch is repeated with more trips until one takes about --seconds / 5 (default 1 s in all), then
 * timed 5 times with OpenCL's profiling events; the best is reported, counting 2 FLOPs per fma.
 * Output: one line per run, then `fma_peak_gflops=<G> device="<name>" platform="<name>"`.
 * Exit status 0, or 1 when no device or an OpenCL call failed (the reason on stderr).
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"

/* VT: float on a GPU (a work-item is a lane), float16 on a CPU (W = 16: PoCL runs work-items one
   after the other, and the vector type is what fills its SIMD lanes); 16 independent chains. */
static const char *kernel_source =
    "__kernel void fma_peak(__global float *out, float a, float b, int trips) {\n"
    "  const VT s = (VT)((float)get_global_id(0) * 1e-9f);\n"
    "  VT x0 = s, x1 = s + 0.1f, x2 = s + 0.2f, x3 = s + 0.3f, x4 = s + 0.4f, x5 = s + 0.5f,\n"
    "     x6 = s + 0.6f, x7 = s + 0.7f, x8 = s + 0.8f, x9 = s + 0.9f, x10 = s + 1.0f,\n"
    "     x11 = s + 1.1f, x12 = s + 1.2f, x13 = s + 1.3f, x14 = s + 1.4f, x15 = s + 1.5f;\n"
    "  const VT va = (VT)a, vb = (VT)b;\n"
    "  for (int t = 0; t < trips; ++t) {\n"
    "    for (int u = 0; u < 4; ++u) {\n"
    "      x0 = fma(x0, va, vb); x1 = fma(x1, va, vb); x2 = fma(x2, va, vb);\n"
    "      x3 = fma(x3, va, vb); x4 = fma(x4, va, vb); x5 = fma(x5, va, vb);\n"
    "      x6 = fma(x6, va, vb); x7 = fma(x7, va, vb); x8 = fma(x8, va, vb);\n"
    "      x9 = fma(x9, va, vb); x10 = fma(x10, va, vb); x11 = fma(x11, va, vb);\n"
    "      x12 = fma(x12, va, vb); x13 = fma(x13, va, vb); x14 = fma(x14, va, vb);\n"
    "      x15 = fma(x15, va, vb);\n"
    "    }\n"
    "  }\n"
    "  const VT r = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) +\n"
    "               ((x8 + x9) + (x10 + x11)) + ((x12 + x13) + (x14 + x15));\n"
    "#if W == 1\n"
    "  out[get_global_id(0)] = r;\n"
    "#else\n"
    "  vstore16(r, get_global_id(0), out);\n"
    "#endif\n"
    "}\n";

enum { FMAS_PER_TRIP = 64, MAX_DEVICES = 64 };

static int fail(const char *what, cl_int e) {
  fprintf(stderr, "ocl-fma-peak: %s failed (OpenCL error %d)\n", what, (int)e);
  return 1;
}

typedef struct dev_entry {
  cl_platform_id platform;
  cl_device_id id;
} dev_entry;

static int list_devices(dev_entry *list, int cap) {
  cl_platform_id platforms[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS) return 0;
  int n = 0;
  for (cl_uint i = 0; i < np && i < 16; ++i) {
    cl_device_id ids[MAX_DEVICES];
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &nd) != CL_SUCCESS)
      continue;
    for (cl_uint j = 0; j < nd && j < MAX_DEVICES && n < cap; ++j) {
      list[n].platform = platforms[i];
      list[n].id = ids[j];
      ++n;
    }
  }
  return n;
}

/* One timed launch: seconds of device time, or a negative value on failure. */
static double launch(cl_command_queue q, cl_kernel k, size_t global, size_t local, cl_int trips) {
  if (clSetKernelArg(k, 3, sizeof trips, &trips) != CL_SUCCESS) return -1.0;
  cl_event ev;
  cl_int e = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev);
  if (e != CL_SUCCESS) return -1.0;
  e = clWaitForEvents(1, &ev);
  cl_ulong t0 = 0, t1 = 0;
  if (e == CL_SUCCESS)
    e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
  if (e == CL_SUCCESS)
    e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  clReleaseEvent(ev);
  return e == CL_SUCCESS ? (double)(t1 - t0) * 1e-9 : -1.0;
}

int main(int argc, char **argv) {
  long want = -1;
  double seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      want = strtol(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = strtod(argv[++i], NULL);
      if (!(seconds > 0.0)) seconds = 1.0;
    } else {
      fprintf(stderr, "usage: ocl-fma-peak [--device N] [--seconds S]\n");
      return 2;
    }
  }
  dev_entry devs[MAX_DEVICES];
  const int n = list_devices(devs, MAX_DEVICES);
  if (n == 0) {
    fprintf(stderr, "ocl-fma-peak: no OpenCL device (no platform, or none with a device)\n");
    return 1;
  }
  if (want < 0) {
    long long v;
    const fa_env_result r = fa_env_int("FA_OPENCL_DEVICE", 0, n - 1, &v);
    if (r == FA_ENV_INVALID) {
      fprintf(stderr,
              "ocl-fma-peak: FA_OPENCL_DEVICE='%s' names no device (%d OpenCL device(s), "
              "numbered from 0)\n",
              getenv("FA_OPENCL_DEVICE"), n);
      return 1;
    }
    if (r == FA_ENV_SET) want = (long)v;
  }
  if (want < 0) {
    want = 0;
    for (int i = 0; i < n; ++i) {
      cl_device_type t = 0;
      clGetDeviceInfo(devs[i].id, CL_DEVICE_TYPE, sizeof t, &t, NULL);
      if (t & CL_DEVICE_TYPE_GPU) {
        want = i;
        break;
      }
    }
  }
  if (want >= n) {
    fprintf(stderr, "ocl-fma-peak: device %ld: there are %d OpenCL device(s)\n", want, n);
    return 1;
  }
  const dev_entry *d = &devs[want];
  char name[256] = "", pname[256] = "";
  cl_uint cus = 1;
  size_t max_wg = 1;
  clGetDeviceInfo(d->id, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  clGetPlatformInfo(d->platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  clGetDeviceInfo(d->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
  clGetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
  printf("# ocl-fma-peak: device %ld: %s (platform %s), %u compute units\n", want, name, pname,
         cus);

  cl_int e = CL_SUCCESS;
  cl_context ctx = clCreateContext(NULL, 1, &d->id, NULL, NULL, &e);
  if (e != CL_SUCCESS) return fail("clCreateContext", e);
  cl_command_queue q = clCreateCommandQueue(ctx, d->id, CL_QUEUE_PROFILING_ENABLE, &e);
  if (e != CL_SUCCESS) return fail("clCreateCommandQueue", e);
  cl_program prog = clCreateProgramWithSource(ctx, 1, &kernel_source, NULL, &e);
  if (e != CL_SUCCESS) return fail("clCreateProgramWithSource", e);
  cl_device_type type = 0;
  clGetDeviceInfo(d->id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  const int cpu = (type & CL_DEVICE_TYPE_CPU) != 0, width = cpu ? 16 : 1;
  e = clBuildProgram(prog, 1, &d->id,
                     cpu ? "-cl-std=CL1.2 -DVT=float16 -DW=16" : "-cl-std=CL1.2 -DVT=float -DW=1",
                     NULL, NULL);
  if (e != CL_SUCCESS) {
    char log[4096] = "";
    clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "ocl-fma-peak: build log:\n%s\n", log);
    return fail("clBuildProgram", e);
  }
  cl_kernel k = clCreateKernel(prog, "fma_peak", &e);
  if (e != CL_SUCCESS) return fail("clCreateKernel", e);

  /* A CPU: 1 (wide) work-item per group, 64 groups per compute unit; anything else 256 per group,
     64 groups per compute unit. */
  size_t local = cpu ? 1 : 256;
  if (local > max_wg) local = max_wg;
  const size_t global = (size_t)cus * 64 * local;
  cl_mem out =
      clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, global * (size_t)width * sizeof(float), NULL, &e);
  if (e != CL_SUCCESS) return fail("clCreateBuffer", e);
  const cl_float a = 0.999999f, b = 1e-7f;
  e = clSetKernelArg(k, 0, sizeof out, &out);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 1, sizeof a, &a);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 2, sizeof b, &b);
  if (e != CL_SUCCESS) return fail("clSetKernelArg", e);

  /* Grow the trip count until one launch takes a fifth of the time asked for. */
  cl_int trips = 4;
  double t = launch(q, k, global, local, trips); /* also the warm-up */
  while (t >= 0.0 && t < seconds / 5.0 && trips < (1 << 24)) {
    const double f = t > 1e-6 ? (seconds / 5.0) / t : 16.0;
    trips = (cl_int)(trips * (f > 16.0 ? 16.0 : (f < 1.2 ? 2.0 : f)));
    t = launch(q, k, global, local, trips);
  }
  if (t < 0.0) return fail("the timed kernel", CL_INVALID_VALUE);
  const double flops = 2.0 * FMAS_PER_TRIP * width * (double)trips * (double)global;
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    t = launch(q, k, global, local, trips);
    if (t <= 0.0) return fail("the timed kernel", CL_INVALID_VALUE);
    const double g = flops / t * 1e-9;
    printf("run %d: %zu work-items x %d fmas of %d lanes, %.3f ms, %.1f GFLOP/s\n", r, global,
           FMAS_PER_TRIP * trips, width, t * 1e3, g);
    if (g > best) best = g;
  }
  printf("fma_peak_gflops=%.1f device=\"%s\" platform=\"%s\"\n", best, name, pname);
  clReleaseMemObject(out);
  clReleaseKernel(k);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
