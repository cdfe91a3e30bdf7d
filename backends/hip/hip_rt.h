/*
 * hip_rt.h: the HIP runtime functions the plugin calls, loaded from libamdhip64 at run time
 * (dlopen), so that libfa_hip.so loads on every machine and reports why it cannot run where the
 * runtime or an AMD device is missing. Types and enums come from the HIP headers the plugin was
 * built with (Debian's libamdhip64-dev, HIP 5.2); no function of theirs is linked.
 */
#ifndef FA_HIP_RT_H
#define FA_HIP_RT_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

typedef struct hip_rt {
  void *lib; /* dlopen handle; NULL: not loaded (reason in hip_rt_load's message) */
  char path[64];
  hipError_t (*GetDeviceCount)(int *count);
  hipError_t (*GetDeviceProperties)(hipDeviceProp_t *prop, int device);
  hipError_t (*RuntimeGetVersion)(int *version);
  const char *(*GetErrorName)(hipError_t e);
  const char *(*GetErrorString)(hipError_t e);
  hipError_t (*GetLastError)(void);
  hipError_t (*GetDevice)(int *device);
  hipError_t (*SetDevice)(int device);
  hipError_t (*Malloc)(void **ptr, size_t bytes);
  hipError_t (*Free)(void *ptr);
  hipError_t (*MemsetAsync)(void *dst, int value, size_t bytes, hipStream_t stream);
  hipError_t (*ModuleLoadData)(hipModule_t *module, const void *image);
  hipError_t (*ModuleGetFunction)(hipFunction_t *fn, hipModule_t module, const char *name);
  hipError_t (*ModuleLaunchKernel)(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                   hipStream_t stream, void **params, void **extra);
} hip_rt;

/* The library names tried, in order: the versioned name first (what a runtime package installs;
   the unversioned one comes only with the -dev package). */
#define HIP_RT_LIBS "libamdhip64.so.6, libamdhip64.so.5, libamdhip64.so"

/* Loads the runtime once; returns NULL with why (dlopen's or dlsym's message) in why[n]. */
const hip_rt *hip_rt_load(char *why, size_t n);

#endif /* FA_HIP_RT_H */
