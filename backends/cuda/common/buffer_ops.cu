/*
 * buffer_ops.cu: the element-wise steps a ring call takes over CUDA device tensors (the plugin's
 * buffer_op, cuda_buffer_ops.c; core/plugin.h's fa_buffer_op), each one launch on the caller's
 * stream. Tensors come as 4-D views of any strides (buffer_args.h), so one index decomposition
 * serves every rank; indices are int64 throughout, grids are capped and loop over the rest.
 *   fill:  dst (f32) = value
 *   copy:  dst = src widened to float and rounded to dst's dtype to nearest even
 *          (__float2half_rn, __float2bfloat16_rn), as the CPU's conversions do
 *   add:   dst (f32) += src widened to float
 *   merge: a block's output folded into the running one, one warp a row (z, i, h): both LSEs
 *          read, merged by core/'s rule (fa_softmax_merge_lse), the row's columns weighted
 *          with unfused multiplies and an add (__fmul_rn, __fadd_rn: the host's w1 * o + w2 * x
 *          without fma contraction; the weights come from the device's expf and logf, which may
 *          differ from the host's in the last bit), then the new LSE written after every lane
 *          has read the old one.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "buffer_args.h"
#include "core/math/softmax.h"
#include "flash_attn.h"
#include "ptx.cuh"

namespace {

constexpr int BUF_THREADS = 256;   /* element-wise kernels */
constexpr int MERGE_THREADS = 128; /* merge: 4 warps, a warp a row */
constexpr int64_t BUF_MAX_BLOCKS = 65535;

/* float32 as the traits of ptx.cuh spell f16 and bf16. */
struct buf_f32 {
  typedef float elem;
  static __device__ __forceinline__ elem from_float(float f) { return f; }
  static __device__ __forceinline__ float to_float(elem e) { return e; }
};

/* Logical element `idx`, row-major over the padded shape, as its 4 indices. */
struct buf_index {
  int64_t i[4];
};
__device__ __forceinline__ buf_index index_of(const cuda_buffer_view &v, int64_t idx) {
  buf_index x;
  x.i[3] = idx % v.shape[3];
  idx /= v.shape[3];
  x.i[2] = idx % v.shape[2];
  idx /= v.shape[2];
  x.i[1] = idx % v.shape[1];
  x.i[0] = idx / v.shape[1];
  return x;
}

/* The element offset of indices x in v. */
__device__ __forceinline__ int64_t offset_of(const cuda_buffer_view &v, const buf_index &x) {
  return x.i[0] * v.strides[0] + x.i[1] * v.strides[1] + x.i[2] * v.strides[2] +
         x.i[3] * v.strides[3];
}

__host__ __device__ __forceinline__ int64_t elements_of(const cuda_buffer_view &v) {
  return v.shape[0] * v.shape[1] * v.shape[2] * v.shape[3];
}

__global__ void __launch_bounds__(BUF_THREADS) buffer_fill(const cuda_buffer_args a) {
  const int64_t n = elements_of(a.dst);
  float *dst = static_cast<float *>(a.dst.data);
  for (int64_t idx = (int64_t)blockIdx.x * BUF_THREADS + threadIdx.x; idx < n;
       idx += (int64_t)gridDim.x * BUF_THREADS)
    dst[offset_of(a.dst, index_of(a.dst, idx))] = a.value;
}

/* dst and src have the same shape: one logical index, each tensor's own strides. */
template <typename D, typename S>
__global__ void __launch_bounds__(BUF_THREADS) buffer_copy(const cuda_buffer_args a) {
  const int64_t n = elements_of(a.dst);
  typename D::elem *dst = static_cast<typename D::elem *>(a.dst.data);
  const typename S::elem *src = static_cast<const typename S::elem *>(a.src.data);
  for (int64_t idx = (int64_t)blockIdx.x * BUF_THREADS + threadIdx.x; idx < n;
       idx += (int64_t)gridDim.x * BUF_THREADS) {
    const buf_index x = index_of(a.dst, idx);
    dst[offset_of(a.dst, x)] = D::from_float(S::to_float(src[offset_of(a.src, x)]));
  }
}

template <typename S>
__global__ void __launch_bounds__(BUF_THREADS) buffer_add(const cuda_buffer_args a) {
  const int64_t n = elements_of(a.dst);
  float *dst = static_cast<float *>(a.dst.data);
  const typename S::elem *src = static_cast<const typename S::elem *>(a.src.data);
  for (int64_t idx = (int64_t)blockIdx.x * BUF_THREADS + threadIdx.x; idx < n;
       idx += (int64_t)gridDim.x * BUF_THREADS) {
    const buf_index x = index_of(a.dst, idx);
    dst[offset_of(a.dst, x)] += S::to_float(src[offset_of(a.src, x)]);
  }
}

/* Warp w of the grid takes rows w, w + warps, ... of [b, n, h] (h fastest); every lane of a warp
   takes the same rows, so the warp stays converged at __syncwarp. dst, src: [b, n, h, d];
   dst_lse, src_lse: [1, b, h, n]. */
template <typename S>
__global__ void __launch_bounds__(MERGE_THREADS) buffer_merge(const cuda_buffer_args a) {
  const int64_t b = a.dst.shape[0], n = a.dst.shape[1], h = a.dst.shape[2], d = a.dst.shape[3];
  const int64_t rows = b * n * h;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (MERGE_THREADS / 32);
  float *dst = static_cast<float *>(a.dst.data);
  const typename S::elem *src = static_cast<const typename S::elem *>(a.src.data);
  float *dst_lse = static_cast<float *>(a.dst_lse.data);
  const float *src_lse = static_cast<const float *>(a.src_lse.data);
  for (int64_t w = (int64_t)blockIdx.x * (MERGE_THREADS / 32) + threadIdx.x / 32; w < rows;
       w += warps) {
    const int64_t hh = w % h, i = w / h % n, z = w / (h * n);
    const int64_t dl =
        z * a.dst_lse.strides[1] + hh * a.dst_lse.strides[2] + i * a.dst_lse.strides[3];
    const int64_t sl =
        z * a.src_lse.strides[1] + hh * a.src_lse.strides[2] + i * a.src_lse.strides[3];
    float w1, w2;
    const float lse = fa_softmax_merge_lse(dst_lse[dl], src_lse[sl], &w1, &w2);
    float *o = dst + z * a.dst.strides[0] + i * a.dst.strides[1] + hh * a.dst.strides[2];
    const typename S::elem *x =
        src + z * a.src.strides[0] + i * a.src.strides[1] + hh * a.src.strides[2];
    for (int64_t c = lane; c < d; c += 32) {
      float *oc = o + c * a.dst.strides[3];
      *oc = __fadd_rn(__fmul_rn(w1, *oc), __fmul_rn(w2, S::to_float(x[c * a.src.strides[3]])));
    }
    __syncwarp(); /* every lane has read dst_lse[dl] */
    if (lane == 0) dst_lse[dl] = lse;
  }
}

unsigned grid_of(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return (unsigned)(blocks < BUF_MAX_BLOCKS ? blocks : BUF_MAX_BLOCKS);
}

template <typename D>
void launch_copy(const cuda_buffer_args &a, unsigned grid, cudaStream_t st) {
  switch (a.src.dtype) {
    case FA_F32:
      buffer_copy<D, buf_f32><<<grid, BUF_THREADS, 0, st>>>(a);
      break;
    case FA_F16:
      buffer_copy<D, fa_f16><<<grid, BUF_THREADS, 0, st>>>(a);
      break;
    default:
      buffer_copy<D, fa_bf16><<<grid, BUF_THREADS, 0, st>>>(a);
      break;
  }
}

bool known_dtype(int32_t dt) { return dt == FA_F32 || dt == FA_F16 || dt == FA_BF16; }

}  // namespace

extern "C" int cuda_buffer_fill_launch(const cuda_buffer_args *a) {
  const int64_t n = elements_of(a->dst);
  if (n <= 0) return 0;
  if (a->dst.dtype != FA_F32) return (int)cudaErrorInvalidValue;
  const cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  buffer_fill<<<grid_of(n, BUF_THREADS), BUF_THREADS, 0, st>>>(*a);
  return (int)cudaGetLastError();
}

extern "C" int cuda_buffer_copy_launch(const cuda_buffer_args *a) {
  const int64_t n = elements_of(a->dst);
  if (n <= 0) return 0;
  if (!known_dtype(a->dst.dtype) || !known_dtype(a->src.dtype)) return (int)cudaErrorInvalidValue;
  const cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  const unsigned grid = grid_of(n, BUF_THREADS);
  switch (a->dst.dtype) {
    case FA_F32:
      launch_copy<buf_f32>(*a, grid, st);
      break;
    case FA_F16:
      launch_copy<fa_f16>(*a, grid, st);
      break;
    default:
      launch_copy<fa_bf16>(*a, grid, st);
      break;
  }
  return (int)cudaGetLastError();
}

extern "C" int cuda_buffer_add_launch(const cuda_buffer_args *a) {
  const int64_t n = elements_of(a->dst);
  if (n <= 0) return 0;
  if (a->dst.dtype != FA_F32 || !known_dtype(a->src.dtype)) return (int)cudaErrorInvalidValue;
  const cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  const unsigned grid = grid_of(n, BUF_THREADS);
  switch (a->src.dtype) {
    case FA_F32:
      buffer_add<buf_f32><<<grid, BUF_THREADS, 0, st>>>(*a);
      break;
    case FA_F16:
      buffer_add<fa_f16><<<grid, BUF_THREADS, 0, st>>>(*a);
      break;
    default:
      buffer_add<fa_bf16><<<grid, BUF_THREADS, 0, st>>>(*a);
      break;
  }
  return (int)cudaGetLastError();
}

extern "C" int cuda_buffer_merge_launch(const cuda_buffer_args *a) {
  /* Rows without columns (d = 0) still merge their LSEs. */
  const int64_t rows = a->dst.shape[0] * a->dst.shape[1] * a->dst.shape[2];
  if (rows <= 0) return 0;
  if (a->dst.dtype != FA_F32 || a->dst_lse.dtype != FA_F32 || a->src_lse.dtype != FA_F32 ||
      !known_dtype(a->src.dtype))
    return (int)cudaErrorInvalidValue;
  const cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  const unsigned grid = grid_of(rows, MERGE_THREADS / 32);
  switch (a->src.dtype) {
    case FA_F32:
      buffer_merge<buf_f32><<<grid, MERGE_THREADS, 0, st>>>(*a);
      break;
    case FA_F16:
      buffer_merge<fa_f16><<<grid, MERGE_THREADS, 0, st>>>(*a);
      break;
    default:
      buffer_merge<fa_bf16><<<grid, MERGE_THREADS, 0, st>>>(*a);
      break;
  }
  return (int)cudaGetLastError();
}
