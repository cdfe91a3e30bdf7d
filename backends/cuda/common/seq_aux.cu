/*
 * seq_aux.cu: the steps around the forward over sequences (fa2_sm80/fa2_fwd_splitkv.cuh):
 *   kvcache_append: fa_forward_kvcache's new tokens into the cache, keys rotated (the rotary
 *                   embedding, interleaved pairs or halves), and q rotated into scratch; values
 *                   are rotated in double and rounded once to the storage dtype, as the CPU
 *                   backend does, so both write the same cache. A position outside the cache
 *                   (or a page entry outside [0, num_blocks)) is not written; one past the
 *                   rotary tables is not rotated.
 *   combine:        the split-KV pieces' partial outputs and LSEs merged by core/'s rule
 *                   (fa_softmax_merge, fa_softmax_lse) into out and lse; one warp a row.
 */
#include <cuda_runtime.h>

#include "attn_args.h"
#include "attn_common.cuh"
#include "core/math/softmax.h"
#include "ptx.cuh"
#include "seq_index.cuh"

namespace {

constexpr int AUX_THREADS = 128;

template <typename Tr>
__device__ __forceinline__ float load_table(const cuda_kvcache_args &a, const void *tab,
                                            int64_t at) {
  return a.rot_f32 ? static_cast<const float *>(tab)[at]
                   : Tr::to_float(static_cast<const typename Tr::elem *>(tab)[at]);
}

/* Element c of a row x rotated at position pos: its pair partner and the pair's angle per
   core's convention (interleaved: (2r, 2r + 1); else (r, r + rotary_dim / 2)). */
template <typename Tr>
__device__ __forceinline__ float rotated(const cuda_kvcache_args &a, const typename Tr::elem *x,
                                         int c, int pos) {
  const float xc = Tr::to_float(x[c]);
  if (c >= a.rotary_dim || pos < 0 || pos >= a.rot_rows) return xc;
  const int half = a.rotary_dim / 2;
  int r, partner, first;
  if (a.rot_interleaved) {
    r = c >> 1;
    first = (c & 1) == 0;
    partner = c ^ 1;
  } else {
    first = c < half;
    r = first ? c : c - half;
    partner = first ? c + half : c - half;
  }
  const double cs = load_table<Tr>(a, a.rot_cos, pos * a.cos_row + r * a.cos_col);
  const double sn = load_table<Tr>(a, a.rot_sin, pos * a.sin_row + r * a.sin_col);
  const double xp = Tr::to_float(x[partner]);
  /* (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos) */
  return first ? (float)(xc * cs - xp * sn) : (float)(xp * sn + xc * cs);
}

/* Block (t, b): token t of sequence b; threads over (K/V head, column) of k_new and v_new, then
   over (query head, column) of q. */
template <typename Tr>
__global__ void __launch_bounds__(AUX_THREADS) kvcache_append(const cuda_kvcache_args a) {
  typedef typename Tr::elem E;
  const int t = blockIdx.x, b = blockIdx.y;
  const int len = a.cache_seqlens[(int64_t)b * a.cache_seqlens_stride];
  const int d = a.head_dim;
  if (t < a.seqlen_new && a.k_new) {
    const int pos = len + t;
    int64_t kc = -1, vc = -1;
    if (pos >= 0 && pos < a.capacity) {
      if (a.block_table) {
        const int page = pos / a.page_size;
        const int blk = a.block_table[(int64_t)b * a.bt_batch + (int64_t)page * a.bt_page];
        const int in_page = pos - page * a.page_size;
        if (blk >= 0 && blk < a.num_blocks) {
          kc = (int64_t)blk * a.kc_str.batch + (int64_t)in_page * a.kc_str.row;
          vc = (int64_t)blk * a.vc_str.batch + (int64_t)in_page * a.vc_str.row;
        }
      } else {
        kc = (int64_t)b * a.kc_str.batch + (int64_t)pos * a.kc_str.row;
        vc = (int64_t)b * a.vc_str.batch + (int64_t)pos * a.vc_str.row;
      }
    }
    if (kc >= 0) {
      const E *kn =
          static_cast<const E *>(a.k_new) + (int64_t)b * a.kn_str.batch + (int64_t)t * a.kn_str.row;
      const E *vn =
          static_cast<const E *>(a.v_new) + (int64_t)b * a.vn_str.batch + (int64_t)t * a.vn_str.row;
      E *kd = static_cast<E *>(a.k_cache) + kc;
      E *vd = static_cast<E *>(a.v_cache) + vc;
      for (int i = threadIdx.x; i < a.heads_kv * d; i += blockDim.x) {
        const int hk = i / d, c = i - hk * d;
        const E *krow = kn + (int64_t)hk * a.kn_str.head;
        kd[(int64_t)hk * a.kc_str.head + c] = Tr::from_float(rotated<Tr>(a, krow, c, pos));
        vd[(int64_t)hk * a.vc_str.head + c] = vn[(int64_t)hk * a.vn_str.head + c];
      }
    }
  }
  if (t < a.seqlen_q && a.q_rot) {
    const int pos = len + (a.per_row_q ? t : 0);
    const E *q =
        static_cast<const E *>(a.q) + (int64_t)b * a.q_str.batch + (int64_t)t * a.q_str.row;
    E *qd = static_cast<E *>(a.q_rot) + ((int64_t)b * a.seqlen_q + t) * a.heads_q * d;
    for (int i = threadIdx.x; i < a.heads_q * d; i += blockDim.x) {
      const int h = i / d, c = i - h * d;
      qd[i] = Tr::from_float(rotated<Tr>(a, q + (int64_t)h * a.q_str.head, c, pos));
    }
  }
}

/* One warp per row (b, h, i) of the grid's rows. The pieces' LSEs are read in parallel (lane s
   holds pieces s, s + 32, ...) and reduced by core/'s merge (fa_softmax_merge over (lse, 1)
   pairs), giving the row's LSE; then each piece's row is scaled by its weight exp(lse_s - lse)
   (fa_softmax_prob_from_lse) and added, pieces in order, several loads in flight: a loop that
   folded one piece at a time waited a memory latency per piece (9.6 us for 16 pieces of 32 rows
   on an H200). Each lane keeps columns 2 lane + 64 k. */
template <typename Tr>
__global__ void __launch_bounds__(AUX_THREADS) splitkv_combine(const cuda_seq_args A) {
  typedef typename Tr::elem E;
  const cuda_fwd_args &f = A.f;
  const int64_t rows = (int64_t)f.p.batch * f.p.heads_q * f.p.seqlen_q;
  const int64_t w = (int64_t)blockIdx.x * (AUX_THREADS / 32) + threadIdx.x / 32;
  if (w >= rows) return;
  const int lane = threadIdx.x & 31;
  const int i = (int)(w % f.p.seqlen_q);
  const int h = (int)(w / f.p.seqlen_q % f.p.heads_q);
  const int b = (int)(w / ((int64_t)f.p.seqlen_q * f.p.heads_q));
  int q_start, sq;
  seq_q_rows_of(A.ix, b, f.p.seqlen_q, q_start, sq);
  if (i >= sq) return;
  const int d = f.p.head_dim, splits = A.splits;
  const int64_t piece = (int64_t)f.p.batch * f.p.heads_q * f.p.seqlen_q;
  const float *lse_part = A.lse_part + w;
  float m = -INFINITY, l = 0.0f, a1, a2;
  for (int s = lane; s < splits; s += 32)
    fa_softmax_merge(m, l, lse_part[s * piece], 1.0f, &m, &l, &a1, &a2);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
    fa_softmax_merge(m, l, m2, l2, &m, &l, &a1, &a2);
  }
  const float lse = fa_softmax_lse(m, l);
  constexpr int K = 4; /* up to 256 columns */
  float acc[K][2] = {};
#pragma unroll 4
  for (int s = 0; s < splits; ++s) {
    const float ws = fa_softmax_prob_from_lse(lse_part[s * piece], lse);
    const float *src = A.o_part + (s * piece + w) * d;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int c = 2 * lane + 64 * k;
      if (c < d) {
        const float2 v = *reinterpret_cast<const float2 *>(src + c);
        acc[k][0] += ws * v.x;
        acc[k][1] += ws * v.y;
      }
    }
  }
  E *out = static_cast<E *>(f.out) + (int64_t)h * f.o_str.head +
           (A.ix.cu_q ? (int64_t)(q_start + i) * f.o_str.row
                      : (int64_t)b * f.o_str.batch + (int64_t)i * f.o_str.row);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = 2 * lane + 64 * k;
    if (c < d) *reinterpret_cast<uint32_t *>(out + c) = Tr::pack(acc[k][0], acc[k][1]);
  }
  if (f.lse && lane == 0) f.lse[seq_lse_at(A.ix, f.lse_str, b, h, q_start, i)] = lse;
}

}  // namespace

extern "C" int cuda_kvcache_append_launch(const cuda_kvcache_args *a) {
  const int tokens = a->seqlen_new > a->seqlen_q ? a->seqlen_new : a->seqlen_q;
  if (a->batch == 0 || tokens == 0 || (!a->k_new && !a->q_rot)) return 0;
  const dim3 grid((unsigned)tokens, (unsigned)a->batch);
  const cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  if (a->bf16)
    kvcache_append<fa_bf16><<<grid, AUX_THREADS, 0, st>>>(*a);
  else
    kvcache_append<fa_f16><<<grid, AUX_THREADS, 0, st>>>(*a);
  return (int)cudaGetLastError();
}

extern "C" int cuda_splitkv_combine_launch(const cuda_seq_args *a) {
  const int64_t rows = (int64_t)a->f.p.batch * a->f.p.heads_q * a->f.p.seqlen_q;
  if (rows == 0) return 0;
  const int64_t blocks = (rows + AUX_THREADS / 32 - 1) / (AUX_THREADS / 32);
  if (blocks > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
  const cudaStream_t st = static_cast<cudaStream_t>(a->f.p.stream);
  if (a->f.p.bf16)
    splitkv_combine<fa_bf16><<<(unsigned)blocks, AUX_THREADS, 0, st>>>(*a);
  else
    splitkv_combine<fa_f16><<<(unsigned)blocks, AUX_THREADS, 0, st>>>(*a);
  return (int)cudaGetLastError();
}
