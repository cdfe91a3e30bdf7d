/*
 * hip_arch.h: which AMD architectures this plugin carries code objects for, and the words
 * fa_backend_info uses when a device's is not among them. Pure functions (unit-tested without a
 * device by tests/hip/test_hip_arch.c).
 */
#ifndef FA_HIP_ARCH_H
#define FA_HIP_ARCH_H

#include <stddef.h>

/* The processor of a HIP gcnArchName ("gfx90a:sramecc+:xnack-" -> "gfx90a"), in out[n]. */
void hip_arch_base(const char *gcn_arch_name, char *out, size_t n);

/* 1 when base (as hip_arch_base gives it) is one of built ("gfx90a;gfx940" or "gfx90a,gfx940").
   A code object runs only on the processor it was compiled for: no family fallback. */
int hip_arch_built(const char *base, const char *built);

/* The reason a device of architecture base cannot run, in out[n]; 0 (and out "") when it can. */
int hip_arch_refusal(const char *device_name, const char *base, const char *built, char *out,
                     size_t n);

/* 1 when the plugin's MFMA kernels run on base: CDNA2 (gfx90a) and CDNA3 (gfx940), the
   processors hg_mfma.h compiles its matrix instructions for. */
int hip_arch_has_mfma(const char *base);

/* 1 when the plugin's matrix kernels use RDNA3's WMMA on base (gfx1100). */
int hip_arch_has_wmma(const char *base);

#endif /* FA_HIP_ARCH_H */
