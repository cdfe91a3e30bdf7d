/*
 * hg_kernels.cu: the generic kernels' entry points, one per dtype and head-dim class, compiled
 * by hipcc (-x hip: code objects for the AMD targets) and by nvcc (the hip-generic-on-cuda test
 * plugin) from this one file through portable/fa_gpu_portable.h. The names are what the host
 * code (hg_host.c) looks kernels up by.
 */
#include "backends/hip/generic/hg_bwd.h"
#include "backends/hip/generic/hg_fwd.h"

#define HG_DTYPE_KERNELS(dt, bf)                                                      \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS) hg_bwd_dot_##dt(hg_params p) {     \
    hg_bwd_dot<bf>(p);                                                                \
  }                                                                                   \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS) hg_bwd_convert_##dt(hg_params p) { \
    hg_bwd_convert<bf>(p);                                                            \
  }

/* The forward for both key tiles core/plan may choose (HG_FWD_TILE_N, HG_FWD_TILE_N_MAX). */
#define HG_FWD_KERNELS(dt, bf, hc, mfma, tag)                                                     \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS) hg_fwd_##tag##dt##_hd##hc##_n32(hg_params p) { \
    hg_fwd<bf, hc, mfma, 32>(p);                                                                  \
  }                                                                                               \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS) hg_fwd_##tag##dt##_hd##hc##_n64(hg_params p) { \
    hg_fwd<bf, hc, mfma, 64>(p);                                                                  \
  }

#define HG_HD_KERNELS(dt, bf, hc)                                                           \
  HG_FWD_KERNELS(dt, bf, hc, 0, )                                                           \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS) hg_bwd_main_##dt##_hd##hc(hg_params p) { \
    hg_bwd_main<bf, hc, 0>(p);                                                              \
  }

/* The same kernels with their products on CDNA's matrix instructions (cdna/hg_mfma.h; under nvcc
   the instruction's emulation, for the test plugin). */
#define HG_MFMA_KERNELS(dt, bf, hc)                                                              \
  HG_FWD_KERNELS(dt, bf, hc, 1, mfma_)                                                           \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS) hg_bwd_main_mfma_##dt##_hd##hc(hg_params p) { \
    hg_bwd_main<bf, hc, 1>(p);                                                                   \
  }

HG_DTYPE_KERNELS(f16, 0)
HG_DTYPE_KERNELS(bf16, 1)
HG_HD_KERNELS(f16, 0, 64)
HG_HD_KERNELS(f16, 0, 128)
HG_HD_KERNELS(f16, 0, 256)
HG_HD_KERNELS(bf16, 1, 64)
HG_HD_KERNELS(bf16, 1, 128)
HG_HD_KERNELS(bf16, 1, 256)
HG_MFMA_KERNELS(f16, 0, 64)
HG_MFMA_KERNELS(f16, 0, 128)
HG_MFMA_KERNELS(f16, 0, 256)
HG_MFMA_KERNELS(bf16, 1, 64)
HG_MFMA_KERNELS(bf16, 1, 128)
HG_MFMA_KERNELS(bf16, 1, 256)
