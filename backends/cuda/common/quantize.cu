/*
 * quantize.cu: fa_quantize on CUDA, bit for bit the CPU backend's (docs/fp8.md): each row (one
 * head's vector of one token) widened to fp32, its signs flipped and the butterfly stages run in
 * shared memory in core/math/hadamard.h's order (h = 1, 2, 4, ...; every pair of a stage between
 * two barriers), then the multiplication by the norm; FP8 output divides by the descale with IEEE
 * division (__fdiv_rn) and rounds through core/math/fp8.h. A block a row, QUANT_THREADS threads.
 *   quant_zero   descales to 0 (the amax pass's atomic maxima start there)
 *   quant_amax   each row's largest finite |value| into its descale element: atomicMax on the bits,
 *                which order as the values do for non-negative floats; max is exact, so the result
 *                does not depend on the order
 *   quant_finish amax / FP8 max, or 1 where that is 0
 *   quant_store  the rows rotated again (not kept: no scratch), divided, rounded, stored
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "flash_attn.h"
#include "core/math/dtype.h"
#include "core/math/fp8.h"
#include "core/math/hadamard.h"
#include "quant_args.h"

namespace {

constexpr int QUANT_THREADS = 128;
constexpr int QUANT_MAX_DIM = 1024; /* FA_MAX_HEAD_DIM, checked by the core */

__device__ __forceinline__ float load_x(const cuda_quant_args &a, int64_t at) {
  if (a.xdt == FA_F32) return static_cast<const float *>(a.x)[at];
  const uint16_t h = static_cast<const uint16_t *>(a.x)[at];
  return a.xdt == FA_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

__device__ __forceinline__ int64_t descale_index(const cuda_quant_args &a, int64_t b, int64_t t,
                                                 int64_t h) {
  return (a.dshape[0] > 1 ? b : 0) * a.ds[0] + (a.dshape[1] > 1 ? h : 0) * a.ds[1] +
         (t / a.block_rows) * a.ds[2];
}

/* Row `row` (b, t, h) of x into sh[0..dim), rotated when asked; ends after a barrier. */
__device__ void load_row(const cuda_quant_args &a, int64_t row, float *sh, int64_t *b_, int64_t *t_,
                         int64_t *h_) {
  const int64_t h = row % a.heads, t = row / a.heads % a.seqlen, b = row / (a.heads * a.seqlen);
  *b_ = b, *t_ = t, *h_ = h;
  const int64_t base = b * a.xs[0] + t * a.xs[1] + h * a.xs[2];
  for (int c = threadIdx.x; c < a.dim; c += blockDim.x) {
    const float v = load_x(a, base + c * a.xs[3]);
    sh[c] = a.rotate && fa_hadamard_sign_negative(a.seed, (uint32_t)c) ? -v : v;
  }
  __syncthreads();
  if (!a.rotate) return;
  const int half = (int)(a.dim / 2);
  for (int hs = 1; hs < a.dim; hs <<= 1) {
    for (int p = threadIdx.x; p < half; p += blockDim.x) {
      const int i = (p / hs) * 2 * hs + p % hs; /* the p-th index with bit hs clear */
      const float x0 = sh[i], x1 = sh[i + hs];
      sh[i] = __fadd_rn(x0, x1);
      sh[i + hs] = __fsub_rn(x0, x1);
    }
    __syncthreads();
  }
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  for (int c = threadIdx.x; c < a.dim; c += blockDim.x) sh[c] = __fmul_rn(sh[c], norm);
  __syncthreads();
}

__global__ void quant_zero(cuda_quant_args a, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = e / (a.dshape[1] * a.dshape[2]), h = e / a.dshape[2] % a.dshape[1],
                  k = e % a.dshape[2];
    a.descale[b * a.ds[0] + h * a.ds[1] + k * a.ds[2]] = 0.0f;
  }
}

__global__ void quant_finish(cuda_quant_args a, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = e / (a.dshape[1] * a.dshape[2]), h = e / a.dshape[2] % a.dshape[1],
                  k = e % a.dshape[2];
    float *d = &a.descale[b * a.ds[0] + h * a.ds[1] + k * a.ds[2]];
    const float scale = __fdiv_rn(*d, a.fp8_max);
    *d = scale > 0.0f ? scale : 1.0f;
  }
}

__global__ void __launch_bounds__(QUANT_THREADS) quant_amax(cuda_quant_args a, int64_t rows) {
  __shared__ float sh[QUANT_MAX_DIM];
  __shared__ float warp_max[QUANT_THREADS / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t b, t, h;
    load_row(a, row, sh, &b, &t, &h);
    float m = 0.0f;
    for (int c = threadIdx.x; c < a.dim; c += blockDim.x) {
      const float v = fabsf(sh[c]);
      if (v > m && v <= 3.4028235e38f) m = v; /* NaN and infinities left out */
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, warp_max[w]);
      atomicMax(reinterpret_cast<unsigned int *>(&a.descale[descale_index(a, b, t, h)]),
                __float_as_uint(m));
    }
    __syncthreads(); /* sh and warp_max are reused by the next row */
  }
}

__global__ void __launch_bounds__(QUANT_THREADS) quant_store(cuda_quant_args a, int64_t rows) {
  __shared__ float sh[QUANT_MAX_DIM];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t b, t, h;
    load_row(a, row, sh, &b, &t, &h);
    const int64_t base = b * a.ys[0] + t * a.ys[1] + h * a.ys[2];
    const float s = a.descale ? a.descale[descale_index(a, b, t, h)] : 1.0f;
    for (int c = threadIdx.x; c < a.dim; c += blockDim.x) {
      const float v = sh[c];
      const int64_t at = base + c * a.ys[3];
      switch (a.ydt) {
        case FA_F8E4M3:
          static_cast<uint8_t *>(a.y)[at] = fa_f32_to_f8e4m3(__fdiv_rn(v, s));
          break;
        case FA_F8E5M2:
          static_cast<uint8_t *>(a.y)[at] = fa_f32_to_f8e5m2(__fdiv_rn(v, s));
          break;
        case FA_F32:
          static_cast<float *>(a.y)[at] = v;
          break;
        case FA_F16:
          static_cast<uint16_t *>(a.y)[at] = fa_f32_to_f16(v);
          break;
        default:
          static_cast<uint16_t *>(a.y)[at] = fa_f32_to_bf16(v);
          break;
      }
    }
    __syncthreads(); /* sh is reused by the next row */
  }
}

int grid_for(int64_t work, int64_t per_block) {
  const int64_t g = (work + per_block - 1) / per_block;
  return (int)(g < 1 ? 1 : (g > 65535 ? 65535 : g));
}

}  // namespace

extern "C" int cuda_quant_launch(const cuda_quant_args *a) {
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  const int64_t rows = a->batch * a->seqlen * a->heads;
  const bool elements = rows > 0 && a->dim > 0;
  if (a->descale) {
    const int64_t n = a->dshape[0] * a->dshape[1] * a->dshape[2];
    if (n > 0) {
      quant_zero<<<grid_for(n, 256), 256, 0, stream>>>(*a, n);
      if (elements) quant_amax<<<grid_for(rows, 1), QUANT_THREADS, 0, stream>>>(*a, rows);
      quant_finish<<<grid_for(n, 256), 256, 0, stream>>>(*a, n);
    }
  }
  if (elements) quant_store<<<grid_for(rows, 1), QUANT_THREADS, 0, stream>>>(*a, rows);
  return (int)cudaGetLastError();
}
