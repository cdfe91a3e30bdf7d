/* hgc_kernels.h: the nvcc-compiled generic kernels by name (hgc_kernel_table.cu). */
#ifndef FA_HIP_HGC_KERNELS_H
#define FA_HIP_HGC_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel's host-side handle for cudaLaunchKernel, or NULL for an unknown name. */
const void *hgc_kernel(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* FA_HIP_HGC_KERNELS_H */
