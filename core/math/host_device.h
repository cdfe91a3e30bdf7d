/*
 * fa_hd.h: one qualifier for functions core/ shares with device code.
 * Under nvcc/hipcc FA_HOST_DEVICE makes a function callable from host and device; elsewhere it is a
 * plain static inline. OpenCL C includes the same headers with FA_OPENCL_C defined.
 */
#ifndef FA_CORE_MATH_HOST_DEVICE_H
#define FA_CORE_MATH_HOST_DEVICE_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_HOST_DEVICE static inline __host__ __device__
#elif defined(FA_OPENCL_C)
#define FA_HOST_DEVICE static inline
#else
#define FA_HOST_DEVICE static inline
#endif

#endif /* FA_CORE_MATH_HOST_DEVICE_H */
