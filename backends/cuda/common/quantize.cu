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
 *
 * With FA_CUDA_QUANT_WARP=1 (cuda_quantize.c; opt-in until a GPU has verified it) the amax and
 * store passes hold a row in a warp's registers instead: lane l the E = max(1, dim / 32) columns
 * l E .. l E + E - 1 when rotating (dim a power of two; lanes past dim idle), so a row needs no
 * barrier: the butterfly stages below E run within a lane, the others between lanes l and
 * l ^ (h / E) by shuffles, each pair the same two IEEE operations in the same stage order, so the
 * results are the block kernels' bit for bit. A lane's columns share one word of sign bits (one
 * Philox draw a lane, not one a column). Without rotation lane l takes columns l, l + 32, ....
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

/* The row's largest finite |value| over the warp (every lane gets it). */
__device__ __forceinline__ float warp_amax(float m) {
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}
__device__ __forceinline__ float amax_step(float m, float v) {
  const float x = fabsf(v);
  return x > m && x <= 3.4028235e38f ? x : m; /* NaN and infinities left out */
}

__device__ __forceinline__ void store_y(const cuda_quant_args &a, int64_t at, float v, float s) {
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

__device__ __forceinline__ void row_of(const cuda_quant_args &a, int64_t row, int64_t *b,
                                       int64_t *t, int64_t *h) {
  *h = row % a.heads, *t = row / a.heads % a.seqlen, *b = row / (a.heads * a.seqlen);
}

/* Row `row` (b, t, h) of x into sh[0..dim), rotated when asked; ends after a barrier. */
__device__ void load_row(const cuda_quant_args &a, int64_t row, float *sh, int64_t *b_, int64_t *t_,
                         int64_t *h_) {
  int64_t b, t, h;
  row_of(a, row, &b, &t, &h);
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
    for (int c = threadIdx.x; c < a.dim; c += blockDim.x) m = amax_step(m, sh[c]);
    m = warp_amax(m);
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
    for (int c = threadIdx.x; c < a.dim; c += blockDim.x) store_y(a, base + c * a.ys[3], sh[c], s);
    __syncthreads(); /* sh is reused by the next row */
  }
}

/* ---- a warp a row (FA_CUDA_QUANT_WARP) ---- */

constexpr int WARP_ROWS_THREADS = 256; /* 8 rows in flight a block */

/* Lane `lane`'s E columns of row `base` into v (0 past dim), rotated: signs, the butterfly
   stages h = 1, 2, ... (within the lane while h < E, then across lanes), the norm. */
template <int E>
__device__ __forceinline__ void warp_row_rotated(const cuda_quant_args &a, int64_t base, int lane,
                                                 float (&v)[E]) {
  const int c0 = lane * E;
  const uint32_t signs = c0 < a.dim ? fa_hadamard_sign_word(a.seed, (uint32_t)c0) : 0u;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int c = c0 + e;
    const float x = c < a.dim ? load_x(a, base + c * a.xs[3]) : 0.0f;
    v[e] = (signs >> (c % 32)) & 1u ? -x : x;
  }
#pragma unroll
  for (int h = 1; h < E; h <<= 1)
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (!(e & h)) {
        const float x0 = v[e], x1 = v[e + h];
        v[e] = __fadd_rn(x0, x1);
        v[e + h] = __fsub_rn(x0, x1);
      }
  for (int m = 1; m * E < a.dim; m <<= 1) {
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, v[e], m);
      v[e] = upper ? __fsub_rn(other, v[e]) : __fadd_rn(v[e], other); /* x0 - x1 : x0 + x1 */
    }
  }
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = __fmul_rn(v[e], norm);
}

/* E > 0: rotated rows of E columns a lane; E == 0: rows as they are, columns strided by 32. */
template <int E>
__global__ void __launch_bounds__(WARP_ROWS_THREADS)
    quant_amax_warp(cuda_quant_args a, int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (WARP_ROWS_THREADS / 32);
  for (int64_t row = blockIdx.x * (int64_t)(WARP_ROWS_THREADS / 32) + (threadIdx.x >> 5);
       row < rows; row += warps) {
    int64_t b, t, h;
    row_of(a, row, &b, &t, &h);
    const int64_t base = b * a.xs[0] + t * a.xs[1] + h * a.xs[2];
    float m = 0.0f;
    if constexpr (E > 0) {
      float v[E];
      warp_row_rotated<E>(a, base, lane, v);
#pragma unroll
      for (int e = 0; e < E; ++e) m = amax_step(m, v[e]);
    } else {
      for (int c = lane; c < a.dim; c += 32) m = amax_step(m, load_x(a, base + c * a.xs[3]));
    }
    m = warp_amax(m);
    if (lane == 0)
      atomicMax(reinterpret_cast<unsigned int *>(&a.descale[descale_index(a, b, t, h)]),
                __float_as_uint(m));
  }
}

template <int E>
__global__ void __launch_bounds__(WARP_ROWS_THREADS)
    quant_store_warp(cuda_quant_args a, int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (WARP_ROWS_THREADS / 32);
  for (int64_t row = blockIdx.x * (int64_t)(WARP_ROWS_THREADS / 32) + (threadIdx.x >> 5);
       row < rows; row += warps) {
    int64_t b, t, h;
    row_of(a, row, &b, &t, &h);
    const int64_t xbase = b * a.xs[0] + t * a.xs[1] + h * a.xs[2];
    const int64_t ybase = b * a.ys[0] + t * a.ys[1] + h * a.ys[2];
    const float s = a.descale ? a.descale[descale_index(a, b, t, h)] : 1.0f;
    if constexpr (E > 0) {
      float v[E];
      warp_row_rotated<E>(a, xbase, lane, v);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int c = lane * E + e;
        if (c < a.dim) store_y(a, ybase + c * a.ys[3], v[e], s);
      }
    } else {
      for (int c = lane; c < a.dim; c += 32)
        store_y(a, ybase + c * a.ys[3], load_x(a, xbase + c * a.xs[3]), s);
    }
  }
}

int grid_for(int64_t work, int64_t per_block) {
  const int64_t g = (work + per_block - 1) / per_block;
  return (int)(g < 1 ? 1 : (g > 65535 ? 65535 : g));
}

/* The warp-a-row pass (amax or store) at E columns a lane. */
template <int E>
void warp_pass(const cuda_quant_args &a, int64_t rows, bool amax, cudaStream_t stream) {
  const int grid = grid_for(rows, WARP_ROWS_THREADS / 32);
  if (amax)
    quant_amax_warp<E><<<grid, WARP_ROWS_THREADS, 0, stream>>>(a, rows);
  else
    quant_store_warp<E><<<grid, WARP_ROWS_THREADS, 0, stream>>>(a, rows);
}

/* The amax or the store pass over the rows, a block or (warp_rows) a warp a row. */
void rows_pass(const cuda_quant_args &a, int64_t rows, bool amax, cudaStream_t stream) {
  if (!a.warp_rows) {
    if (amax)
      quant_amax<<<grid_for(rows, 1), QUANT_THREADS, 0, stream>>>(a, rows);
    else
      quant_store<<<grid_for(rows, 1), QUANT_THREADS, 0, stream>>>(a, rows);
    return;
  }
  /* rotation: dim a power of two up to QUANT_MAX_DIM (the core's checks) */
  switch (!a.rotate ? 0 : a.dim <= 32 ? 1 : (int)(a.dim / 32)) {
    case 0:
      return warp_pass<0>(a, rows, amax, stream);
    case 1:
      return warp_pass<1>(a, rows, amax, stream);
    case 2:
      return warp_pass<2>(a, rows, amax, stream);
    case 4:
      return warp_pass<4>(a, rows, amax, stream);
    case 8:
      return warp_pass<8>(a, rows, amax, stream);
    case 16:
      return warp_pass<16>(a, rows, amax, stream);
    default:
      return warp_pass<32>(a, rows, amax, stream);
  }
}

}  // namespace

extern "C" int cuda_quant_launch(const cuda_quant_args *a) {
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  const int64_t rows = a->batch * a->seqlen * a->heads;
  const bool elements = rows > 0 && a->dim > 0;
  if (a->warp_rows && a->rotate && (a->dim & (a->dim - 1)) != 0) return (int)cudaErrorInvalidValue;
  if (a->descale) {
    const int64_t n = a->dshape[0] * a->dshape[1] * a->dshape[2];
    if (n > 0) {
      quant_zero<<<grid_for(n, 256), 256, 0, stream>>>(*a, n);
      if (elements) rows_pass(*a, rows, true, stream);
      quant_finish<<<grid_for(n, 256), 256, 0, stream>>>(*a, n);
    }
  }
  if (elements) rows_pass(*a, rows, false, stream);
  return (int)cudaGetLastError();
}
