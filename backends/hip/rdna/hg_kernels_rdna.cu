/*
 * hg_kernels_rdna.cu: the kernels of generic/hg_kernels.cu for RDNA3 (gfx1100), compiled by
 * hipcc with -nogpulib (Debian's rocm-device-libs 5.2 has no gfx1100 bitcode) against the
 * substitutes of rdna/hg_nogpulib.h; the "mfma" kernels there use WMMA (cdna/hg_mfma.h).
 */
#include "backends/hip/rdna/hg_nogpulib.h"

#include "backends/hip/generic/hg_kernels.cu"
