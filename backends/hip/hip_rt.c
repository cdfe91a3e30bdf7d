/*
 * hip_rt.c: libamdhip64 loaded with dlopen, its functions looked up by name (hip_rt.h). Loaded
 * once per process and never unloaded: the HIP runtime starts threads and keeps state that a
 * dlclose would pull out from under them.
 */
#include "hip_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static hip_rt rt;
static char rt_why[256];
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

/* dlsym's object pointer stored into a function pointer without a cast between the two kinds
   (which ISO C leaves undefined and -Wpedantic flags). */
static int lookup(void *lib, const char *name, void *fn_slot, size_t size) {
  void *sym = dlsym(lib, name);
  if (!sym) {
    snprintf(rt_why, sizeof rt_why, "%s has no symbol %s (not a HIP runtime?)", rt.path, name);
    return 0;
  }
  memcpy(fn_slot, &sym, size);
  return 1;
}

#define LOOKUP(field, name) lookup(lib, name, &rt.field, sizeof rt.field)

static void load_once(void) {
  static const char *const names[] = {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
  void *lib = NULL;
  char errors[sizeof rt_why] = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; ++i) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      snprintf(rt.path, sizeof rt.path, "%s", names[i]);
    } else if (i + 1 == sizeof names / sizeof names[0]) {
      const char *e = dlerror(); /* the last name's message; the others say the same thing */
      snprintf(errors, sizeof errors, "%s", e ? e : "not found");
    }
  }
  if (!lib) {
    snprintf(rt_why, sizeof rt_why, "none of %s can be loaded (%s)", HIP_RT_LIBS, errors);
    return;
  }
  int ok = LOOKUP(GetDeviceCount, "hipGetDeviceCount") &&
           LOOKUP(GetDeviceProperties, "hipGetDeviceProperties") &&
           LOOKUP(RuntimeGetVersion, "hipRuntimeGetVersion") &&
           LOOKUP(GetErrorName, "hipGetErrorName") && LOOKUP(GetErrorString, "hipGetErrorString") &&
           LOOKUP(GetLastError, "hipGetLastError") && LOOKUP(GetDevice, "hipGetDevice") &&
           LOOKUP(SetDevice, "hipSetDevice") && LOOKUP(Malloc, "hipMalloc") &&
           LOOKUP(Free, "hipFree") && LOOKUP(MemsetAsync, "hipMemsetAsync") &&
           LOOKUP(ModuleLoadData, "hipModuleLoadData") &&
           LOOKUP(ModuleGetFunction, "hipModuleGetFunction") &&
           LOOKUP(ModuleLaunchKernel, "hipModuleLaunchKernel");
  if (!ok) return; /* rt.lib stays NULL; the library stays loaded (see above) */
  rt.lib = lib;
}

const hip_rt *hip_rt_load(char *why, size_t n) {
  pthread_once(&rt_once, load_once);
  if (rt.lib) return &rt;
  if (why && n) snprintf(why, n, "%s", rt_why);
  return NULL;
}
