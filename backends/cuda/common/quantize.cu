/*
 * quantize.cu: fa_quantize on CUDA, bit for bit the CPU backend's (docs/fp8.md): each row (one
 * head's vector of one token) widened to fp32, its signs flipped and the butterfly stages run in
 * core/math/hadamard.h's order (h = 1, 2, 4, ...), then the multiplication by the norm; FP8 output
 * divides by the descale with IEEE division (__fdiv_rn) and rounds through core/math/fp8.h.
 *   quant_zero   descales to 0 (the amax pass's atomic maxima start there)
 *   quant_amax   each row's largest finite |value| into its descale element: atomicMax on the bits,
 *                which order as the values do for non-negative floats; max is exact, so the result
 *                does not depend on the order
 *   quant_finish amax / FP8 max, or 1 where that is 0
 *   quant_store  the rows rotated again (not kept: no scratch), divided, rounded, stored
 * Two forms of the row passes:
 *   by warps (head dims 32, 64, ..., 1024): a warp walks a run of consecutive tokens of one
 *     (batch, head), column c in lane c % 32, element c / 32 of its registers; the butterfly's
 *     stages below 32 by shuffles, the others inside each lane; the next row's loads issued before
 *     the current row is worked; one atomic per descale block a run meets. The grid's y and z are
 *     the heads and batches, so no row index is divided.
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

/* The descale element of token t of (b, h). */
__device__ __forceinline__ int64_t descale_index(const cuda_quant_args &a, int64_t b, int64_t t,
                                                 int64_t h) {
  return descale_at(a, b, h, t / a.block_rows);
}

/* m raised to |v| where that is finite (NaN and infinities left out). */
__device__ __forceinline__ float finite_max(float m, float v) {
  const float x = fabsf(v);
  return x > m && x <= 3.4028235e38f ? x : m;
}

/* v into y's element at as Y (FA_F8E4M3 or FA_F8E5M2): divided by the descale s, rounded. */
template <int Y>
__device__ __forceinline__ void store_fp8(const cuda_quant_args &a, int64_t at, float v, float s) {
  static_cast<uint8_t *>(a.y)[at] =
      Y == FA_F8E4M3 ? fa_f32_to_f8e4m3(__fdiv_rn(v, s)) : fa_f32_to_f8e5m2(__fdiv_rn(v, s));
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

/* The row passes by warps: QUANT_WARPS warps a block, each over QUANT_RUN consecutive tokens. */
constexpr int QUANT_WARPS = 4;
constexpr int QUANT_RUN = 16;

/* Row t of (b, h): element k of lane `lane` is column lane + 32 k. */
template <int E>
__device__ __forceinline__ void load_lane(const cuda_quant_args &a, int64_t row_base, int lane,
                                          float (&v)[E]) {
#pragma unroll
  for (int k = 0; k < E; ++k) v[k] = load_x(a, row_base + (int64_t)(lane + 32 * k) * a.xs[3]);
}

/* The rotation of one row held by a warp (hadamard.h's order: signs, stages h = 1, 2, 4, ...,
   the norm). At stage h < 32 the pair (i, i + h) is two lanes: the lower takes a + b, the upper
   a - b with a its partner's value; from 32 on the pair is two elements of one lane. */
template <int E>
__device__ __forceinline__ void rotate_lane(float (&v)[E], uint32_t signs, int lane, float norm) {
#pragma unroll
  for (int k = 0; k < E; ++k)
    if ((signs >> k) & 1u) v[k] = -v[k];
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
    const bool upper = (lane & h) != 0;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float p = __shfl_xor_sync(0xffffffffu, v[k], h);
      v[k] = upper ? __fsub_rn(p, v[k]) : __fadd_rn(v[k], p);
    }
  }
#pragma unroll
  for (int hk = 1; hk < E; hk <<= 1)
#pragma unroll
    for (int k = 0; k < E; ++k)
      if (!(k & hk)) {
        const float x0 = v[k], x1 = v[k + hk];
        v[k] = __fadd_rn(x0, x1);
        v[k + hk] = __fsub_rn(x0, x1);
      }
#pragma unroll
  for (int k = 0; k < E; ++k) v[k] = __fmul_rn(v[k], norm);
}

/* This lane's signs (bit k: column lane + 32 k negated). */
template <int E>
__device__ __forceinline__ uint32_t lane_signs(const cuda_quant_args &a, int lane) {
  uint32_t signs = 0;
  if (a.rotate)
#pragma unroll
    for (int k = 0; k < E; ++k)
      signs |= (uint32_t)fa_hadamard_sign_negative(a.seed, (uint32_t)(lane + 32 * k)) << k;
  return signs;
}

/* A warp's run of tokens: [t0, t1) of head blockIdx.y of batch blockIdx.z; t0 >= seqlen: none. */
__device__ __forceinline__ void warp_run(const cuda_quant_args &a, int64_t *t0, int64_t *t1) {
  *t0 = ((int64_t)blockIdx.x * QUANT_WARPS + (threadIdx.x >> 5)) * QUANT_RUN;
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

template <int E>
__global__ void __launch_bounds__(32 * QUANT_WARPS) quant_amax_warps(cuda_quant_args a) {
  int64_t t0, t1;
  warp_run(a, &t0, &t1);
  if (t0 >= a.seqlen) return; /* the whole warp: nothing below waits on the block */
  const int lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, b = blockIdx.z, base = b * a.xs[0] + h * a.xs[2];
  const uint32_t signs = lane_signs<E>(a, lane);
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  int64_t blk = t0 / a.block_rows, next = (blk + 1) * a.block_rows;
  float m = 0.0f, cur[E], nxt[E] = {};
  load_lane<E>(a, base + t0 * a.xs[1], lane, cur);
  for (int64_t t = t0; t < t1; ++t) {
    if (t + 1 < t1) load_lane<E>(a, base + (t + 1) * a.xs[1], lane, nxt);
    if (t >= next) { /* the run enters the next descale block */
      amax_flush(a, b, h, blk, m);
      m = 0.0f;
      ++blk;
      next += a.block_rows;
    }
    if (a.rotate) rotate_lane<E>(cur, signs, lane, norm);
#pragma unroll
    for (int k = 0; k < E; ++k) {
      m = finite_max(m, cur[k]);
      cur[k] = nxt[k];
    }
  }
  amax_flush(a, b, h, blk, m);
}

/* Y: y's fa_dtype for the FP8 formats (the stores' common case, compiled without the switch),
   else 0 (any). */
template <int E, int Y>
__global__ void __launch_bounds__(32 * QUANT_WARPS) quant_store_warps(cuda_quant_args a) {
  int64_t t0, t1;
  warp_run(a, &t0, &t1);
  if (t0 >= a.seqlen) return;
  const int lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, b = blockIdx.z, base = b * a.xs[0] + h * a.xs[2];
  const int64_t ybase = b * a.ys[0] + h * a.ys[2];
  const uint32_t signs = lane_signs<E>(a, lane);
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  int64_t blk = t0 / a.block_rows, next = (blk + 1) * a.block_rows;
  float s = a.descale ? a.descale[descale_at(a, b, h, blk)] : 1.0f, cur[E], nxt[E] = {};
  load_lane<E>(a, base + t0 * a.xs[1], lane, cur);
  for (int64_t t = t0; t < t1; ++t) {
    if (t + 1 < t1) load_lane<E>(a, base + (t + 1) * a.xs[1], lane, nxt);
    if (t >= next) {
      ++blk;
      next += a.block_rows;
      if (a.descale) s = a.descale[descale_at(a, b, h, blk)];
    }
    if (a.rotate) rotate_lane<E>(cur, signs, lane, norm);
    const int64_t row = ybase + t * a.ys[1];
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float v = cur[k];
      const int64_t at = row + (int64_t)(lane + 32 * k) * a.ys[3];
      if (Y)
        store_fp8<Y>(a, at, v, s);
      else
        store_y(a, at, v, s);
      cur[k] = nxt[k];
    }
  }
}

/* The row passes by warps for head dim 32 E. */
template <int E>
void launch_warps(const cuda_quant_args *a, bool amax, cudaStream_t stream) {
  const int64_t per_block = (int64_t)QUANT_WARPS * QUANT_RUN;
  const dim3 grid((unsigned)((a->seqlen + per_block - 1) / per_block), (unsigned)a->heads,
                  (unsigned)a->batch);
  const int threads = 32 * QUANT_WARPS;
  if (amax)
    quant_amax_warps<E><<<grid, threads, 0, stream>>>(*a);
  else if (a->ydt == FA_F8E4M3)
    quant_store_warps<E, FA_F8E4M3><<<grid, threads, 0, stream>>>(*a);
  else if (a->ydt == FA_F8E5M2)
    quant_store_warps<E, FA_F8E5M2><<<grid, threads, 0, stream>>>(*a);
  else
    quant_store_warps<E, 0><<<grid, threads, 0, stream>>>(*a);
}

/* The row passes of a (amax: the descales' maxima; else the stores) by warps where the head dim
   is 32 x a power of two up to 1024 and the grid holds the heads and batches; false: by blocks. */
bool rows_by_warps(const cuda_quant_args *a, bool amax, cudaStream_t stream) {
  const int64_t per_block = (int64_t)QUANT_WARPS * QUANT_RUN;
  if (a->heads > 65535 || a->batch > 65535 || (a->seqlen + per_block - 1) / per_block > INT32_MAX)
    return false;
  switch (a->dim) {
    case 32:
      return launch_warps<1>(a, amax, stream), true;
    case 64:
      return launch_warps<2>(a, amax, stream), true;
    case 128:
      return launch_warps<4>(a, amax, stream), true;
    case 256:
      return launch_warps<8>(a, amax, stream), true;
    case 512:
      return launch_warps<16>(a, amax, stream), true;
    case 1024:
      return launch_warps<32>(a, amax, stream), true;
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

template <int E, int Y>
__global__ void __launch_bounds__(512) quant_fused(cuda_quant_args a) {
  constexpr int R = fused_shape<E>::R;
  __shared__ float warp_max[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t blk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t t0 = blk * a.block_rows,
                t1 = t0 + a.block_rows < a.seqlen ? t0 + a.block_rows : a.seqlen;
  const int64_t tw = t0 + (int64_t)warp * R; /* this warp's first token */
  const int64_t base = b * a.xs[0] + h * a.xs[2], ybase = b * a.ys[0] + h * a.ys[2];
  float v[R][E];
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (tw + i < t1) load_lane<E>(a, base + (tw + i) * a.xs[1], lane, v[i]);
  const uint32_t signs = lane_signs<E>(a, lane);
  const float norm = fa_hadamard_norm((uint32_t)a.log2_dim);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (tw + i < t1) {
      if (a.rotate) rotate_lane<E>(v[i], signs, lane, norm);
#pragma unroll
      for (int k = 0; k < E; ++k) m = finite_max(m, v[i][k]);
    }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  for (int w = 0; w < warps; ++w) m = fmaxf(m, warp_max[w]);
  const float scale = __fdiv_rn(m, a.fp8_max), s = scale > 0.0f ? scale : 1.0f;
  if (threadIdx.x == 0) a.descale[descale_at(a, b, h, blk)] = s;
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (tw + i < t1) {
      const int64_t row = ybase + (tw + i) * a.ys[1];
#pragma unroll
      for (int k = 0; k < E; ++k) {
        store_fp8<Y>(a, row + (int64_t)(lane + 32 * k) * a.ys[3], v[i][k], s);
      }
    }
}

template <int E>
void launch_fused(const cuda_quant_args *a, cudaStream_t stream) {
  constexpr int R = fused_shape<E>::R;
  const dim3 grid((unsigned)a->dshape[2], (unsigned)a->heads, (unsigned)a->batch);
  const int threads = 32 * (int)((a->block_rows + R - 1) / R);
  if (a->ydt == FA_F8E4M3)
    quant_fused<E, FA_F8E4M3><<<grid, threads, 0, stream>>>(*a);
  else
    quant_fused<E, FA_F8E5M2><<<grid, threads, 0, stream>>>(*a);
}

/* The whole call in one pass (quant_fused) where it applies: FP8 output, every descale element
   one descale block of one (batch, head) (no descale shared across heads or batches), blocks of
   at most 128 tokens, head dims 32, 64, 128 and 256, the grid's limits; false
   otherwise. */
bool fused(const cuda_quant_args *a, cudaStream_t stream) {
  if (!a->descale || a->dshape[0] != a->batch || a->dshape[1] != a->heads || a->block_rows > 128 ||
      a->heads > 65535 || a->batch > 65535 || a->dshape[2] > INT32_MAX || a->dshape[2] < 1)
    return false;
  switch (a->dim) {
    case 32:
      return launch_fused<1>(a, stream), true;
    case 64:
      return launch_fused<2>(a, stream), true;
    case 128:
      return launch_fused<4>(a, stream), true;
    case 256:
      return launch_fused<8>(a, stream), true;
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
