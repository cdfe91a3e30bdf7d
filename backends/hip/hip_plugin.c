/*
 * hip_plugin.c: the HIP backend's entry point, decide and run. The kernels (backends/hip/generic,
 * compiled by hipcc for the architectures of FA_HIP_ARCHS) are embedded in the plugin as one
 * offload bundle, loaded per device with hipModuleLoadData on first use and launched with
 * hipModuleLaunchKernel, all through the runtime hip_rt.c loaded at run time. Calls are
 * asynchronous on params.stream, except a backward without a caller's workspace, whose hipFree
 * waits for the device.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/hip/generic/hg_host.h"
#include "hip_arch.h"
#include "hip_code_object.h"
#include "hip_internal.h"
#include "hip_rt.h"

#define HIP_PREFIX "hip.generic"
#define HIP_KERNELS HG_KERNEL_COUNT_MFMA

typedef struct hip_module_state {
  int loaded; /* 1: module and functions below are valid */
  hipModule_t module;
  char names[HIP_KERNELS][HG_KERNEL_NAME_LEN];
  hipFunction_t fns[HIP_KERNELS];
} hip_module_state;

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static hip_module_state modules[HIP_MAX_DEVICES];

static fa_status hip_failure(const hip_rt *rt, hipError_t e, const char *what) {
  rt->GetLastError();
  fa_status st = e == hipErrorOutOfMemory ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND_FAILURE;
  return fa_core_set_error(st, "hip: %s failed: %s (%s)", what, rt->GetErrorName(e),
                           rt->GetErrorString(e));
}

void hip_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  const hip_state *s = hip_state_get();
  if (!s->available) {
    fa_core_refuse(out, "%s", s->reason);
    return;
  }
  const int id = req->device.id;
  if (req->device.kind == FA_DEVICE_HIP && (id < 0 || id >= s->device_count)) {
    fa_core_refuse(out, "device id %d: this process sees %d HIP device(s)", id,
                   (int)s->device_count);
    return;
  }
  const hip_device_info *dev = req->device.kind == FA_DEVICE_HIP ? &s->devices[id] : NULL;
  if (dev && !dev->usable) {
    fa_core_refuse(out, "%s", dev->reason);
    return;
  }
  hg_target t = {HIP_PREFIX,
                 FA_DEVICE_HIP,
                 dev ? dev->name : "the device",
                 dev ? dev->lds_bytes : 64 * 1024,
                 !dev                           ? HG_MATRIX_NONE
                 : hip_arch_has_mfma(dev->arch) ? HG_MATRIX_MFMA
                 : hip_arch_has_wmma(dev->arch) ? HG_MATRIX_WMMA
                                                : HG_MATRIX_NONE,
                 0};
  hg_decide(req, &t, out);
}

/* The module on the current device, loaded once (caller holds no lock). */
static fa_status module_for(const hip_rt *rt, int id, hip_module_state **out) {
  pthread_mutex_lock(&modules_lock);
  hip_module_state *m = &modules[id];
  fa_status st = FA_OK;
  if (!m->loaded) {
    hipError_t e = rt->ModuleLoadData(&m->module, hip_code_object);
    if (e != hipSuccess) {
      st = hip_failure(rt, e, "hipModuleLoadData (the plugin's code objects)");
    } else {
      int n = hg_kernel_names(m->names, HIP_KERNELS, 1);
      for (int i = 0; i < n && i < HIP_KERNELS && st == FA_OK; ++i) {
        e = rt->ModuleGetFunction(&m->fns[i], m->module, m->names[i]);
        if (e != hipSuccess) st = hip_failure(rt, e, m->names[i]);
      }
      if (st == FA_OK) m->loaded = 1;
    }
  }
  pthread_mutex_unlock(&modules_lock);
  *out = m;
  return st;
}

typedef struct hip_ctx {
  const hip_rt *rt;
  hip_module_state *m;
} hip_ctx;

static fa_status hip_launch(void *ctx, const char *name, unsigned gx, unsigned gy, unsigned gz,
                            size_t smem, void *stream, const hg_params *p) {
  hip_ctx *c = ctx;
  for (int i = 0; i < HIP_KERNELS; ++i)
    if (!strcmp(c->m->names[i], name)) {
      void *args[] = {(void *)p};
      hipError_t e = c->rt->ModuleLaunchKernel(c->m->fns[i], gx, gy, gz, HG_THREADS, 1, 1,
                                               (unsigned)smem, (hipStream_t)stream, args, NULL);
      return e == hipSuccess ? FA_OK : hip_failure(c->rt, e, name);
    }
  return fa_core_set_error(FA_ERR_INTERNAL, "hip: no kernel %s in the module", name);
}

static fa_status hip_zero(void *ctx, void *ptr, size_t bytes, void *stream) {
  hip_ctx *c = ctx;
  hipError_t e = c->rt->MemsetAsync(ptr, 0, bytes, (hipStream_t)stream);
  return e == hipSuccess ? FA_OK : hip_failure(c->rt, e, "hipMemsetAsync");
}

static fa_status hip_alloc(void *ctx, void **ptr, size_t bytes, void *stream) {
  hip_ctx *c = ctx;
  (void)stream;
  hipError_t e = c->rt->Malloc(ptr, bytes);
  return e == hipSuccess ? FA_OK : hip_failure(c->rt, e, "hipMalloc (backward workspace)");
}

static fa_status hip_release(void *ctx, void *ptr, void *stream) {
  hip_ctx *c = ctx;
  (void)stream; /* hipFree waits for the device: the kernels above are done with it */
  hipError_t e = c->rt->Free(ptr);
  return e == hipSuccess ? FA_OK : hip_failure(c->rt, e, "hipFree");
}

fa_status hip_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  if (!decision->supported)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "hip: %s", decision->reason);
  const hip_rt *rt = hip_rt_load(NULL, 0);
  if (!rt) return fa_core_set_error(FA_ERR_BACKEND_UNAVAILABLE, "hip: no HIP runtime");
  const int id = req->device.id;
  int previous = -1;
  hipError_t e = rt->GetDevice(&previous);
  if (e != hipSuccess) return hip_failure(rt, e, "hipGetDevice");
  if (previous != id && (e = rt->SetDevice(id)) != hipSuccess)
    return hip_failure(rt, e, "hipSetDevice");
  hip_ctx ctx = {rt, NULL};
  fa_status st = module_for(rt, id, &ctx.m);
  if (st == FA_OK) {
    const hg_runtime hr = {&ctx, hip_launch, hip_zero, hip_alloc, hip_release};
    st = hg_run(&hr, req, decision, workspace);
  }
  if (previous != id) rt->SetDevice(previous);
  return st;
}

FA_PLUGIN_DEFINE(FA_BACKEND_HIP, "hip", hip_probe, hip_decide, hip_run, NULL, NULL, NULL)
