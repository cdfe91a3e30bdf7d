/*
 * bwd_aux.cu: the backward pass's two small kernels around the main one (both kernel families).
 * Both move a few bytes per FLOP of the main kernel, so at short sequences they are a large part of
 * the backward's time (at seqlen 1k, head dim 128, a quarter of it before they were written for
 * bandwidth). The grid is (row blocks, heads, batch) and the
 * blocks two-dimensional, so no thread divides 64-bit indices. Over sequences of their own
 * lengths (cuda_bwd_args.seqs), each block takes its sequence's rows (common/seq_index.cuh) and
 * the grid covers the longest.
 *   dot_do_o:   D = rowsum(dO ∘ O) per query row (core/math/backward.h), fp32, LPR lanes per row
 *               with 16-byte loads, and the LSE in log2 units (+inf where it is -inf: P = 0),
 *               both padded to the query tile with rows that contribute nothing (D 0, LSE +inf);
 *               and the rows' fp32 dQ accumulator (every split) cleared.
 *   convert_dq: dQ = scale · Σ_splits accumulator, in split order, to the storage dtype: one
 *               thread per 16 columns of a row (16-byte loads in any of the accumulator's
 *               layouts, attn_args.h), the padding rows and columns skipped.
 */
#include <cuda_runtime.h>

#include "attn_args.h"
#include "attn_common.cuh"
#include "core/math/backward.h"
#include "ptx.cuh"
#include "seq_index.cuh"

namespace {

constexpr int AUX_THREADS = 256;

/* LPR (a power of two) lanes share a row: the head dim in 16-byte pieces, rounded up. */
template <typename Tr, int LPR>
__global__ void __launch_bounds__(AUX_THREADS) dot_do_o(const cuda_bwd_args a) {
  typedef typename Tr::elem E;
  constexpr int ROWS = AUX_THREADS / LPR;
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * ROWS + (int)threadIdx.x / LPR; /* query row within the head */
  const int h = blockIdx.y, b = blockIdx.z;
  int q_start = 0, sq = a.p.seqlen_q, padded = a.seqlen_q_padded;
  if (a.seqs) {
    seq_q_rows_of(a.ix, b, a.p.seqlen_q, q_start, sq);
    padded = (sq + a.tile_m - 1) / a.tile_m * a.tile_m;
  }
  const bool real = i < sq;
  float acc = 0.0f;
  if (real) {
    const E *o = static_cast<const E *>(a.out) + b * a.o_str.batch + h * a.o_str.head +
                 (int64_t)(q_start + i) * a.o_str.row;
    const E *dO = static_cast<const E *>(a.dout) + b * a.do_str.batch + h * a.do_str.head +
                  (int64_t)(q_start + i) * a.do_str.row;
    /* 8 elements (16 bytes) per lane and step; head_dim is a multiple of 8. */
    for (int c = (lane % LPR) * 8; c < a.p.head_dim; c += LPR * 8) {
      const uint4 ov = *reinterpret_cast<const uint4 *>(o + c);
      const uint4 dv = *reinterpret_cast<const uint4 *>(dO + c);
      const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
      float of[8], df[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 x = Tr::unpack(ow[w]), y = Tr::unpack(dw[w]);
        of[2 * w] = x.x;
        of[2 * w + 1] = x.y;
        df[2 * w] = y.x;
        df[2 * w + 1] = y.y;
      }
      acc += fa_bwd_rowdot(df, of, 8);
    }
  }
  /* Every lane takes part (a row's lanes are an aligned group of the warp). */
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  const int64_t row0 = seq_bwd_ws_row(a, b, h, q_start);
  if (lane % LPR == 0 && i < padded) {
    const int64_t row = row0 + i;
    if (real) {
      a.dsum[row] = acc;
      const float l = a.lse[seq_lse_at(a.ix, a.lse_str, b, h, q_start, i)];
      a.lse_log2[row] = l == -INFINITY ? INFINITY : l * CUDA_LOG2E;
    } else {
      a.dsum[row] = 0.0f;
      a.lse_log2[row] = INFINITY;
    }
  }
  /* The main kernel's work counters (attn_args.h: sched_count), cleared by the first block
     (stream order puts this before the main kernel). */
  if (blockIdx.x + blockIdx.y + blockIdx.z == 0 && (int)threadIdx.x < a.sched_counters)
    a.sched_count[threadIdx.x] = 0u;
  /* The dQ accumulator's part of this block's rows, in every split, cleared here: one pass over
     memory less than a memset of its own before this kernel. Whatever the layout (attn_args.h),
     a head's accumulator (a sequence's, over sequences) is padded x head_dim_padded contiguous
     floats, so the blocks' equal slices of it cover it. */
  const int64_t per_head = (int64_t)padded * a.head_dim_padded;
  const int64_t per_split = cuda_bwd_split_rows(&a) * a.head_dim_padded;
  const int64_t lo = (int64_t)blockIdx.x * ROWS * a.head_dim_padded;
  const int64_t hi = min(lo + (int64_t)ROWS * a.head_dim_padded, per_head);
  float4 *head_acc = reinterpret_cast<float4 *>(a.dq_accum + row0 * a.head_dim_padded);
  for (int sp = 0; sp < a.dq_splits; ++sp)
    for (int64_t k = lo / 4 + threadIdx.x; k < hi / 4; k += AUX_THREADS)
      head_acc[sp * (per_split / 4) + k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

/* Adds the accumulator's 16 values of columns c0 .. c0 + 15 of query row i (row: its first
   float) to v, in natural column order, from the layout the main kernel wrote (attn_args.h). */
__device__ __forceinline__ void add_dq_group(float (&v)[16], const float *row, int c0, int i,
                                             const cuda_bwd_args &a) {
  float w[16];
  if (a.dq_layout == CUDA_DQ_FRAGMENT) {
    /* Row i is row 8r + g of its 16-row block; column 2t + e of 8-column block j sits at
       4 (4g + t) + 2r + e of the block's 128 floats. */
    const float *blocks = row - (int64_t)(i % 16) * a.head_dim_padded;
    const int lane_row = (i % 8) * 16 + 2 * ((i / 8) % 2);
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        *reinterpret_cast<float2 *>(w + 8 * q + 2 * t) =
            *reinterpret_cast<const float2 *>(blocks + (c0 / 8 + q) * 128 + lane_row + 4 * t);
  } else if (a.dq_layout == CUDA_DQ_ROTATED) {
    const int nc = a.head_dim_padded / 8, rot = i % a.tile_m;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float *chunk = row + ((c0 / 8 + q + rot) % nc) * 8;
      *reinterpret_cast<float4 *>(w + 8 * q) = *reinterpret_cast<const float4 *>(chunk);
      *reinterpret_cast<float4 *>(w + 8 * q + 4) = *reinterpret_cast<const float4 *>(chunk + 4);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<float4 *>(w + 4 * q) = *reinterpret_cast<const float4 *>(row + c0 + 4 * q);
  }
#pragma unroll
  for (int k = 0; k < 16; ++k) v[k] += w[k];
}

/* Blocks of (head_dim_padded / 16) x (AUX_THREADS / that) threads: x a row's 16-column group, y
   the row. */
template <typename Tr>
__global__ void __launch_bounds__(AUX_THREADS) convert_dq(const cuda_bwd_args a) {
  typedef typename Tr::elem E;
  const int i = blockIdx.x * blockDim.y + threadIdx.y;
  const int c0 = threadIdx.x * 16;
  const int h = blockIdx.y, b = blockIdx.z;
  int q_start = 0, sq = a.p.seqlen_q;
  if (a.seqs) seq_q_rows_of(a.ix, b, a.p.seqlen_q, q_start, sq);
  if (i >= sq || c0 >= a.p.head_dim) return;
  const int64_t per_split = cuda_bwd_split_rows(&a) * a.head_dim_padded;
  const float *row = a.dq_accum + (seq_bwd_ws_row(a, b, h, q_start) + i) * a.head_dim_padded;
  float v[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) v[k] = 0.0f;
  for (int s = 0; s < a.dq_splits; ++s) add_dq_group(v, row + s * per_split, c0, i, a);
  E *dq = static_cast<E *>(a.dq) + b * a.dq_str.batch + h * a.dq_str.head +
          (int64_t)(q_start + i) * a.dq_str.row + c0;
  /* head_dim is a multiple of 8: the group's second half may be padding. */
#pragma unroll
  for (int q = 0; q < 2; ++q)
    if (c0 + 8 * q < a.p.head_dim) {
      uint4 out;
      out.x = Tr::pack(v[8 * q] * a.p.scale, v[8 * q + 1] * a.p.scale);
      out.y = Tr::pack(v[8 * q + 2] * a.p.scale, v[8 * q + 3] * a.p.scale);
      out.z = Tr::pack(v[8 * q + 4] * a.p.scale, v[8 * q + 5] * a.p.scale);
      out.w = Tr::pack(v[8 * q + 6] * a.p.scale, v[8 * q + 7] * a.p.scale);
      *reinterpret_cast<uint4 *>(dq + 8 * q) = out;
    }
}

template <typename Tr, int LPR>
int launch_dot_do_o(const cuda_bwd_args *a) {
  constexpr int ROWS = AUX_THREADS / LPR;
  dim3 grid((unsigned)((a->seqlen_q_padded + ROWS - 1) / ROWS), (unsigned)a->p.heads_q,
            (unsigned)a->p.batch);
  dot_do_o<Tr, LPR><<<grid, AUX_THREADS, 0, static_cast<cudaStream_t>(a->p.stream)>>>(*a);
  return (int)cudaGetLastError();
}

template <typename Tr>
int launch_dot_do_o_for(const cuda_bwd_args *a) {
  const int pieces = a->head_dim_padded / 8;
  if (pieces <= 4) return launch_dot_do_o<Tr, 4>(a);
  if (pieces <= 8) return launch_dot_do_o<Tr, 8>(a);
  if (pieces <= 16) return launch_dot_do_o<Tr, 16>(a);
  return launch_dot_do_o<Tr, 32>(a);
}
}  // namespace

extern "C" int cuda_bwd_dot_do_o_launch(const cuda_bwd_args *a) {
  if (a->seqlen_q_padded == 0 || a->p.heads_q == 0 || a->p.batch == 0) return 0;
  return a->p.bf16 ? launch_dot_do_o_for<fa_bf16>(a) : launch_dot_do_o_for<fa_f16>(a);
}

extern "C" int cuda_bwd_convert_dq_launch(const cuda_bwd_args *a) {
  if (a->p.seqlen_q == 0 || a->p.heads_q == 0 || a->p.batch == 0) return 0;
  const int groups = a->head_dim_padded / 16;
  const dim3 block((unsigned)groups, (unsigned)(AUX_THREADS / groups));
  const dim3 grid((unsigned)((a->p.seqlen_q + (int)block.y - 1) / (int)block.y),
                  (unsigned)a->p.heads_q, (unsigned)a->p.batch);
  cudaStream_t st = static_cast<cudaStream_t>(a->p.stream);
  if (a->p.bf16)
    convert_dq<fa_bf16><<<grid, block, 0, st>>>(*a);
  else
    convert_dq<fa_f16><<<grid, block, 0, st>>>(*a);
  return (int)cudaGetLastError();
}
