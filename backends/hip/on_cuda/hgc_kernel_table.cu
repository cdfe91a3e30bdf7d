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

/* The forwards of one dtype and head-dim class, for both key tiles, generic and MFMA (its
   instruction emulated, cdna/hg_mfma_emu.h). */
#define HGC_FWD(dt, hc)                                                         \
  HGC_ENTRY(hg_fwd_##dt##_hd##hc##_n32), HGC_ENTRY(hg_fwd_##dt##_hd##hc##_n64), \
      HGC_ENTRY(hg_fwd_mfma_##dt##_hd##hc##_n32), HGC_ENTRY(hg_fwd_mfma_##dt##_hd##hc##_n64),
/* The backward's main kernels of one tile (HG_BWD_TILES: all of them, whether in the HIP
   plugin's bundle or not), both dtypes, generic and MFMA. */
#define HGC_BWD(hc, bn, bm, amd)                              \
  HGC_ENTRY(hg_bwd_main_f16_hd##hc##_n##bn##_m##bm),          \
      HGC_ENTRY(hg_bwd_main_bf16_hd##hc##_n##bn##_m##bm),     \
      HGC_ENTRY(hg_bwd_main_mfma_f16_hd##hc##_n##bn##_m##bm), \
      HGC_ENTRY(hg_bwd_main_mfma_bf16_hd##hc##_n##bn##_m##bm),

static const struct {
  const char *name;
  const void *fn;
} hgc_table[] = {HGC_ENTRY(hg_bwd_dot_f16), HGC_ENTRY(hg_bwd_dot_bf16),
                 HGC_ENTRY(hg_bwd_convert_f16), HGC_ENTRY(hg_bwd_convert_bf16),
                 HGC_FWD(f16, 64) HGC_FWD(f16, 128) HGC_FWD(f16, 256) HGC_FWD(bf16, 64)
                     HGC_FWD(bf16, 128) HGC_FWD(bf16, 256) HG_BWD_TILES(HGC_BWD)};

extern "C" const void *hgc_kernel(const char *name) {
  for (size_t i = 0; i < sizeof hgc_table / sizeof hgc_table[0]; ++i)
    if (!strcmp(hgc_table[i].name, name)) return hgc_table[i].fn;
  return NULL;
}
