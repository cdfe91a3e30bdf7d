/*
 * quantize.cu: fa_quantize on CUDA, bit for bit the CPU backend's (docs/fp8.md): each row (one
 * head's vector of one token) widened to fp32, its signs flipped and the butterfly stages run in
 * core/math/hadamard.h's order (h = 1, 2, 4, ...), then the multiplication by the norm; FP8 output
 * divides by the descale with IEEE division (__fdiv_rn) and rounds as core/math/fp8.h does.
 *   quant_zero   descales to 0 (the amax pass's atomic maxima start there)
 *   quant_amax   each row's largest finite |value| into its descale element: atomicMax on the bits,
 *                which order as the values do for non-negative floats; max is exact, so the result
 *                does not depend on the order
 *   quant_finish amax / FP8 max, or 1 where that is 0
 *   quant_store  the rows rotated again (not kept: no scratch), divided, rounded, stored
 * Three forms:
 *   fused, one pass (FP8 output, descales per block of at most 128 tokens of each (batch, head),
 *     head dims 32-256): a thread block per descale element, its rows in registers.
 *   by warps, two passes (head dims 32, 64, ..., 1024): a warp walks a run of consecutive tokens of
 *     one (batch, head); one atomic per descale block a run meets.
 *   Both hold a row in a warp as quant_lane.cuh lays it out (E adjacent columns a lane).
 *   by blocks (any other head dim, or more than 65535 heads or batches): a block a row,
 *     QUANT_THREADS threads, the butterfly in shared memory with a barrier between stages.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "flash_attn.h"
#include "core/math/dtype.h"
#include "core/math/fp8.h"
#include "core/math/hadamard.h"
#include "quant_args.h"
#include "quant_lane.cuh"

namespace {

constexpr int QUANT_THREADS = 128;
constexpr int QUANT_MAX_DIM = 1024; /* FA_MAX_HEAD_DIM, checked by the core */

__device__ __forceinline__ float load_x(const cuda_quant_args &a, int64_t at) {
  if (a.xdt == FA_F32) return static_cast<const float *>(a.x)[at];
  const uint16_t h = static_cast<const uint16_t *>(a.x)[at];
  return a.xdt == FA_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

/* The descale element of block blk of (b, h). */
__device__ __forceinline__ int64_t descale_at(const cuda_quant_args &a, int64_t b, int64_t h,
                                              int64_t blk) {
  return (a.dshape[0] > 1 ? b : 0) * a.ds[0] + (a.dshape[1] > 1 ? h : 0) * a.ds[1] + blk * a.ds[2];
}

/* The descale of a block whose largest finite |value| is amax: amax / the FP8 maximum, or 1
   where that is 0. */
__device__ __forceinline__ float block_descale(const cuda_quant_args &a, float amax) {
  const float scale = __fdiv_rn(amax, a.fp8_max);
  return scale > 0.0f ? scale : 1.0f;
}

/* The descale element of token t of (b, h). */
__device__ __forceinline__ int64_t descale_index(const cuda_quant_args &a, int64_t b, int64_t t,
                                                 int64_t h) {
  return descale_at(a, b, h, t / a.block_rows);
}

/* v into y's element at as Y (FA_F8E4M3 or FA_F8E5M2): divided by the descale s, rounded. */
template <int Y>
__device__ __forceinline__ void store_fp8(const cuda_quant_args &a, int64_t at, float v, float s) {
  static_cast<uint8_t *>(a.y)[at] = (uint8_t)fp8x2<Y>(__fdiv_rn(v, s), 0.0f);
}

/* v into y's element at, y a float type (f32, f16 or bf16). */
__device__ __forceinline__ void store_float(const cuda_quant_args &a, int64_t at, float v) {
  if (a.ydt == FA_F32)
    static_cast<float *>(a.y)[at] = v;
  else
    static_cast<uint16_t *>(a.y)[at] = a.ydt == FA_F16 ? fa_f32_to_f16(v) : fa_f32_to_bf16(v);
}

/* v into y's element at: FP8 divided by the descale s, the float types as they are. */
__device__ __forceinline__ void store_y(const cuda_quant_args &a, int64_t at, float v, float s) {
  switch (a.ydt) {
    case FA_F8E4M3:
      store_fp8<FA_F8E4M3>(a, at, v, s);
      break;
    case FA_F8E5M2:
      store_fp8<FA_F8E5M2>(a, at, v, s);
      break;
    default:
      store_float(a, at, v);
      break;
  }
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
    *d = block_descale(a, *d);
  }
}

__global__ void __launch_bounds__(QUANT_THREADS) quant_amax(cuda_quant_args a, int64_t rows) {
  __shared__ float sh[QUANT_MAX_DIM];
  __shared__ float warp_max[QUANT_THREADS / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t b, t, h;
    load_row(a, row, sh, &b, &t, &h);
    float m = 0.0f;
    for (int c = threadIdx.x; c < a.dim; c += blockDim.x) m = finite_max(m, sh[c]);
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
      store_y(a, base + c * a.ys[3], v, s);
    }
    __syncthreads(); /* sh is reused by the next row */
  }
}

/* The lane kernels (quant_lane.cuh's layout), for head dims 32 E with E a power of two up to 32.
   xvec / yvec: the launcher found x's / y's rows contiguous and aligned for whole-word access. */

/* By warps, two passes: QUANT_WARPS warps a block, each over QUANT_RUN consecutive tokens of one
   (batch, head), lane_rows<E>::n rows loaded together (16 values a lane); the grid's y and z are
   the heads and batches, so no row index is divided. */
constexpr int QUANT_WARPS = 4;
constexpr int QUANT_RUN = 16;

template <int E>
struct lane_rows {
  static constexpr int n = E >= 16 ? 1 : 16 / E;
};

/* A warp's run of tokens: [t0, t1) of head blockIdx.y of batch blockIdx.z; t0 >= seqlen: none. */
__device__ __forceinline__ void warp_run(const cuda_quant_args &a, int64_t *t0, int64_t *t1) {
  /* the warp index through a shuffle: ptxas then knows it is the same in every lane, and the
     loop over the run's rows holds no collective sequences around the rotation's shuffles */
  const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
  *t0 = ((int64_t)blockIdx.x * QUANT_WARPS + warp) * QUANT_RUN;
  *t1 = *t0 + QUANT_RUN < a.seqlen ? *t0 + QUANT_RUN : a.seqlen;
}

/* The warp's largest |value| m (every lane's) into descale block blk of (b, h). */
__device__ __forceinline__ void amax_flush(const cuda_quant_args &a, int64_t b, int64_t h,
                                           int64_t blk, float m) {
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0)
    atomicMax(reinterpret_cast<unsigned int *>(&a.descale[descale_at(a, b, h, blk)]),
              __float_as_uint(m));
}

/* Rows t .. t + N - 1 of (b, h) (x's element offset base), every load issued before any is
   used; rows at or past t1 are zeros, so the rotation runs on every row without a branch around
   its shuffles (which ptxas would wrap in collective sequences) and leaves the maxima alone. */
template <int E, int X, int N>
__device__ __forceinline__ void load_rows(const cuda_quant_args &a, int64_t base, int64_t t,
                                          int64_t t1, int lane, bool xvec,
                                          uint32_t (&w)[N][lane_words<E, X>::n]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (t + i < t1) {
      load_lane<E, X>(a, base + (t + i) * a.xs[1], lane, xvec, w[i]);
    } else {
#pragma unroll
      for (int j = 0; j < lane_words<E, X>::n; ++j) w[i][j] = 0;
    }
  }
}

template <int E, int X>
__global__ void __launch_bounds__(32 * QUANT_WARPS) quant_amax_lanes(cuda_quant_args a, bool xvec) {
  constexpr int C = lane_rows<E>::n, W = lane_words<E, X>::n;
  int64_t t0, t1;
  warp_run(a, &t0, &t1);
  if (t0 >= a.seqlen) return; /* the whole warp: nothing below waits on the block */
  const int lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, b = blockIdx.z, base = b * a.xs[0] + h * a.xs[2];
  const uint32_t signs = lane_signs<E>(a, lane);
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  int64_t blk = t0 / a.block_rows, next = (blk + 1) * a.block_rows;
  float m = 0.0f;
  for (int64_t t = t0; t < t1; t += C) {
    uint32_t w[C][W];
    load_rows<E, X, C>(a, base, t, t1, lane, xvec, w);
#pragma unroll
    for (int i = 0; i < C; ++i) {
      if (t + i < t1 && t + i >= next) { /* the run enters the next descale block */
        amax_flush(a, b, h, blk, m);
        m = 0.0f;
        ++blk;
        next += a.block_rows;
      }
      float v[E];
      widen<E, X>(w[i], v);
      if (a.rotate) rotate_lane<E>(v, signs, lane, norm);
#pragma unroll
      for (int k = 0; k < E; ++k) m = finite_max(m, v[k]);
    }
  }
  amax_flush(a, b, h, blk, m);
}

/* One row's values v to y's row at element offset `row`, divided by the descale s where y is
   FP8. */
template <int E>
__device__ __forceinline__ void store_lane(const cuda_quant_args &a, int64_t row, int lane,
                                           bool yvec, const float (&v)[E], float s) {
  if (a.ydt == FA_F8E4M3) {
    store_fp8_lane<E, FA_F8E4M3>(a, row, lane, yvec, v, s);
  } else if (a.ydt == FA_F8E5M2) {
    store_fp8_lane<E, FA_F8E5M2>(a, row, lane, yvec, v, s);
  } else { /* a float type: the rotation only */
#pragma unroll
    for (int k = 0; k < E; ++k) store_float(a, row + (int64_t)(lane * E + k) * a.ys[3], v[k]);
  }
}

template <int E, int X>
__global__ void __launch_bounds__(32 * QUANT_WARPS)
    quant_store_lanes(cuda_quant_args a, bool xvec, bool yvec) {
  constexpr int C = lane_rows<E>::n, W = lane_words<E, X>::n;
  int64_t t0, t1;
  warp_run(a, &t0, &t1);
  if (t0 >= a.seqlen) return;
  const int lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, b = blockIdx.z, base = b * a.xs[0] + h * a.xs[2];
  const int64_t ybase = b * a.ys[0] + h * a.ys[2];
  const uint32_t signs = lane_signs<E>(a, lane);
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  int64_t blk = t0 / a.block_rows, next = (blk + 1) * a.block_rows;
  float s = a.descale ? a.descale[descale_at(a, b, h, blk)] : 1.0f;
  for (int64_t t = t0; t < t1; t += C) {
    uint32_t w[C][W];
    load_rows<E, X, C>(a, base, t, t1, lane, xvec, w);
#pragma unroll
    for (int i = 0; i < C; ++i) {
      float v[E];
      widen<E, X>(w[i], v);
      if (a.rotate) rotate_lane<E>(v, signs, lane, norm);
      if (t + i < t1) {
        if (t + i >= next) {
          ++blk;
          next += a.block_rows;
          if (a.descale) s = a.descale[descale_at(a, b, h, blk)];
        }
        store_lane<E>(a, ybase + (t + i) * a.ys[1], lane, yvec, v, s);
      }
    }
  }
}

template <int E, int X>
void launch_lanes(const cuda_quant_args *a, bool amax, bool xvec, bool yvec, cudaStream_t stream) {
  const int64_t per_block = (int64_t)QUANT_WARPS * QUANT_RUN;
  const dim3 grid((unsigned)((a->seqlen + per_block - 1) / per_block), (unsigned)a->heads,
                  (unsigned)a->batch);
  if (amax)
    quant_amax_lanes<E, X><<<grid, 32 * QUANT_WARPS, 0, stream>>>(*a, xvec);
  else
    quant_store_lanes<E, X><<<grid, 32 * QUANT_WARPS, 0, stream>>>(*a, xvec, yvec);
}

template <int E>
void launch_lanes_x(const cuda_quant_args *a, bool amax, bool xvec, bool yvec,
                    cudaStream_t stream) {
  if (a->xdt == FA_F32)
    launch_lanes<E, FA_F32>(a, amax, xvec, yvec, stream);
  else if (a->xdt == FA_F16)
    launch_lanes<E, FA_F16>(a, amax, xvec, yvec, stream);
  else
    launch_lanes<E, FA_BF16>(a, amax, xvec, yvec, stream);
}

/* Whether every row of a tensor (base p, element strides st over [batch, token, head, column],
   extents ext of the first three, `size` bytes an element) splits into whole-word accesses of E
   elements a lane: unit column stride, every row and lane part aligned to its bytes (up to 16). */
bool lanes_aligned(const void *p, const int64_t st[4], const int64_t ext[3], int64_t size, int E) {
  const int64_t align = E * size < 16 ? E * size : 16;
  if (st[3] != 1 || (uintptr_t)p % (uintptr_t)align) return false;
  for (int i = 0; i < 3; ++i)
    if (ext[i] > 1 && (st[i] * size) % align) return false;
  return true;
}

/* The lane count E of head dim a->dim (32 E, E a power of two up to 32), or 0; xvec, yvec: whether
   x's and y's rows take whole words. */
int lane_shape(const cuda_quant_args *a, bool *xvec, bool *yvec) {
  if (a->dim < 32 || a->dim > 1024 || a->dim & (a->dim - 1)) return 0;
  const int E = (int)(a->dim / 32);
  const int64_t ext[3] = {a->batch, a->seqlen, a->heads};
  *xvec = lanes_aligned(a->x, a->xs, ext, a->xdt == FA_F32 ? 4 : 2, E);
  *yvec = (a->ydt == FA_F8E4M3 || a->ydt == FA_F8E5M2) && lanes_aligned(a->y, a->ys, ext, 1, E);
  return E;
}

/* The row passes of a (amax: the descales' maxima; else the stores) by warps where the head dim
   is 32 x a power of two up to 1024 and the grid holds the heads and batches; false: by blocks. */
bool rows_by_warps(const cuda_quant_args *a, bool amax, cudaStream_t stream) {
  const int64_t per_block = (int64_t)QUANT_WARPS * QUANT_RUN;
  if (a->heads > 65535 || a->batch > 65535 || (a->seqlen + per_block - 1) / per_block > INT32_MAX)
    return false;
  bool xvec, yvec;
  switch (lane_shape(a, &xvec, &yvec)) {
    case 1:
      return launch_lanes_x<1>(a, amax, xvec, yvec, stream), true;
    case 2:
      return launch_lanes_x<2>(a, amax, xvec, yvec, stream), true;
    case 4:
      return launch_lanes_x<4>(a, amax, xvec, yvec, stream), true;
    case 8:
      return launch_lanes_x<8>(a, amax, xvec, yvec, stream), true;
    case 16:
      return launch_lanes_x<16>(a, amax, xvec, yvec, stream), true;
    case 32:
      return launch_lanes_x<32>(a, amax, xvec, yvec, stream), true;
    default:
      return false;
  }
}

/* One pass where each descale element covers one descale block of one (batch, head) of at most
   128 tokens: a thread block per element, a warp per R tokens of it (R rows of E values a lane in
   registers, every load issued first), the block's largest |value| through shared memory, then
   the descale and the rows stored from the registers: x read once. */
template <int E>
struct fused_shape {
  static constexpr int R = E <= 4 ? 16 : 64 / E; /* tokens a warp: at most 16 warps */
};

/* The fused kernel's stores of a warp's rows v (those below t1) as Y. */
template <int E, int Y, int R>
__device__ __forceinline__ void fused_store(const cuda_quant_args &a, int64_t row0, int64_t tw,
                                            int64_t t1, int lane, bool yvec, const float (&v)[R][E],
                                            float s) {
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (tw + i < t1) store_fp8_lane<E, Y>(a, row0 + (tw + i) * a.ys[1], lane, yvec, v[i], s);
}

template <int E, int X>
__global__ void __launch_bounds__(512) quant_fused(cuda_quant_args a, bool xvec, bool yvec) {
  constexpr int R = fused_shape<E>::R, W = lane_words<E, X>::n;
  __shared__ float warp_max[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t blk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t t0 = blk * a.block_rows,
                t1 = t0 + a.block_rows < a.seqlen ? t0 + a.block_rows : a.seqlen;
  const int64_t tw = t0 + (int64_t)warp * R; /* this warp's first token */
  const int64_t base = b * a.xs[0] + h * a.xs[2], ybase = b * a.ys[0] + h * a.ys[2];
  uint32_t w[R][W];
  load_rows<E, X, R>(a, base, tw, t1, lane, xvec, w);
  const uint32_t signs = lane_signs<E>(a, lane);
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  float m = 0.0f, v[R][E];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    widen<E, X>(w[i], v[i]);
    if (a.rotate) rotate_lane<E>(v[i], signs, lane, norm);
#pragma unroll
    for (int k = 0; k < E; ++k) m = finite_max(m, v[i][k]);
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  for (int w = 0; w < warps; ++w) m = fmaxf(m, warp_max[w]);
  const float s = block_descale(a, m);
  if (threadIdx.x == 0) a.descale[descale_at(a, b, h, blk)] = s;
  if (a.ydt == FA_F8E4M3)
    fused_store<E, FA_F8E4M3, R>(a, ybase, tw, t1, lane, yvec, v, s);
  else
    fused_store<E, FA_F8E5M2, R>(a, ybase, tw, t1, lane, yvec, v, s);
}

template <int E>
void launch_fused(const cuda_quant_args *a, bool xvec, bool yvec, cudaStream_t stream) {
  constexpr int R = fused_shape<E>::R;
  const dim3 grid((unsigned)a->dshape[2], (unsigned)a->heads, (unsigned)a->batch);
  const int threads = 32 * (int)((a->block_rows + R - 1) / R);
  if (a->xdt == FA_F32)
    quant_fused<E, FA_F32><<<grid, threads, 0, stream>>>(*a, xvec, yvec);
  else if (a->xdt == FA_F16)
    quant_fused<E, FA_F16><<<grid, threads, 0, stream>>>(*a, xvec, yvec);
  else
    quant_fused<E, FA_BF16><<<grid, threads, 0, stream>>>(*a, xvec, yvec);
}

/* The whole call in one pass (quant_fused) where it applies: FP8 output, every descale element
   one descale block of one (batch, head) (no descale shared across heads or batches), blocks of
   at most 128 tokens, head dims 32, 64, 128 and 256, the grid's limits; false otherwise. */
bool fused(const cuda_quant_args *a, cudaStream_t stream) {
  if (!a->descale || a->dshape[0] != a->batch || a->dshape[1] != a->heads || a->block_rows > 128 ||
      a->heads > 65535 || a->batch > 65535 || a->dshape[2] > INT32_MAX || a->dshape[2] < 1)
    return false;
  bool xvec, yvec;
  switch (a->dim <= 256 ? lane_shape(a, &xvec, &yvec) : 0) {
    case 1:
      return launch_fused<1>(a, xvec, yvec, stream), true;
    case 2:
      return launch_fused<2>(a, xvec, yvec, stream), true;
    case 4:
      return launch_fused<4>(a, xvec, yvec, stream), true;
    case 8:
      return launch_fused<8>(a, xvec, yvec, stream), true;
    default:
      return false;
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
  if (elements && fused(a, stream)) return (int)cudaGetLastError();
  if (a->descale) {
    const int64_t n = a->dshape[0] * a->dshape[1] * a->dshape[2];
    if (n > 0) {
      quant_zero<<<grid_for(n, 256), 256, 0, stream>>>(*a, n);
      if (elements && !rows_by_warps(a, true, stream))
        quant_amax<<<grid_for(rows, 1), QUANT_THREADS, 0, stream>>>(*a, rows);
      quant_finish<<<grid_for(n, 256), 256, 0, stream>>>(*a, n);
    }
  }
  if (elements && !rows_by_warps(a, false, stream))
    quant_store<<<grid_for(rows, 1), QUANT_THREADS, 0, stream>>>(*a, rows);
  return (int)cudaGetLastError();
}
