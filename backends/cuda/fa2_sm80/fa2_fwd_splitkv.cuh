/*
 * fa2_fwd_splitkv.cuh: the FlashAttention-2 forward over sequences of their own lengths, the
 * inference side of the CUDA backend (sm_80 and newer): packed rows (cu_seqlens), used keys
 * (seqused_k), paged K/V (block_table), a KV cache's lengths, and split-KV (Flash-Decoding).
 *
 * One block of 4 warps per (query block, group of query heads, sequence, key piece). The block's
 * 64 rows are 64 / pack positions of each of pack query heads that share a K/V head (GQA
 * packing: a decoding step's rows of all of them), so each K/V tile is read once for the group.
 * Each sequence's lengths, mask and rows are read from the device tables; every index from them
 * is bounded before use (cuda_seq_args). The key tiles the block's rows see are cut into `splits`
 * pieces; with more than one, each block writes its rows' normalised partial output and LSE in
 * fp32 and a combine kernel (common/seq_aux.cu) merges them with core/'s rule. Decoding steps,
 * whose rows fit 16, run fa2_fwd_decode.cuh's kernel instead. Per key tile the
 * work is fa2_fwd_step.cuh's, as in fa2_fwd.cuh; K and V rows are copied one by one (cp.async),
 * each through the block table where the cache is paged.
 */
#ifndef FA_CUDA_FA2_FWD_SPLITKV_CUH
#define FA_CUDA_FA2_FWD_SPLITKV_CUH

#include <math.h>

#include "../common/attn_common.cuh"
#include "../common/ptx.cuh"
#include "../common/seq_index.cuh"
#include "../common/tile_io.cuh"
#include "../common/warp_mma.cuh"
#include "core/math/mask.h"
#include "core/math/softmax.h"
#include "fa2_fwd_step.cuh"
#include "fa2_tiles.h"

/* A sequence as the kernels see it: its query rows and keys, where its rows start, its mask. */
struct splitkv_seq {
  int b, sq, sk;
  int q_start;            /* packed: its first row in q, out and a packed lse */
  int64_t q_base, o_base; /* element offsets of its position 0 (head 0) in q and out */
  int64_t k_base, v_base; /* of its key 0 in k and v (K/V head 0; not paged) */
};

/* Sequence b's lengths and bases (common/seq_index.cuh bounds every value read from the tables):
   keys within what the sequence addresses (its packed rows, the cache, the block table's pages),
   a KV cache's from its length plus the new tokens. */
__device__ __forceinline__ void splitkv_seq_of(const cuda_seq_args &A, int b, splitkv_seq &S) {
  const cuda_fwd_args &f = A.f;
  const seq_rows r = seq_rows_of(A.ix, b, f.p.seqlen_q, f.p.seqlen_k, A.ix.cu_k && !A.block_table);
  S.b = b;
  S.q_start = r.q_start;
  S.sq = r.sq;
  S.q_base = A.ix.cu_q ? (int64_t)r.q_start * f.q_str.row : (int64_t)b * f.q_str.batch;
  S.o_base = A.ix.cu_q ? (int64_t)r.q_start * f.o_str.row : (int64_t)b * f.o_str.batch;
  S.k_base = (int64_t)b * f.k_str.batch + (int64_t)r.k_start * f.k_str.row;
  S.v_base = (int64_t)b * f.v_str.batch + (int64_t)r.k_start * f.v_str.row;
  S.sk = A.cache_seqlens
             ? seq_clamp(A.cache_seqlens[(int64_t)b * A.cache_seqlens_stride] + A.seqlen_new, 0,
                         r.k_rows)
             : r.sk;
}

/* The BM x HD Q tile: row r is position m0 + (r mod rows per head) of query head
   h0 + r / rows per head (rph_log2: log2 of rows per head); rows past the sequence and columns
   past d are zero-filled by the copy. */
template <int BM, int HD, int NT, typename TL, typename E>
__device__ __forceinline__ void splitkv_load_q(E *sQ, const E *q, const cuda_strides &st,
                                               const splitkv_seq &S, int h0, int m0, int rph_log2,
                                               int d, int tid) {
  typedef tile_walk<BM, HD, NT> W;
  const W w = {tid};
  if (!w.active()) return;
  const int col = w.col(), r0 = w.r0();
  const uint32_t base = smem_u32(sQ);
#pragma unroll
  for (int i = 0; i < W::PASSES; ++i) {
    if (!W::in_tile(r0, i)) continue;
    const int r = r0 + i * W::ROWS_PER_PASS;
    const int hh = r >> rph_log2, pos = m0 + (r & ((1 << rph_log2) - 1));
    const bool ok = pos < S.sq && col < d;
    const E *src = q;
    if (ok) src = q + S.q_base + (int64_t)pos * st.row + (int64_t)(h0 + hh) * st.head + col;
    cp_async_16(base + TL::off(r, col) * (int)sizeof(E), src, ok ? 16 : 0);
  }
}

/* Paged K/V: the block-table entry of the page that holds key j of sequence S (read only for
   keys the sequence addresses), and the offset of key j's row in a cache of strides st given it
   (pages are powers of two: page_shift is their log2). */
__device__ __forceinline__ int splitkv_page_entry(const cuda_seq_args &A, const splitkv_seq &S,
                                                  int j) {
  return A.block_table[(int64_t)S.b * A.bt_batch + (int64_t)(j >> A.page_shift) * A.bt_page];
}
__device__ __forceinline__ int64_t splitkv_paged_row(const cuda_seq_args &A, const cuda_strides &st,
                                                     int blk, int j) {
  return (int64_t)blk * st.batch + (int64_t)(j & ((1 << A.page_shift) - 1)) * st.row;
}

/* A thread's block-table entries for the rows it copies of one K/V tile (one a pass of
   tile_walk), read a tile ahead of the copies, so that issuing them waits for no table load:
   paged decoding at head dims 64-128 went from 10-31% behind the dense cache to within 0-5.5%
   (H100, bench/NOTES.md). -1 where the key is past the sequence; unused where not paged. */
template <int BN, int HD, int NT>
struct kv_tile_pages {
  int blk[tile_walk<BN, HD, NT>::PASSES];
};

template <int BN, int HD, int NT>
__device__ __forceinline__ void splitkv_pages_of(kv_tile_pages<BN, HD, NT> &P,
                                                 const cuda_seq_args &A, const splitkv_seq &S,
                                                 int c0, int tid) {
  typedef tile_walk<BN, HD, NT> W;
  if (!A.block_table) return;
  const int j0 = c0 + (W{tid}).r0();
#pragma unroll
  for (int i = 0; i < W::PASSES; ++i) {
    const int j = j0 + i * W::ROWS_PER_PASS;
    P.blk[i] = j < S.sk ? splitkv_page_entry(A, S, j) : -1;
  }
}

/* The BN x HD K and V tiles of keys c0..: key j of the sequence, through the block table's
   entries P (splitkv_pages_of for c0) when paged (an entry outside [0, num_blocks) reads as
   zeros); keys past the sequence and columns past d zero-filled. PARTS: SPLITKV_K, SPLITKV_V or
   both (the other tile's pointer unused). */
enum { SPLITKV_K = 1, SPLITKV_V = 2, SPLITKV_KV = 3 };
template <int BN, int HD, int NT, typename TL, int PARTS = SPLITKV_KV, typename E>
__device__ __forceinline__ void splitkv_load_kv(E *sK, E *sV, const cuda_seq_args &A,
                                                const splitkv_seq &S,
                                                const kv_tile_pages<BN, HD, NT> &P, int c0, int hk,
                                                int d, int tid) {
  typedef tile_walk<BN, HD, NT> W;
  const W w = {tid};
  if (!w.active()) return;
  const cuda_fwd_args &f = A.f;
  const E *k = static_cast<const E *>(f.k), *v = static_cast<const E *>(f.v);
  const int col = w.col(), r0 = w.r0();
  const uint32_t bk = smem_u32(sK), bv = smem_u32(sV);
#pragma unroll
  for (int i = 0; i < W::PASSES; ++i) {
    if (!W::in_tile(r0, i)) continue;
    const int r = r0 + i * W::ROWS_PER_PASS, j = c0 + r;
    bool ok = j < S.sk && col < d;
    const E *ks = k, *vs = v;
    if (ok) {
      int64_t ko, vo;
      if (A.block_table) {
        const int blk = P.blk[i];
        ok = blk >= 0 && blk < A.num_blocks;
        ko = splitkv_paged_row(A, f.k_str, blk, j);
        vo = splitkv_paged_row(A, f.v_str, blk, j);
      } else {
        ko = S.k_base + (int64_t)j * f.k_str.row;
        vo = S.v_base + (int64_t)j * f.v_str.row;
      }
      if (ok) {
        ks = k + ko + (int64_t)hk * f.k_str.head + col;
        vs = v + vo + (int64_t)hk * f.v_str.head + col;
      }
    }
    const uint32_t off = TL::off(r, col) * (int)sizeof(E);
    if (PARTS & SPLITKV_K) cp_async_16(bk + off, ks, ok ? 16 : 0);
    if (PARTS & SPLITKV_V) cp_async_16(bv + off, vs, ok ? 16 : 0);
  }
}

template <typename Tr, int HD>
__global__ void __launch_bounds__(128) fa2_splitkv_kernel(const cuda_seq_args A) {
  typedef typename Tr::elem E;
  constexpr int BM = FA2_SPLITKV_TILE_M, BN = FA2_SPLITKV_TILE_N(HD);
  constexpr int NT = 128, MT = 1;
  typedef typename smem_tile_layout<HD, FA2_SWIZZLED(HD)>::type TL;
  constexpr int LD = TL::LD;
  constexpr int NB = BN / 8; /* n8 blocks of keys in S */
  constexpr int DB = HD / 8; /* n8 blocks of the head dim in O */
  static_assert(BN % 16 == 0 && HD % 32 == 0, "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  E *sQ = reinterpret_cast<E *>(smem_raw);
  E *sK = sQ + BM * LD; /* two stages each */
  E *sV = sK + 2 * BN * LD;

  const cuda_fwd_args &f = A.f;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int b = (int)blockIdx.z / A.splits, split = (int)blockIdx.z - b * A.splits;
  int rph_log2 = 6;
  while ((1 << (6 - rph_log2)) < A.pack) --rph_log2; /* rows per head: 64 / pack */
  const int h0 = (int)blockIdx.y * A.pack;
  const int hk = h0 / (f.p.heads_q / f.p.heads_kv);
  const int m0 = (int)blockIdx.x << rph_log2;
  const int d = f.p.head_dim;

  splitkv_seq S;
  splitkv_seq_of(A, b, S);
  if (m0 >= S.sq) return; /* the sequence has no rows here (the grid covers the longest) */
  const int m_last = min(m0 + (1 << rph_log2), S.sq) - 1;
  const fa_mask mask = seq_mask_of(A.ix, S.sq, S.sk);
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&mask, m0, S.sk, &lo_first, &hi_first);
  fa_mask_key_range(&mask, m_last, S.sk, &lo_last, &hi_last);
  const int n_begin = (int)(lo_first / BN);
  const int n_end = hi_last > lo_first ? (int)((hi_last + BN - 1) / BN) : n_begin;
  /* This block's piece of the key tiles: an equal share of its rows' tiles, in order. */
  const int64_t span = n_end - n_begin;
  const int nb0 = n_begin + (int)(span * split / A.splits);
  const int nb1 = n_begin + (int)(span * (split + 1) / A.splits);

  /* Each thread's two rows: their query head (offset) and position, and key ranges. */
  const int warp_row0 = warp * 16;
  int row_lo[MT][2], row_hi[MT][2], row_pos[2], row_head[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rr = warp_row0 + g + 8 * r;
    row_head[r] = rr >> rph_log2;
    row_pos[r] = m0 + (rr & ((1 << rph_log2) - 1));
    int64_t lo = 0, hi = 0;
    if (row_pos[r] < S.sq) fa_mask_key_range(&mask, row_pos[r], S.sk, &lo, &hi);
    row_lo[0][r] = (int)lo;
    row_hi[0][r] = (int)hi;
  }

  const bool capped = f.p.softcap > 0.0f;
  const float sl2 = capped ? CUDA_LOG2E : f.p.scale * CUDA_LOG2E;

  float o[MT][DB][4];
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int db = 0; db < DB; ++db)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[0][db][c] = 0.0f;
  row_max[0][0] = row_max[0][1] = -INFINITY;
  row_sum[0][0] = row_sum[0][1] = 0.0f;

  splitkv_load_q<BM, HD, NT, TL>(sQ, static_cast<const E *>(f.q), f.q_str, S, h0, m0, rph_log2, d,
                                 tid);
  kv_tile_pages<BN, HD, NT> P; /* the entries of the next tile to copy */
  splitkv_pages_of(P, A, S, nb0 * BN, tid);
  if (nb0 < nb1) splitkv_load_kv<BN, HD, NT, TL>(sK, sV, A, S, P, nb0 * BN, hk, d, tid);
  cp_async_commit();
  if (nb0 + 1 < nb1) splitkv_pages_of(P, A, S, (nb0 + 1) * BN, tid);

  for (int n = nb0, it = 0; n < nb1; ++n, ++it) {
    const int st = it & 1;
    const int c0 = n * BN;
    /* Tile n has landed; after the barrier every warp is also done with tile n - 1, whose stage
       the next tile's copies overwrite while this one is computed. */
    cp_async_wait<0>();
    __syncthreads();
    fa_tile_class cls = fa_mask_tile_class_from_ranges(lo_first, hi_first, lo_last, hi_last, c0,
                                                       min(c0 + BN, S.sk));
    /* Rows past the sequence (padding of the tile) are masked only where a tile is cut anyway;
       their results are never stored. */
    if (cls == FA_TILE_FULL && c0 + BN > S.sk) cls = FA_TILE_PARTIAL;
    const E *tK = sK + st * BN * LD;
    const E *tV = sV + st * BN * LD;
    float s[MT][NB][4];
    if (cls != FA_TILE_EMPTY) {
      zero_tile(s);
      mma_rows_rows<Tr, MT, NB, HD / 16, TL, TL>(s, sQ, warp_row0, tK, 0, lane);
    }
    if (n + 1 < nb1)
      splitkv_load_kv<BN, HD, NT, TL>(sK + (st ^ 1) * BN * LD, sV + (st ^ 1) * BN * LD, A, S, P,
                                      c0 + BN, hk, d, tid);
    cp_async_commit();
    if (n + 2 < nb1) splitkv_pages_of(P, A, S, c0 + 2 * BN, tid);
    if (cls != FA_TILE_EMPTY) {
      if (capped) softcap_tile(s, f.p.scale, f.p.softcap);
      if (cls == FA_TILE_PARTIAL) fa2_mask_scores(s, c0, row_lo, row_hi, t);
      fa2_softmax_pv<Tr, MT, NB, DB, TL>(s, o, row_max, row_sum, sl2, tV, lane);
    }
  }
  cp_async_wait<0>();
  if (nb0 >= nb1) __syncthreads(); /* the Q copies of other threads, before sQ is reused */
  __syncwarp();

  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[0][r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = fa_softmax_out_scale(l);
    lse[r] = l > 0.0f ? row_max[0][r] * sl2 * CUDA_LN2 + logf(l) : -INFINITY;
  }

  if (A.splits > 1) {
    /* The piece's normalised rows and their LSEs, fp32, straight from registers. */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row_pos[r] >= S.sq) continue;
      const int h = h0 + row_head[r];
      const int64_t row =
          (((int64_t)split * f.p.batch + b) * f.p.heads_q + h) * f.p.seqlen_q + row_pos[r];
      if (t == 0) A.lse_part[row] = lse[r];
      float *dst = A.o_part + row * d;
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        const int c = db * 8 + 2 * t;
        if (c < d)
          *reinterpret_cast<float2 *>(dst + c) =
              make_float2(o[0][db][2 * r] * inv[r], o[0][db][2 * r + 1] * inv[r]);
      }
    }
    return;
  }

  /* One piece: O through the warp's own rows of the Q tile, stored 16 bytes at a time. */
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int db = 0; db < DB; ++db)
      *reinterpret_cast<uint32_t *>(sQ + TL::off8(warp_row0 + 8 * r, g, db * 8 + 2 * t)) =
          Tr::pack(o[0][db][2 * r] * inv[r], o[0][db][2 * r + 1] * inv[r]);
    if (f.lse && t == 0 && row_pos[r] < S.sq) {
      const int h = h0 + row_head[r];
      f.lse[seq_lse_at(A.ix, f.lse_str, b, h, S.q_start, row_pos[r])] = lse[r];
    }
  }
  __syncthreads();
  typedef tile_walk<BM, HD, NT> W;
  const W w = {tid};
  if (!w.active()) return;
  const int col = w.col(), r0 = w.r0();
  if (col >= d) return;
  E *out = static_cast<E *>(f.out);
#pragma unroll
  for (int i = 0; i < W::PASSES; ++i) {
    if (!W::in_tile(r0, i)) continue;
    const int r = r0 + i * W::ROWS_PER_PASS;
    const int hh = r >> rph_log2, pos = m0 + (r & ((1 << rph_log2) - 1));
    if (pos < S.sq)
      *reinterpret_cast<uint4 *>(out + S.o_base + (int64_t)pos * f.o_str.row +
                                 (int64_t)(h0 + hh) * f.o_str.head + col) =
          *reinterpret_cast<const uint4 *>(sQ + TL::off(r, col));
  }
}

#endif /* FA_CUDA_FA2_FWD_SPLITKV_CUH */
