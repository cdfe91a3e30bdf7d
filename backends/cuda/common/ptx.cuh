/*
 * ptx.cuh: the few tensor-core and async-copy instructions the FlashAttention-2 kernels use,
 * as inline PTX (sm_80 and newer). Each wrapper is one instruction; the fragment layouts they
 * produce are the PTX ISA's (mma.m16n8k16 with .row.col operands):
 *   A (16x16): a0 = (row g, k 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B (16x8):  b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g)
 *   C (16x8):  c0,c1 = (row g, cols 2t, 2t+1), c2,c3 = (row g+8, cols 2t, 2t+1)
 * with g = lane / 4 and t = lane % 4.
 */
#ifndef FA_CUDA_PTX_CUH
#define FA_CUDA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* The storage types, each with its mma spelling and a float-pair packer. */
struct fa_f16 {
  typedef __half elem;
  static constexpr bool is_f16 = true;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<__half2 *>(&u));
  }
  static __device__ __forceinline__ elem from_float(float f) { return __float2half_rn(f); }
  static __device__ __forceinline__ float to_float(elem e) { return __half2float(e); }
};

struct fa_bf16 {
  typedef __nv_bfloat16 elem;
  static constexpr bool is_f16 = false;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u));
  }
  static __device__ __forceinline__ elem from_float(float f) { return __float2bfloat16_rn(f); }
  static __device__ __forceinline__ float to_float(elem e) { return __bfloat162float(e); }
};

/* d (16x8 f32) += a (16x16) * b (16x8), f16 or bf16 inputs. */
template <typename T>
__device__ __forceinline__ void mma_16816(float *d, const uint32_t *a, const uint32_t *b);

template <>
__device__ __forceinline__ void mma_16816<fa_f16>(float *d, const uint32_t *a, const uint32_t *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<fa_bf16>(float *d, const uint32_t *a, const uint32_t *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* The same, each matrix transposed on the way into registers. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* Two floats to shared memory at an 8-byte aligned address (one STS.64 whatever the compiler
   can prove of the alignment). */
__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

/* Four 8x8 b16 matrices from registers in the mma accumulator fragment's layout (r[i]: lane's
   row lane / 4, columns 2 (lane % 4) and + 1 of matrix i), stored as they are: lanes 8i..8i+7 give
   the addresses of the 16-byte memory rows of matrix i, which hold its rows. */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/* Four 8x8 b16 matrices from registers in the mma accumulator fragment's layout (r[i]: lane's
   row lane / 4, columns 2 (lane % 4) and + 1 of matrix i), each stored transposed: lanes
   8i..8i+7 give the addresses of the 16-byte memory rows of matrix i, which hold its columns. */
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/* 16 bytes global -> shared without passing through registers; src_bytes = 0 writes zeros
   (rows and columns past the tensor's end read nothing). */
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* Adds four floats to 16 aligned bytes of global memory, each element atomically: one vector
   reduction (sm_90) where four scalar ones, or two of float2, would queue in the memory pipe. */
__device__ __forceinline__ void red_add_v4_f32(float *p, float x, float y, float z, float w) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(x), "f"(y), "f"(z),
               "f"(w)
               : "memory");
}
#endif

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

#endif /* FA_CUDA_PTX_CUH */
