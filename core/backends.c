/*
 * backends.c: every backend the library knows, in one table: its id (api/flash_attn.h's
 * fa_backend_id), its name (the plugin is libfa_<name>.so), the memory it computes on, and why
 * this build lacks it (core/build_config.h, from cmake/backends.cmake). The table's order is
 * AUTO's order of preference: the accelerators first, the host last.
 */
#include <string.h>

#include "build_config.h"
#include "internal.h"

/* Every fa_backend_id but FA_BACKEND_AUTO, exactly once. */
static const fa_backend_def defs[] = {
    {FA_BACKEND_CUDA, "cuda", FA_DEVICE_CUDA, FA_BUILD_REASON_CUDA},
    {FA_BACKEND_HIP, "hip", FA_DEVICE_HIP, FA_BUILD_REASON_HIP},
    {FA_BACKEND_OPENCL, "opencl", FA_DEVICE_OPENCL, FA_BUILD_REASON_OPENCL},
    {FA_BACKEND_CPU, "cpu", FA_DEVICE_CPU, FA_BUILD_REASON_CPU},
};
_Static_assert(sizeof defs / sizeof defs[0] == FA_BACKEND_COUNT_ - 1,
               "one table entry per fa_backend_id but AUTO");

int fa_backend_def_count(void) { return (int)(sizeof defs / sizeof defs[0]); }

const fa_backend_def *fa_backend_def_at(int i) {
  return i >= 0 && i < fa_backend_def_count() ? &defs[i] : NULL;
}

const fa_backend_def *fa_backend_def_of(int32_t id) {
  for (int i = 0; i < fa_backend_def_count(); ++i)
    if (defs[i].id == id) return &defs[i];
  return NULL;
}

int fa_device_kind_known(int32_t kind) {
  for (int i = 0; i < fa_backend_def_count(); ++i)
    if ((int32_t)defs[i].owns == kind) return 1;
  return 0;
}

int fa_backend_candidates(int32_t backend, fa_device_kind memory, int32_t strict,
                          int32_t order[FA_BACKEND_COUNT_]) {
  int n = 0;
  if (backend != FA_BACKEND_AUTO) order[n++] = backend;
  for (int i = 0; i < fa_backend_def_count(); ++i)
    if (defs[i].id != backend && defs[i].owns == memory) order[n++] = defs[i].id;
  return strict && n > 1 ? 1 : n;
}
