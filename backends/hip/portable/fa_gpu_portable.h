/*
 * fa_gpu_portable.h: the project's own portability layer for device code written once for AMD
 * (hipcc) and NVIDIA (nvcc). It maps thread and block indices, the wave/warp size, shuffles within
 * a group of lanes, dynamic shared memory, barriers, fp32 atomics, fp16/bf16 conversion and exp2
 * to each compiler's own spelling.
 *
 * Why not HIP's own NVIDIA path (hip/nvidia_detail): Debian's HIP 5.2 headers for it do not
 * compile against CUDA 13 (cudaDeviceProp members they read are gone), so shared device code
 * cannot run on an NVIDIA GPU through them. Only what the kernels here use is mapped.
 *
 * Shuffles: fa_gpu_shfl / fa_gpu_shfl_xor exchange within aligned groups of `width` lanes
 * (a power of two <= 32, so a group never straddles a CUDA warp or an AMD wave32/wave64); every
 * lane of the warp/wave must make the call (the kernels call them in uniform control flow).
 */
#ifndef FA_GPU_PORTABLE_H
#define FA_GPU_PORTABLE_H

#include <stdint.h>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define FA_GPU_TARGET "hip"
/* The wave size of the target being compiled (64 on CDNA's gfx9, 32 or 64 on RDNA). */
#define FA_GPU_WAVE_SIZE __AMDGCN_WAVEFRONT_SIZE
#elif defined(__CUDACC__)
#include <cuda_fp16.h>
#define FA_GPU_TARGET "cuda"
#define FA_GPU_WAVE_SIZE 32
#else
#error "fa_gpu_portable.h is for device code compiled by hipcc or nvcc"
#endif

#include "core/math/dtype.h"

#define FA_GPU_KERNEL extern "C" __global__
#define FA_GPU_DEVICE static __device__ __forceinline__

FA_GPU_DEVICE int fa_gpu_tid(void) { return (int)threadIdx.x; }
FA_GPU_DEVICE int fa_gpu_block_x(void) { return (int)blockIdx.x; }
FA_GPU_DEVICE int fa_gpu_block_y(void) { return (int)blockIdx.y; }
FA_GPU_DEVICE int fa_gpu_block_z(void) { return (int)blockIdx.z; }
FA_GPU_DEVICE int fa_gpu_grid_x(void) { return (int)gridDim.x; }
FA_GPU_DEVICE void fa_gpu_barrier(void) { __syncthreads(); }

/* The block's dynamic shared memory (the launch's smem bytes), 16-byte aligned. */
#define FA_GPU_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

#if defined(__HIPCC__)
FA_GPU_DEVICE float fa_gpu_shfl(float v, int src, int width) { return __shfl(v, src, width); }
FA_GPU_DEVICE float fa_gpu_shfl_xor(float v, int mask, int width) {
  return __shfl_xor(v, mask, width);
}
#else
FA_GPU_DEVICE float fa_gpu_shfl(float v, int src, int width) {
  return __shfl_sync(0xffffffffu, v, src, width);
}
FA_GPU_DEVICE float fa_gpu_shfl_xor(float v, int mask, int width) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
#endif

/* fp32 add to global memory; the result is not needed (lets both compilers use the no-return
   form). */
FA_GPU_DEVICE void fa_gpu_atomic_add(float *p, float v) { (void)atomicAdd(p, v); }

/* 2^x, the online softmax's exponential (scores are kept in log2 units). */
FA_GPU_DEVICE float fa_gpu_exp2(float x) { return exp2f(x); }

/* fp16 storage bits <-> float, round to nearest even, by the hardware conversion. */
#if defined(__HIPCC__)
FA_GPU_DEVICE float fa_gpu_f16_to_f32(uint16_t h) { return (float)__builtin_bit_cast(_Float16, h); }
FA_GPU_DEVICE uint16_t fa_gpu_f32_to_f16(float f) {
  return __builtin_bit_cast(uint16_t, (_Float16)f);
}
#else
FA_GPU_DEVICE float fa_gpu_f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
FA_GPU_DEVICE uint16_t fa_gpu_f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
#endif

/* bf16 storage bits <-> float: core/math/dtype.h's conversions (widening exact, narrowing to
   nearest even), the same rounding as every other backend. */
FA_GPU_DEVICE float fa_gpu_bf16_to_f32(uint16_t h) { return fa_bf16_to_f32(h); }
FA_GPU_DEVICE uint16_t fa_gpu_f32_to_bf16(float f) { return fa_f32_to_bf16(f); }

/* Storage type by a compile-time flag (BF16 = 1: bf16, 0: fp16). */
template <int BF16>
FA_GPU_DEVICE float fa_gpu_load(const uint16_t *p) {
  return BF16 ? fa_gpu_bf16_to_f32(*p) : fa_gpu_f16_to_f32(*p);
}
template <int BF16>
FA_GPU_DEVICE uint16_t fa_gpu_to_storage(float f) {
  return BF16 ? fa_gpu_f32_to_bf16(f) : fa_gpu_f32_to_f16(f);
}

#endif /* FA_GPU_PORTABLE_H */
