/*
 * hgc_kernel_table.cu: the generic kernels compiled by nvcc for the hip-generic-on-cuda test
 * plugin (the MFMA kernels with their instruction emulated), and the name -> kernel table its
 * launcher looks them up in (the HIP plugin finds the same names in its module instead).
 */
#include <string.h>

#include "backends/hip/generic/hg_kernels.cu"
#include "backends/hip/on_cuda/hgc_kernels.h"

#define HGC_ENTRY(k) \
  { #k, (const void *)k }

static const struct {
  const char *name;
  const void *fn;
} hgc_table[] = {
    HGC_ENTRY(hg_bwd_dot_f16),         HGC_ENTRY(hg_bwd_dot_bf16),
    HGC_ENTRY(hg_bwd_convert_f16),     HGC_ENTRY(hg_bwd_convert_bf16),
    HGC_ENTRY(hg_fwd_f16_hd64),        HGC_ENTRY(hg_fwd_f16_hd128),
    HGC_ENTRY(hg_fwd_f16_hd256),       HGC_ENTRY(hg_fwd_bf16_hd64),
    HGC_ENTRY(hg_fwd_bf16_hd128),      HGC_ENTRY(hg_fwd_bf16_hd256),
    HGC_ENTRY(hg_bwd_main_f16_hd64),   HGC_ENTRY(hg_bwd_main_f16_hd128),
    HGC_ENTRY(hg_bwd_main_f16_hd256),  HGC_ENTRY(hg_bwd_main_bf16_hd64),
    HGC_ENTRY(hg_bwd_main_bf16_hd128), HGC_ENTRY(hg_bwd_main_bf16_hd256),
    /* the MFMA kernels, their instruction emulated (cdna/hg_mfma_emu.h) */
    HGC_ENTRY(hg_fwd_mfma_f16_hd64), HGC_ENTRY(hg_fwd_mfma_f16_hd128),
    HGC_ENTRY(hg_fwd_mfma_f16_hd256), HGC_ENTRY(hg_fwd_mfma_bf16_hd64),
    HGC_ENTRY(hg_fwd_mfma_bf16_hd128), HGC_ENTRY(hg_fwd_mfma_bf16_hd256),
    HGC_ENTRY(hg_bwd_main_mfma_f16_hd64), HGC_ENTRY(hg_bwd_main_mfma_f16_hd128),
    HGC_ENTRY(hg_bwd_main_mfma_f16_hd256), HGC_ENTRY(hg_bwd_main_mfma_bf16_hd64),
    HGC_ENTRY(hg_bwd_main_mfma_bf16_hd128), HGC_ENTRY(hg_bwd_main_mfma_bf16_hd256),
};

extern "C" const void *hgc_kernel(const char *name) {
  for (size_t i = 0; i < sizeof hgc_table / sizeof hgc_table[0]; ++i)
    if (!strcmp(hgc_table[i].name, name)) return hgc_table[i].fn;
  return NULL;
}
