/* nccl_lib.c: libnccl's functions looked up at run time (nccl_lib.h says why). */
#define _GNU_SOURCE /* dlinfo */
#include "nccl_lib.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define NCCL_SONAME "libnccl.so.2"

static nccl_lib lib;
static const nccl_lib *loaded;
static char failure[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer of any type (object to function pointer without a cast). */
static int find(void *handle, const char *name, void *fn, size_t fn_size, int required) {
  void *sym = dlsym(handle, name);
  if (!sym && required) {
    snprintf(failure, sizeof failure, "%s has no %s (an NCCL older than 2.7?)", lib.path, name);
    return 0;
  }
  memcpy(fn, &sym, fn_size);
  return 1;
}

#define FIND(field, name, required) find(handle, name, &lib.field, sizeof lib.field, required)

static void load(void) {
  void *handle = dlopen(NCCL_SONAME, RTLD_NOW | RTLD_NOLOAD);
  lib.already_loaded = handle != NULL;
  if (!handle) handle = dlopen(NCCL_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(failure, sizeof failure, "%s not found: %s", NCCL_SONAME, dlerror());
    return;
  }
  struct link_map *map = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
    snprintf(lib.path, sizeof lib.path, "%s", map->l_name);
  else
    snprintf(lib.path, sizeof lib.path, "%s", NCCL_SONAME);
  if (FIND(GetVersion, "ncclGetVersion", 1) && FIND(GetErrorString, "ncclGetErrorString", 1) &&
      FIND(GetLastError, "ncclGetLastError", 0) &&
      FIND(CommGetAsyncError, "ncclCommGetAsyncError", 1) &&
      FIND(CommUserRank, "ncclCommUserRank", 1) && FIND(CommCount, "ncclCommCount", 1) &&
      FIND(CommCuDevice, "ncclCommCuDevice", 1) && FIND(AllReduce, "ncclAllReduce", 1) &&
      FIND(GroupStart, "ncclGroupStart", 1) && FIND(GroupEnd, "ncclGroupEnd", 1) &&
      FIND(Send, "ncclSend", 1) && FIND(Recv, "ncclRecv", 1))
    loaded = &lib;
  /* A library lacking a function stays loaded: another user of the process may hold it too. */
}

const nccl_lib *nccl_lib_load(char *why, size_t why_len) {
  pthread_once(&once, load);
  if (!loaded && why && why_len) snprintf(why, why_len, "%s", failure);
  return loaded;
}
