/*
 * fa2_bwd_aux.cu: the backward pass's two small kernels around the main one.
 *   dot_do_o:   D = rowsum(dO ∘ O) per query row (core/backward.h), fp32, one warp per row,
 *               and the LSE in log2 units (+inf where it is -inf: P = 0), both padded to the
 *               query tile with rows that contribute nothing (D 0, LSE +inf).
 *   convert_dq: dQ = scale · Σ_splits accumulator, in split order, to the storage dtype (the
 *               accumulator's padding rows and columns skipped).
 */
#include <cuda_runtime.h>

#include "../common/ptx.cuh"
#include "core/backward.h"
#include "fa2_common.cuh"
#include "fa2_launch.h"

namespace {

constexpr int ROWS_PER_BLOCK = 8; /* one warp each */

template <typename Tr>
__global__ void __launch_bounds__(ROWS_PER_BLOCK * 32) dot_do_o(const fa2_bwd_args a) {
  typedef typename Tr::elem E;
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  const int64_t rows = (int64_t)a.p.batch * a.p.heads_q * a.seqlen_q_padded;
  if (row >= rows) return;
  const int i = (int)(row % a.seqlen_q_padded);
  const int h = (int)((row / a.seqlen_q_padded) % a.p.heads_q);
  const int b = (int)(row / ((int64_t)a.seqlen_q_padded * a.p.heads_q));
  if (i >= a.p.seqlen_q) {
    if (lane == 0) {
      a.dsum[row] = 0.0f;
      a.lse_log2[row] = INFINITY;
    }
    return;
  }
  const E *o = static_cast<const E *>(a.out) + b * a.o_str.batch + h * a.o_str.head +
               (int64_t)i * a.o_str.row;
  const E *dO = static_cast<const E *>(a.dout) + b * a.do_str.batch + h * a.do_str.head +
                (int64_t)i * a.do_str.row;
  float acc = 0.0f;
  /* 8 elements (16 bytes) per lane and step; head_dim is a multiple of 8. */
  for (int c = lane * 8; c < a.p.head_dim; c += 32 * 8) {
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
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    a.dsum[row] = acc;
    const float l = a.lse[b * a.lse_str.batch + h * a.lse_str.head + (int64_t)i * a.lse_str.row];
    a.lse_log2[row] = l == -INFINITY ? INFINITY : l * FA2_LOG2E;
  }
}

template <typename Tr>
__global__ void convert_dq(const fa2_bwd_args a) {
  typedef typename Tr::elem E;
  const int hdp = a.head_dim_padded, sp = a.seqlen_q_padded;
  const int64_t per_split = (int64_t)a.p.batch * a.p.heads_q * sp * hdp;
  const int64_t pairs = per_split / 2; /* hdp is even: pairs never straddle rows */
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < pairs;
       p += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e = 2 * p;
    const int c = (int)(e % hdp);
    const int64_t row = e / hdp;
    const int i = (int)(row % sp);
    if (c >= a.p.head_dim || i >= a.p.seqlen_q) continue; /* padding */
    /* Where the pair sits in the accumulator's layout (fa2_args.h). */
    int64_t at = e;
    if (a.dq_layout == FA2_DQ_ROTATED) {
      const int nc = hdp / 8;
      at = row * hdp + (int64_t)(((c >> 3) + i % a.tile_m) % nc) * 8 + (c & 7);
    } else if (a.dq_layout == FA2_DQ_PAIRED) {
      at = row * hdp + (c & ~15) + 4 * ((c & 7) >> 1) + 2 * ((c >> 3) & 1);
    }
    float x = 0.0f, y = 0.0f;
    for (int s = 0; s < a.dq_splits; ++s) {
      const float2 v = *reinterpret_cast<const float2 *>(a.dq_accum + s * per_split + at);
      x += v.x;
      y += v.y;
    }
    const int h = (int)((row / sp) % a.p.heads_q);
    const int b = (int)(row / ((int64_t)sp * a.p.heads_q));
    E *dq = static_cast<E *>(a.dq) + b * a.dq_str.batch + h * a.dq_str.head +
            (int64_t)i * a.dq_str.row + c;
    *reinterpret_cast<uint32_t *>(dq) = Tr::pack(x * a.p.scale, y * a.p.scale);
  }
}
}  // namespace

extern "C" int fa2_bwd_dot_do_o_launch(const fa2_bwd_args *a) {
  const int64_t rows = (int64_t)a->p.batch * a->p.heads_q * a->seqlen_q_padded;
  if (rows == 0) return 0;
  const unsigned blocks = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
  cudaStream_t st = static_cast<cudaStream_t>(a->p.stream);
  if (a->p.bf16)
    dot_do_o<fa_bf16><<<blocks, ROWS_PER_BLOCK * 32, 0, st>>>(*a);
  else
    dot_do_o<fa_f16><<<blocks, ROWS_PER_BLOCK * 32, 0, st>>>(*a);
  return (int)cudaGetLastError();
}

extern "C" int fa2_bwd_convert_dq_launch(const fa2_bwd_args *a) {
  const int64_t pairs =
      (int64_t)a->p.batch * a->p.heads_q * a->seqlen_q_padded * a->head_dim_padded / 2;
  if (pairs == 0) return 0;
  int64_t blocks = (pairs + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  cudaStream_t st = static_cast<cudaStream_t>(a->p.stream);
  if (a->p.bf16)
    convert_dq<fa_bf16><<<(unsigned)blocks, 256, 0, st>>>(*a);
  else
    convert_dq<fa_f16><<<(unsigned)blocks, 256, 0, st>>>(*a);
  return (int)cudaGetLastError();
}
