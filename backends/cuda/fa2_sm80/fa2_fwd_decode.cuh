/*
 * fa2_fwd_decode.cuh: the forward over sequences for decoding steps, whose rows (new tokens x the
 * query heads of one K/V head) fit 16: the same sequences, tables, pieces and partial results as
 * fa2_fwd_splitkv.cuh, with one 16-row Q tile per block and the 4 warps splitting each key tile
 * instead of its rows.
 *
 * A decoding step streams K and V once and computes little, so the kernel is built for bytes in
 * flight: key tiles of 64 rows in FA2_DECODE_STAGES stages of cp.async (all but one in flight
 * while a tile is computed), and no MMA on rows that do not exist (the 64-row kernel computes 64
 * rows for the 1-4 a decoding step has). Each warp runs the online softmax of the 16 rows over
 * its 16 keys of every tile; at the end the warps' maxima, sums and outputs are merged (core/'s
 * rule, in the log2 domain) and stored as fa2_fwd_splitkv.cuh stores them: the normalised piece
 * and its LSE in fp32 when the keys are split, else out and lse.
 *
 * HALVES: K and V of a tile staged as separate halves in three tile buffers (half h in buffer
 * h mod 3: K of tile n, then V of tile n), two halves in flight while one is computed, in place of
 * FA2_DECODE_STAGES whole stages. At head dims above 192 two whole stages take 139 KB and keep one
 * block (4 warps) an SM, which leaves the kernel bound by instruction issue; the halves take
 * 104 KB, two blocks an SM: 9-11% more K+V bandwidth at head dim 256, MHA, 4k-128k keys, batch 8
 * (H100, bench/NOTES.md), the pipeline at head dims above 192.
 */
#ifndef FA_CUDA_FA2_FWD_DECODE_CUH
#define FA_CUDA_FA2_FWD_DECODE_CUH

#include "fa2_fwd_splitkv.cuh"

/* A warp's scores of its KW keys from cw (tK: their rows) for the block's 16 rows: softcapped,
   and masked where the keys cross a row's range. FA_TILE_EMPTY, s untouched, where no row sees
   any of them. ranges: the first and last row's key ranges. */
template <typename Tr, int HD, int NB, typename TL, typename E>
__device__ __forceinline__ fa_tile_class decode_warp_scores(
    float (&s)[1][NB][4], const E *sQ, const E *tK, int cw, int sk, const int64_t (&ranges)[4],
    const int (&row_lo)[1][2], const int (&row_hi)[1][2], const cuda_fwd_args &f, int lane) {
  constexpr int KW = NB * 8;
  fa_tile_class cls = fa_mask_tile_class_from_ranges(ranges[0], ranges[1], ranges[2], ranges[3], cw,
                                                     min(cw + KW, sk));
  if (cls == FA_TILE_EMPTY) return cls;
  if (cls == FA_TILE_FULL && cw + KW > sk) cls = FA_TILE_PARTIAL;
  zero_tile(s);
  mma_rows_rows<Tr, 1, NB, HD / 16, TL, TL>(s, sQ, 0, tK, 0, lane);
  if (f.p.softcap > 0.0f) softcap_tile(s, f.p.scale, f.p.softcap);
  if (cls == FA_TILE_PARTIAL) fa2_mask_scores(s, cw, row_lo, row_hi, lane & 3);
  return cls;
}

/* A decoding block's place: its sequence, its 16 rows (query heads h0.. of K/V head hk, positions
   m0..), the key tiles nb0..nb1 of its piece, and each thread's two rows (g: the lane's row group)
   with their key ranges. */
struct decode_block {
  splitkv_seq S;
  int split, h0, hk, m0, rph_log2, nb0, nb1;
  int64_t ranges[4]; /* the first and last row's key ranges */
  int row_lo[1][2], row_hi[1][2], row_pos[2], row_head[2];
};

/* False where the block has no rows (the grid covers the longest sequence). */
template <int BN>
__device__ __forceinline__ bool decode_block_of(const cuda_seq_args &A, int g, decode_block &B) {
  const cuda_fwd_args &f = A.f;
  const int b = (int)blockIdx.z / A.splits;
  B.split = (int)blockIdx.z - b * A.splits;
  int rph_log2 = 4;
  while ((1 << (4 - rph_log2)) < A.pack) --rph_log2; /* rows per head: 16 / pack */
  B.rph_log2 = rph_log2;
  B.h0 = (int)blockIdx.y * A.pack;
  B.hk = B.h0 / (f.p.heads_q / f.p.heads_kv);
  B.m0 = (int)blockIdx.x << rph_log2;
  splitkv_seq_of(A, b, B.S);
  const splitkv_seq &S = B.S;
  if (B.m0 >= S.sq) return false;
  const int m_last = min(B.m0 + (1 << rph_log2), S.sq) - 1;
  const fa_mask mask = seq_mask_of(A.ix, S.sq, S.sk);
  fa_mask_key_range(&mask, B.m0, S.sk, &B.ranges[0], &B.ranges[1]);
  fa_mask_key_range(&mask, m_last, S.sk, &B.ranges[2], &B.ranges[3]);
  const int n_begin = (int)(B.ranges[0] / BN);
  const int n_end = B.ranges[3] > B.ranges[0] ? (int)((B.ranges[3] + BN - 1) / BN) : n_begin;
  const int64_t span = n_end - n_begin;
  B.nb0 = n_begin + (int)(span * B.split / A.splits);
  B.nb1 = n_begin + (int)(span * (B.split + 1) / A.splits);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rr = g + 8 * r;
    B.row_head[r] = rr >> rph_log2;
    B.row_pos[r] = B.m0 + (rr & ((1 << rph_log2) - 1));
    int64_t lo = 0, hi = 0;
    if (B.row_pos[r] < S.sq) fa_mask_key_range(&mask, B.row_pos[r], S.sk, &lo, &hi);
    B.row_lo[0][r] = (int)lo;
    B.row_hi[0][r] = (int)hi;
  }
  return true;
}

/* A warp's softmax state before its first key: no rows seen. */
template <int DB>
__device__ __forceinline__ void decode_clear(float (&o)[1][DB][4], float (&row_max)[1][2],
                                             float (&row_sum)[1][2]) {
#pragma unroll
  for (int db = 0; db < DB; ++db)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[0][db][c] = 0.0f;
  row_max[0][0] = row_max[0][1] = -INFINITY;
  row_sum[0][0] = row_sum[0][1] = 0.0f;
}

/* The end of a decoding block: the 4 warps' softmax states merged into warp 0 (core/'s rule, in
   the log2 domain) through red (shared memory no copy writes any more; every warp past its key
   loop), then the rows stored: the normalised piece and its LSE in fp32 when the keys are split,
   else out and lse. */
template <typename Tr, int DB>
__device__ __forceinline__ void decode_merge_store(float (&o)[1][DB][4], float (&row_max)[1][2],
                                                   float (&row_sum)[1][2], float sl2, float *red,
                                                   const cuda_seq_args &A, const decode_block &B,
                                                   int warp, int lane) {
  typedef typename Tr::elem E;
  const cuda_fwd_args &f = A.f;
  const splitkv_seq &S = B.S;
  const int t = lane & 3, d = f.p.head_dim;
  constexpr int WORDS = DB * 4 + 4; /* per lane: o, then max and sum of both rows */
  /* Warps 1-3 hand their rows' state to warp 0, in fragment order (lane-contiguous). */
  if (warp > 0) {
    float *mine = red + (warp - 1) * WORDS * 32 + lane;
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int c = 0; c < 4; ++c) mine[(db * 4 + c) * 32] = o[0][db][c];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mine[(DB * 4 + r) * 32] = row_max[0][r];
      mine[(DB * 4 + 2 + r) * 32] = row_sum[0][r];
    }
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = row_max[0][r];
#pragma unroll
    for (int w = 0; w < 3; ++w) mx = fmaxf(mx, red[(w * WORDS + DB * 4 + r) * 32 + lane]);
    const float ms = fa_softmax_safe_max(mx) * sl2;
    const float own = row_max[0][r] == -INFINITY ? 0.0f : fast_exp2(row_max[0][r] * sl2 - ms);
    float l = row_sum[0][r] * own;
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      o[0][db][2 * r] *= own;
      o[0][db][2 * r + 1] *= own;
    }
#pragma unroll
    for (int w = 0; w < 3; ++w) {
      const float *theirs = red + w * WORDS * 32 + lane;
      const float m_w = theirs[(DB * 4 + r) * 32];
      const float a = m_w == -INFINITY ? 0.0f : fast_exp2(m_w * sl2 - ms);
      l += theirs[(DB * 4 + 2 + r) * 32] * a;
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        o[0][db][2 * r] += theirs[(db * 4 + 2 * r) * 32] * a;
        o[0][db][2 * r + 1] += theirs[(db * 4 + 2 * r + 1) * 32] * a;
      }
    }
    row_max[0][r] = mx;
    row_sum[0][r] = l;
  }

  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[0][r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = fa_softmax_out_scale(l);
    lse[r] = l > 0.0f ? row_max[0][r] * sl2 * CUDA_LN2 + logf(l) : -INFINITY;
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (B.row_pos[r] >= S.sq) continue;
    const int h = B.h0 + B.row_head[r];
    if (A.splits > 1) { /* the piece's normalised row and its LSE, fp32 */
      const int64_t row =
          (((int64_t)B.split * f.p.batch + S.b) * f.p.heads_q + h) * f.p.seqlen_q + B.row_pos[r];
      if (t == 0) A.lse_part[row] = lse[r];
      float *dst = A.o_part + row * d;
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        const int c = db * 8 + 2 * t;
        if (c < d)
          *reinterpret_cast<float2 *>(dst + c) =
              make_float2(o[0][db][2 * r] * inv[r], o[0][db][2 * r + 1] * inv[r]);
      }
      continue;
    }
    E *dst = static_cast<E *>(f.out) + S.o_base + (int64_t)B.row_pos[r] * f.o_str.row +
             (int64_t)h * f.o_str.head;
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      const int c = db * 8 + 2 * t;
      if (c < d)
        *reinterpret_cast<uint32_t *>(dst + c) =
            Tr::pack(o[0][db][2 * r] * inv[r], o[0][db][2 * r + 1] * inv[r]);
    }
    if (f.lse && t == 0) {
      f.lse[seq_lse_at(A.ix, f.lse_str, S.b, h, S.q_start, B.row_pos[r])] = lse[r];
    }
  }
}

template <typename Tr, int HD, bool HALVES>
__global__ void __launch_bounds__(128) fa2_decode_kernel(const cuda_seq_args A) {
  typedef typename Tr::elem E;
  constexpr int BM = FA2_DECODE_TILE_M, BN = FA2_DECODE_TILE_N, ST = FA2_DECODE_STAGES(HD);
  constexpr int NT = 128, KW = BN / 4; /* keys of a tile per warp */
  typedef typename smem_tile_layout<HD, FA2_SWIZZLED(HD)>::type TL;
  constexpr int LD = TL::LD;
  constexpr int NB = KW / 8; /* n8 blocks of a warp's keys in S */
  constexpr int DB = HD / 8; /* n8 blocks of the head dim in O */
  static_assert(KW == 16 && HD % 32 == 0 && ST >= 2, "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  E *sQ = reinterpret_cast<E *>(smem_raw);
  E *sKV = sQ + BM * LD; /* ST stages, each BN rows of K then BN rows of V; HALVES: 3 tiles */

  const cuda_fwd_args &f = A.f;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  decode_block B;
  if (!decode_block_of<BN>(A, lane >> 2, B)) return;
  const splitkv_seq &S = B.S;
  const int h0 = B.h0, hk = B.hk, m0 = B.m0, rph_log2 = B.rph_log2, nb0 = B.nb0, nb1 = B.nb1;
  const int d = f.p.head_dim;

  const bool capped = f.p.softcap > 0.0f;
  const float sl2 = capped ? CUDA_LOG2E : f.p.scale * CUDA_LOG2E;

  float o[1][DB][4], row_max[1][2], row_sum[1][2];
  decode_clear(o, row_max, row_sum);

  splitkv_load_q<BM, HD, NT, TL>(sQ, static_cast<const E *>(f.q), f.q_str, S, h0, m0, rph_log2, d,
                                 tid);
  kv_tile_pages<BN, HD, NT> P; /* the entries of the next tile to copy */
  if constexpr (HALVES) {
    /* K and V of the first tile in flight, one commit group each (empty ones too: the count of
       groups decides what cp_async_wait waits for). */
    E *const half0 = sKV, *const half1 = sKV + BN * LD;
    splitkv_pages_of(P, A, S, nb0 * BN, tid);
    if (nb0 < nb1)
      splitkv_load_kv<BN, HD, NT, TL, SPLITKV_K>(half0, half0, A, S, P, nb0 * BN, hk, d, tid);
    cp_async_commit();
    if (nb0 < nb1)
      splitkv_load_kv<BN, HD, NT, TL, SPLITKV_V>(half1, half1, A, S, P, nb0 * BN, hk, d, tid);
    cp_async_commit();
    if (nb0 + 1 < nb1) splitkv_pages_of(P, A, S, (nb0 + 1) * BN, tid);
    for (int n = nb0, it = 0; n < nb1; ++n, ++it) {
      const int k_buf = 2 * it % 3; /* tile n's K half; its V half is the next buffer */
      E *const tK = sKV + k_buf * BN * LD;
      E *const tV = sKV + (k_buf + 1) % 3 * BN * LD;
      /* K of tile n has landed (V of tile n may still be in flight); after the barrier every
         warp is done with V of tile n - 1, whose buffer K of tile n + 1 takes. */
      cp_async_wait<1>();
      __syncthreads();
      if (n + 1 < nb1) {
        E *const next_k = sKV + (k_buf + 2) % 3 * BN * LD;
        splitkv_load_kv<BN, HD, NT, TL, SPLITKV_K>(next_k, next_k, A, S, P, (n + 1) * BN, hk, d,
                                                   tid);
      }
      cp_async_commit();
      const int cw = n * BN + warp * KW; /* this warp's first key */
      float s[1][NB][4];
      const fa_tile_class cls = decode_warp_scores<Tr, HD, NB, TL>(
          s, sQ, tK + warp * KW * LD, cw, S.sk, B.ranges, B.row_lo, B.row_hi, f, lane);
      /* V of tile n has landed; after the barrier every warp is done with K of tile n, whose
         buffer V of tile n + 1 takes. */
      cp_async_wait<1>();
      __syncthreads();
      if (n + 1 < nb1)
        splitkv_load_kv<BN, HD, NT, TL, SPLITKV_V>(tK, tK, A, S, P, (n + 1) * BN, hk, d, tid);
      cp_async_commit();
      if (n + 2 < nb1) splitkv_pages_of(P, A, S, (n + 2) * BN, tid);
      if (cls != FA_TILE_EMPTY)
        fa2_softmax_pv<Tr, 1, NB, DB, TL>(s, o, row_max, row_sum, sl2, tV + warp * KW * LD, lane);
    }
  } else {
    /* The first ST - 1 tiles in flight, one commit group each (empty ones too: the count of
       groups decides what cp_async_wait waits for). */
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (nb0 + s < nb1) {
        splitkv_pages_of(P, A, S, (nb0 + s) * BN, tid);
        splitkv_load_kv<BN, HD, NT, TL>(sKV + s * 2 * BN * LD, sKV + (s * 2 + 1) * BN * LD, A, S, P,
                                        (nb0 + s) * BN, hk, d, tid);
      }
      cp_async_commit();
    }
    if (nb0 + ST - 1 < nb1) splitkv_pages_of(P, A, S, (nb0 + ST - 1) * BN, tid);

    for (int n = nb0, it = 0; n < nb1; ++n, ++it) {
      /* Tile n has landed; after the barrier every warp is done with tile n - 1, whose stage the
         copies of tile n + ST - 1 overwrite while this one is computed. */
      cp_async_wait<ST - 2>();
      __syncthreads();
      if (n + ST - 1 < nb1) {
        const int s = (it + ST - 1) % ST;
        splitkv_load_kv<BN, HD, NT, TL>(sKV + s * 2 * BN * LD, sKV + (s * 2 + 1) * BN * LD, A, S, P,
                                        (n + ST - 1) * BN, hk, d, tid);
      }
      cp_async_commit();
      if (n + ST < nb1) splitkv_pages_of(P, A, S, (n + ST) * BN, tid);
      const int st = it % ST;
      const int cw = n * BN + warp * KW; /* this warp's first key */
      const E *tK = sKV + st * 2 * BN * LD + warp * KW * LD;
      const E *tV = sKV + (st * 2 + 1) * BN * LD + warp * KW * LD;
      float s[1][NB][4];
      if (decode_warp_scores<Tr, HD, NB, TL>(s, sQ, tK, cw, S.sk, B.ranges, B.row_lo, B.row_hi, f,
                                             lane) == FA_TILE_EMPTY)
        continue;
      fa2_softmax_pv<Tr, 1, NB, DB, TL>(s, o, row_max, row_sum, sl2, tV, lane);
    }
  }
  cp_async_wait<0>();
  __syncthreads(); /* every warp done with the stages before they hold the merge */

  constexpr int WORDS = DB * 4 + 4;
  static_assert((size_t)3 * WORDS * 32 * 4 <= (size_t)(HALVES ? 3 : ST * 2) * BN * LD * sizeof(E),
                "the merge fits the stages");
  decode_merge_store<Tr, DB>(o, row_max, row_sum, sl2, reinterpret_cast<float *>(sKV), A, B, warp,
                             lane);
}

#endif /* FA_CUDA_FA2_FWD_DECODE_CUH */
