/*
 * fa2_fwd_decode_bulk.cuh: the decoding kernel of fa2_fwd_decode.cuh on sm_90, its K and V rows
 * fetched by bulk copies (cp.async.bulk: the TMA unit, no tensor map) instead of 16-byte cp.async.
 *
 * Each warp computes 16 keys of every 64-key tile, so it fetches exactly those rows itself: lane
 * l < 16 copies key l's row of K (then of V) into the warp's own buffers, one copy a row, through
 * the block table where the cache is paged. A warp's halves (its 16 rows of K of tile n, then of V
 * of tile n) go round FA2_DECODE_BULK_BUFS(HD) buffers, each with its mbarrier, all but one in
 * flight while one is computed; the warps run their pipelines apart, with no block barrier in the
 * key loop. Where the 16-byte copies take 32 address computations a thread a tile at head dim
 * 256, this takes two. Rows are padded (HD + 8 elements apart: bulk copies write rows whole, so no
 * swizzle), rows no copy fills (keys past the sequence, a page entry outside [0, num_blocks)) are
 * zeroed by their lane, and columns past d once at the start. The scores, softmax, P V and the
 * warps' merge are fa2_fwd_decode.cuh's. It runs where it measured faster than the cp.async stages
 * (fa2_tiles.h's FA2_DECODE_BULK_WANTED: above head dim 192, and over paged caches above 128).
 */
#ifndef FA_CUDA_FA2_FWD_DECODE_BULK_CUH
#define FA_CUDA_FA2_FWD_DECODE_BULK_CUH

#include "../common/sm90_async.cuh"
#include "fa2_fwd_decode.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* Half h of a warp's pipeline (K of tile nb0 + h / 2 for h even, else its V) into buffer
   buf: lane l < 16 copies the row of key (nb0 + h / 2) * BN + KW * warp + l in one piece that
   completes on bar; lane 0 announces the expected bytes (the rows copied). A row no copy fills
   is zeroed by its lane. */
template <int BN, int KW, int LD, typename E>
__device__ __forceinline__ void decode_bulk_half(E *buf, uint64_t *bar, const cuda_seq_args &A,
                                                 const decode_block &B, int h, int warp, int lane) {
  const cuda_fwd_args &f = A.f;
  const splitkv_seq &S = B.S;
  const bool v = h & 1;
  const int j = (B.nb0 + h / 2) * BN + warp * KW + lane, d = f.p.head_dim;
  const cuda_strides &st = v ? f.v_str : f.k_str;
  bool ok = lane < KW && j < S.sk;
  int64_t at = 0;
  if (ok) {
    if (A.block_table) {
      const int blk = splitkv_page_entry(A, S, j);
      ok = blk >= 0 && blk < A.num_blocks;
      at = splitkv_paged_row(A, st, blk, j);
    } else {
      at = (v ? S.v_base : S.k_base) + (int64_t)j * st.row;
    }
  }
  const uint32_t copied = __ballot_sync(0xffffffffu, ok);
  const uint32_t row_bytes = (uint32_t)d * (uint32_t)sizeof(E);
  if (lane == 0) mbar_arrive_expect_tx(bar, (uint32_t)__popc(copied) * row_bytes);
  E *row = buf + lane * LD;
  if (ok) {
    const E *src = static_cast<const E *>(v ? f.v : f.k) + at + (int64_t)B.hk * st.head;
    bulk_load(smem_u32(row), src, row_bytes, (uint32_t)__cvta_generic_to_shared(bar));
  } else if (lane < KW) {
    for (int c = 0; c < d; c += 8) *reinterpret_cast<uint4 *>(row + c) = make_uint4(0, 0, 0, 0);
    fence_proxy_async_smem(); /* before a later copy writes the row */
  }
}
#endif

template <typename Tr, int HD>
__global__ void __launch_bounds__(128) fa2_decode_bulk_kernel(const cuda_seq_args A) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  typedef typename Tr::elem E;
  constexpr int BM = FA2_DECODE_TILE_M, BN = FA2_DECODE_TILE_N, NBUF = FA2_DECODE_BULK_BUFS(HD);
  constexpr int NT = 128, KW = BN / 4; /* keys of a tile per warp */
  typedef smem_padded<HD + 8> TL;
  constexpr int LD = TL::LD;
  constexpr int NB = KW / 8, DB = HD / 8;
  static_assert(KW == 16 && HD % 32 == 0 && NBUF >= 2, "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ uint64_t bars[4][NBUF];
  E *sQ = reinterpret_cast<E *>(smem_raw);
  E *sKV = sQ + BM * LD; /* 4 warps x NBUF half-tiles of KW rows */

  const cuda_fwd_args &f = A.f;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  decode_block B;
  if (!decode_block_of<BN>(A, lane >> 2, B)) return;
  const splitkv_seq &S = B.S;
  const int nb0 = B.nb0, nb1 = B.nb1, d = f.p.head_dim;
  E *const mine = sKV + warp * NBUF * KW * LD;
  uint64_t *const bar = bars[warp];

  splitkv_load_q<BM, HD, NT, TL>(sQ, static_cast<const E *>(f.q), f.q_str, S, B.h0, B.m0,
                                 B.rph_log2, d, tid);
  cp_async_commit();
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < NBUF; ++i) mbar_init(&bar[i], 1);
    mbar_init_fence();
  }
  if (d < HD) /* columns no copy writes, read by the products: zeros, once */
    for (int r = lane; r < NBUF * KW; r += 32)
      for (int c = d; c < HD; c += 8)
        *reinterpret_cast<uint4 *>(mine + r * LD + c) = make_uint4(0, 0, 0, 0);
  __syncwarp();

  /* Half h: K (h even) or V (h odd) of tile nb0 + h / 2, in buffer h mod NBUF. */
  const int halves = 2 * (nb1 - nb0);
#pragma unroll
  for (int h = 0; h < NBUF - 1; ++h)
    if (h < halves) decode_bulk_half<BN, KW, LD>(mine + h * KW * LD, &bar[h], A, B, h, warp, lane);
  cp_async_wait<0>();
  __syncthreads(); /* Q, from every thread's copies */

  const float sl2 = f.p.softcap > 0.0f ? CUDA_LOG2E : f.p.scale * CUDA_LOG2E;
  float o[1][DB][4], row_max[1][2], row_sum[1][2];
  decode_clear(o, row_max, row_sum);

  int cb = 0, parity = 0; /* the next half to compute: its buffer, its phase's parity */
  int fb = NBUF - 1;      /* the buffer the next copy fills */
  for (int n = nb0, h = 0; n < nb1; ++n, h += 2) {
    const int cw = n * BN + warp * KW; /* this warp's first key */
    mbar_wait(&bar[cb], parity);
    const E *tK = mine + cb * KW * LD;
    if (++cb == NBUF) cb = 0, parity ^= 1;
    /* The buffer V of tile n - 1 held: half h + NBUF - 1 (every lane done with it). */
    __syncwarp();
    if (h + NBUF - 1 < halves)
      decode_bulk_half<BN, KW, LD>(mine + fb * KW * LD, &bar[fb], A, B, h + NBUF - 1, warp, lane);
    if (++fb == NBUF) fb = 0;
    float s[1][NB][4];
    const fa_tile_class cls = decode_warp_scores<Tr, HD, NB, TL>(s, sQ, tK, cw, S.sk, B.ranges,
                                                                 B.row_lo, B.row_hi, f, lane);
    mbar_wait(&bar[cb], parity);
    const E *tV = mine + cb * KW * LD;
    if (++cb == NBUF) cb = 0, parity ^= 1;
    /* K of tile n's buffer: half h + NBUF. */
    __syncwarp();
    if (h + NBUF < halves)
      decode_bulk_half<BN, KW, LD>(mine + fb * KW * LD, &bar[fb], A, B, h + NBUF, warp, lane);
    if (++fb == NBUF) fb = 0;
    if (cls != FA_TILE_EMPTY)
      fa2_softmax_pv<Tr, 1, NB, DB, TL>(s, o, row_max, row_sum, sl2, tV, lane);
  }
  __syncthreads(); /* every copy waited for, every warp done with its buffers */

  constexpr int WORDS = DB * 4 + 4;
  static_assert((size_t)3 * WORDS * 32 * 4 <= (size_t)4 * NBUF * KW * LD * sizeof(E),
                "the merge fits the buffers");
  decode_merge_store<Tr, DB>(o, row_max, row_sum, sl2, reinterpret_cast<float *>(sKV), A, B, warp,
                             lane);
#else
  (void)A;
  __trap(); /* launched only on sm_90 and newer (cuda_seqs.c) */
#endif
}

#endif /* FA_CUDA_FA2_FWD_DECODE_BULK_CUH */
