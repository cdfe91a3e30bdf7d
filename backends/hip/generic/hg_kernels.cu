/*
 * hg_kernels.cu: the generic kernels' entry points, one per dtype, head-dim class and tile,
 * compiled by hipcc (-x hip: code objects for the AMD targets) and by nvcc (the
 * hip-generic-on-cuda test plugin) from this one file through portable/fa_gpu_portable.h. The
 * names are what the host code (hg_host.c) looks kernels up by.
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

/* The backward's main kernel for each tile core/plan may choose (HG_BWD_TILES): hipcc compiles
   those of the HIP plugin's bundle (AMD = 1), nvcc (the test plugin) all. */
#define HG_BWD_KERNEL(dt, bf, mfma, tag, hc, bn, bm)                \
  FA_GPU_KERNEL void __launch_bounds__(HG_THREADS)                  \
      hg_bwd_main_##tag##dt##_hd##hc##_n##bn##_m##bm(hg_params p) { \
    hg_bwd_main<bf, hc, mfma, bn, bm>(p);                           \
  }
#define HG_BWD_SELECT_0(...)
#define HG_BWD_SELECT_1(...) HG_BWD_KERNEL(__VA_ARGS__)
#if defined(__HIPCC__)
#define HG_BWD_SELECT(amd) HG_BWD_SELECT_##amd
#else
#define HG_BWD_SELECT(amd) HG_BWD_SELECT_1
#endif
#define HG_BWD_GENERIC_F16(hc, bn, bm, amd) HG_BWD_SELECT(amd)(f16, 0, 0, , hc, bn, bm)
#define HG_BWD_GENERIC_BF16(hc, bn, bm, amd) HG_BWD_SELECT(amd)(bf16, 1, 0, , hc, bn, bm)
/* The same kernels with their products on CDNA's matrix instructions (cdna/hg_mfma.h; under nvcc
   the instruction's emulation, for the test plugin). */
#define HG_BWD_MFMA_F16(hc, bn, bm, amd) HG_BWD_SELECT(amd)(f16, 0, 1, mfma_, hc, bn, bm)
#define HG_BWD_MFMA_BF16(hc, bn, bm, amd) HG_BWD_SELECT(amd)(bf16, 1, 1, mfma_, hc, bn, bm)

#define HG_HD_KERNELS(dt, bf, hc) \
  HG_FWD_KERNELS(dt, bf, hc, 0, ) \
  HG_FWD_KERNELS(dt, bf, hc, 1, mfma_)

HG_DTYPE_KERNELS(f16, 0)
HG_DTYPE_KERNELS(bf16, 1)
HG_HD_KERNELS(f16, 0, 64)
HG_HD_KERNELS(f16, 0, 128)
HG_HD_KERNELS(f16, 0, 256)
HG_HD_KERNELS(bf16, 1, 64)
HG_HD_KERNELS(bf16, 1, 128)
HG_HD_KERNELS(bf16, 1, 256)
HG_BWD_TILES(HG_BWD_GENERIC_F16)
HG_BWD_TILES(HG_BWD_GENERIC_BF16)
HG_BWD_TILES(HG_BWD_MFMA_F16)
HG_BWD_TILES(HG_BWD_MFMA_BF16)
