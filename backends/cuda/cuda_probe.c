/*
 * cuda_probe.c: can this process run CUDA kernels, and on which devices? Each reason a device
 * or the whole backend cannot run is kept word for word for fa_backend_info(): no driver library,
 * a driver older than the runtime the plugin was built with, no device, a device older than
 * sm_80, or an architecture this build carries no code for.
 *
 * The CUDA runtime is linked statically into the plugin (no libcudart needed at run time); the
 * driver (libcuda.so.1) is what must be present. Only attribute queries are made: no context is
 * created on any device until a call runs there.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "cuda_internal.h"

/* The architectures this plugin carries machine code for, from the build ("80;90"). */
#ifndef FA_CUDA_ARCHS
#define FA_CUDA_ARCHS ""
#endif

static cuda_state state;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

/* Machine code for sm_XY runs on sm_XZ with Z >= Y (same major); PTX is not embedded, so a major
   version the build does not list cannot run. */
static int arch_built(int major, int minor) {
  const char *p = FA_CUDA_ARCHS;
  while (*p) {
    int a = 0, n = 0;
    if (sscanf(p, "%d%n", &a, &n) != 1) break;
    if (a / 10 == major && a % 10 <= minor) return 1;
    p += n;
    while (*p && (*p < '0' || *p > '9')) ++p;
  }
  return 0;
}

static void describe_device(int id, cuda_device_info *d) {
  memset(d, 0, sizeof *d);
  int v = 0;
  if (cudaDeviceGetAttribute(&d->cc_major, cudaDevAttrComputeCapabilityMajor, id) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->cc_minor, cudaDevAttrComputeCapabilityMinor, id) != cudaSuccess) {
    snprintf(d->reason, sizeof d->reason, "device %d: attributes cannot be read (%s)", id,
             cudaGetErrorString(cudaGetLastError()));
    return;
  }
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, id) == cudaSuccess)
    d->sm_count = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, id) == cudaSuccess)
    d->smem_optin = v;
  /* FA_CUDA_SMEM_LIMIT=<bytes>: the device is treated as if it allowed no more shared memory per
     block, so a large GPU shows what a smaller one (an A100's 163 KiB, sm_86/89's 99 KiB) runs
     and refuses. Named in the device line; a malformed value is ignored. */
  long long bytes;
  if (fa_env_int("FA_CUDA_SMEM_LIMIT", 1, (long long)d->smem_optin - 1, &bytes) == FA_ENV_SET) {
    d->smem_optin = (int32_t)bytes;
    d->smem_limited = 1;
  }
  /* FA_CUDA_AS_SM80=1: a newer device is treated as sm_80 (kernel choice, dQ layout, the check
     below), so a plugin built as compute_80 PTX (FA_CUDA_ARCHS=80-virtual), which the driver
     compiles for the device at first use, runs the sm_80 code here. Named in the device line. */
  if (cuda_env_is_one("FA_CUDA_AS_SM80") && d->cc_major > 8) {
    d->cc_major = 8;
    d->cc_minor = 0;
    d->as_sm80 = 1;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, id) == cudaSuccess)
    snprintf(d->name, sizeof d->name, "%s", prop.name);
  else
    snprintf(d->name, sizeof d->name, "device %d", id);
  if (d->cc_major < 8) {
    snprintf(d->reason, sizeof d->reason, "%s is sm_%d%d; the fa2 kernels need sm_80 or newer",
             d->name, d->cc_major, d->cc_minor);
    return;
  }
  if (!arch_built(d->cc_major, d->cc_minor)) {
    snprintf(d->reason, sizeof d->reason,
             "%s is sm_%d%d: architecture not built (this plugin carries code for sm {%s}; "
             "rebuild with FA_CUDA_ARCHS including %d%d)",
             d->name, d->cc_major, d->cc_minor, FA_CUDA_ARCHS, d->cc_major, d->cc_minor);
    return;
  }
  d->usable = 1;
}

static void probe_once(void) {
  cuda_state *s = &state;
  memset(s, 0, sizeof *s);
  s->runtime_version = CUDART_VERSION;
  /* The runtime would find out too, but only as "insufficient driver"; say what is missing. */
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!drv) {
    const char *why = dlerror();
    snprintf(s->reason, sizeof s->reason,
             "no CUDA driver: libcuda.so.1 cannot be loaded (%s); install the NVIDIA driver",
             why ? why : "not found");
    return;
  }
  dlclose(drv);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  s->driver_version = driver;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver ||
      (e == cudaSuccess && driver < CUDART_VERSION && count == 0)) {
    snprintf(s->reason, sizeof s->reason,
             "CUDA driver too old: it supports CUDA %d.%d, the plugin was built with CUDA %d.%d",
             driver / 1000, (driver % 1000) / 10, CUDART_VERSION / 1000,
             (CUDART_VERSION % 1000) / 10);
    return;
  }
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
    snprintf(s->reason, sizeof s->reason, "no CUDA device (the driver, CUDA %d.%d, sees none)",
             driver / 1000, (driver % 1000) / 10);
    return;
  }
  if (e != cudaSuccess) {
    snprintf(s->reason, sizeof s->reason, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(e),
             cudaGetErrorString(e));
    cudaGetLastError();
    return;
  }
  if (count > CUDA_MAX_DEVICES) count = CUDA_MAX_DEVICES;
  s->device_count = count;
  for (int i = 0; i < count; ++i) {
    describe_device(i, &s->devices[i]);
    if (s->devices[i].usable) s->available = 1;
  }
  if (!s->available)
    snprintf(s->reason, sizeof s->reason, "no usable CUDA device: %s", s->devices[0].reason);
}

const cuda_state *cuda_state_get(void) {
  pthread_once(&state_once, probe_once);
  return &state;
}

void cuda_probe(fa_plugin_probe *out) {
  const cuda_state *s = cuda_state_get();
  fa_probe_begin(out, s->available, s->reason, s->device_count);
  for (int i = 0; i < s->device_count; ++i) {
    const cuda_device_info *d = &s->devices[i];
    fa_probe_add_device(out, "cuda%d: %s (sm_%d%d, %d SMs%s%s)%s%s", i, d->name, d->cc_major,
                        d->cc_minor, d->sm_count,
                        d->smem_limited ? ", shared memory limited by FA_CUDA_SMEM_LIMIT" : "",
                        d->as_sm80 ? ", run as sm_80 by FA_CUDA_AS_SM80" : "",
                        d->usable ? "" : " unusable: ", d->usable ? "" : d->reason);
  }
  snprintf(out->arch, sizeof out->arch, "sm {%s}, CUDA %d.%d runtime", FA_CUDA_ARCHS,
           CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  /* fa3: the Hopper forward, where FA_CUDA_ARCHS has 90 (sm_90a code). */
  snprintf(out->kernel_families, sizeof out->kernel_families, FA_CUDA_HAS_FA3 ? "fa2,fa3" : "fa2");
  /* FP8 inputs (the forward only): fa3's FP8 kernel, where a device is sm_90. */
  int fp8 = 0;
  for (int i = 0; i < s->device_count; ++i)
    fp8 |= FA_CUDA_HAS_FA3 && s->devices[i].usable && s->devices[i].cc_major == 9 &&
           !s->devices[i].as_sm80;
  snprintf(out->dtypes, sizeof out->dtypes, fp8 ? "f16,bf16,f8e4m3,f8e5m2" : "f16,bf16");
}

int cuda_env_is_one(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "1") == 0;
}
