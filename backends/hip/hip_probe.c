/*
 * hip_probe.c: can this process run HIP kernels, and on which devices? Each reason is kept word
 * for word for fa_backend_info(): no AMD device (no KFD device file, or the runtime sees none),
 * no HIP runtime (libamdhip64 cannot be loaded), or a device whose architecture this build
 * carries no code object for.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hip_arch.h"
#include "hip_internal.h"
#include "hip_rt.h"

/* The architectures this plugin carries code objects for, from the build ("gfx90a;gfx940"). */
#ifndef FA_HIP_ARCHS
#define FA_HIP_ARCHS ""
#endif

/* The device file of AMD's kernel driver interface (KFD) that the ROCm runtime opens. */
#define HIP_KFD_PATH "/dev/kfd"

static hip_state state;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void describe_device(const hip_rt *rt, int id, hip_device_info *d) {
  memset(d, 0, sizeof *d);
  hipDeviceProp_t prop;
  memset(&prop, 0, sizeof prop);
  hipError_t e = rt->GetDeviceProperties(&prop, id);
  if (e != hipSuccess) {
    snprintf(d->reason, sizeof d->reason, "device %d: properties cannot be read (%s)", id,
             rt->GetErrorName(e));
    return;
  }
  snprintf(d->name, sizeof d->name, "%s", prop.name);
  hip_arch_base(prop.gcnArchName, d->arch, sizeof d->arch);
  d->lds_bytes = (int32_t)prop.sharedMemPerBlock;
  d->wave_size = prop.warpSize;
  d->cu_count = prop.multiProcessorCount;
  if (hip_arch_refusal(d->name, d->arch, FA_HIP_ARCHS, d->reason, sizeof d->reason)) return;
  d->usable = 1;
}

static void probe_once(void) {
  hip_state *s = &state;
  memset(s, 0, sizeof *s);
  /* ROCm reaches AMD GPUs through the KFD device file: without it nothing can run, and the
     runtime is not loaded. Loading it costs more than time: libamdhip64's initialisers keep an
     object per loading thread that is never freed when that thread exits (LeakSanitizer reports
     it when a short-lived thread makes the first call, as core.concurrency's threads do). */
  if (access(HIP_KFD_PATH, F_OK) != 0) {
    snprintf(s->reason, sizeof s->reason,
             "no AMD device: %s is absent (no amdgpu kernel driver with KFD); the HIP runtime "
             "was not loaded",
             HIP_KFD_PATH);
    return;
  }
  char why[256] = "";
  const hip_rt *rt = hip_rt_load(why, sizeof why);
  if (!rt) {
    snprintf(s->reason, sizeof s->reason,
             "no HIP runtime: %s; install the ROCm/HIP runtime (Debian: libamdhip64-5)", why);
    return;
  }
  int version = 0;
  rt->RuntimeGetVersion(&version);
  s->runtime_version = version;
  int count = 0;
  hipError_t e = rt->GetDeviceCount(&count);
  if (e == hipErrorNoDevice || (e == hipSuccess && count == 0)) {
    snprintf(s->reason, sizeof s->reason,
             "no AMD device: the HIP runtime (%s, version %d) sees none (%s)", rt->path, version,
             e == hipSuccess ? "device count 0" : rt->GetErrorName(e));
    rt->GetLastError(); /* not sticky for the caller */
    return;
  }
  if (e != hipSuccess) {
    snprintf(s->reason, sizeof s->reason, "no AMD device: hipGetDeviceCount failed: %s (%s)",
             rt->GetErrorName(e), rt->GetErrorString(e));
    rt->GetLastError();
    return;
  }
  if (count > HIP_MAX_DEVICES) count = HIP_MAX_DEVICES;
  s->device_count = count;
  for (int i = 0; i < count; ++i) {
    describe_device(rt, i, &s->devices[i]);
    if (s->devices[i].usable) s->available = 1;
  }
  if (!s->available)
    snprintf(s->reason, sizeof s->reason, "no usable AMD device: %s", s->devices[0].reason);
}

const hip_state *hip_state_get(void) {
  pthread_once(&state_once, probe_once);
  return &state;
}

void hip_probe(fa_plugin_probe *out) {
  const hip_state *s = hip_state_get();
  fa_probe_begin(out, s->available, s->reason, s->device_count);
  for (int i = 0; i < s->device_count; ++i) {
    const hip_device_info *d = &s->devices[i];
    fa_probe_add_device(out, "hip%d: %s (%s, %d CUs, wave%d, %d KiB LDS)%s%s", i, d->name, d->arch,
                        d->cu_count, d->wave_size, d->lds_bytes / 1024,
                        d->usable ? "" : " unusable: ", d->usable ? "" : d->reason);
  }
  snprintf(out->arch, sizeof out->arch, "{%s}, HIP runtime %d", FA_HIP_ARCHS,
           (int)s->runtime_version);
  /* kernel_family values: generic everywhere; mfma on CDNA, wmma on RDNA3 devices */
  snprintf(out->kernel_families, sizeof out->kernel_families, "generic,mfma,wmma");
  snprintf(out->dtypes, sizeof out->dtypes, "f16,bf16");
}
