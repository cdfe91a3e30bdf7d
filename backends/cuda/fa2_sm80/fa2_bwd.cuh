/*
 * fa2_bwd.cuh: the FlashAttention-2 backward kernel (sm_80 and newer).
 *
 * One thread block per (key tile, KV head, batch): K and V of the tile stay in shared memory and
 * dK, dV accumulate in registers over every query row that sees the tile (core/math/mask.h's row
 * range) of every query head of the KV head's group, so GQA needs no reduction afterwards. Per
 * query tile (Q, dO, LSE and D through cp.async, double-buffered; Q and dO single-buffered in the
 * compact tiles, QS = 1):
 *   Sᵀ = K Qᵀ and dPᵀ = V dOᵀ            warps split along the keys (and the queries)
 *   Pᵀ = exp2(Sᵀ·log2e·scale − LSE·log2e) (recomputed from the forward's LSE; masked: 0)
 *   dSᵀ = Pᵀ ∘ (dPᵀ − D)                  core/math/backward.h, times the softcap derivative
 *   Pᵀ, dSᵀ -> shared memory
 *   dV += Pᵀ dO                          warps split along the keys and the head dim
 *   dQ += dS K                           warps split along the queries and the head dim,
 *                                        added to the fp32 accumulator by bulk reductions
 *                                        from shared memory (sm_90, head dim <= 192), by
 *                                        16-byte vector reductions (sm_90 above) or by
 *                                        per-thread atomics (sm_80 code)
 *   dK += dSᵀ Q                          as dV
 * At the end of a key tile, dK and dV are packed into the K and V tiles' shared memory and stored
 * by whole rows. The softmax scale is applied once: to dK at the end and to dQ by the conversion
 * kernel.
 * Deterministic mode: block s visits key tiles s, s + splits, ... in order and
 * adds into its own accumulator, so every dQ element is summed in a fixed order.
 * The balanced last wave (fa2_args.h, fa2_tail.c): without a mask, the tiles of the last partial
 * wave are cut into runs of steps, one block each, run by a second launch of the kernel (TAIL)
 * after the whole tiles' launch; the pieces of a cut tile add dK and dV into an fp32 workspace
 * and the last piece to finish writes the sums. The pieces' bookkeeping costs registers (and
 * spills), which is why it has its own kernel: the whole tiles' kernel is the one without it.
 * Over sequences of their own lengths (SEQS: varlen, seqused_k), a third kernel: block
 * (key tile, KV head, sequence) reads its sequence's rows, keys and mask (common/seq_index.cuh),
 * its key tiles past the sequence's return at once, and keys past the used ones get zero dK, dV.
 */
#ifndef FA_CUDA_FA2_BWD_CUH
#define FA_CUDA_FA2_BWD_CUH

#include <limits.h>
#include <math.h>

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "../common/tile_io.cuh"
#include "../common/warp_mma.cuh"
#include "core/math/backward.h"
#include "core/math/mask.h"
#include "core/math/score.h"
#include "fa2_args.h"
#include "fa2_bwd_step.cuh"
#include "../common/attn_common.cuh"
#include "fa2_tiles.h"

/* Warp tiles: S_WK warps along the keys for Sᵀ/dPᵀ, KV_WK for dK/dV, DQ_WQ along the queries for
   dQ; the rest of the warps split the other dimension. DQB: on sm_90, dQ goes through a staging
   tile and bulk reductions (else 16-byte vector reductions). QS: stages of the Q/dO tiles; with
   one, the next step's tiles are copied after every warp is done with this step's (the compact
   tiles, for GPUs with less shared memory). Each warp tile is at least 16 x 16,
   and the squarer it is, the fewer shared-memory bytes each mma needs. */
template <typename Tr, int HD, int BN, int BM, int NW, int S_WK, int KV_WK, int DQ_WQ, bool DQB,
          int QS, bool TAIL, bool SEQS>
__global__ void __launch_bounds__(NW * 32) fa2_bwd_kernel(const cuda_bwd_args a) {
  static_assert(!(TAIL && SEQS), "no balanced last wave over sequences");
  /* With a balanced last wave, its tiles are the tail launch's: this launch's blocks past the
     first tail_first tiles return at once (tested first thing: computed later, the test cost
     the hd64 kernel 68-112 bytes of spills). */
  if (!TAIL && a.tail_tiles &&
      blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z) >= (unsigned)a.tail_first)
    return;
  typedef typename Tr::elem E;
  constexpr int NT = NW * 32;
  typedef typename smem_tile_layout<HD, FA2_SWIZZLED(HD)>::type TL; /* K, V, Q, dO tiles */
  typedef smem_padded<BM + 8> PL;                                   /* Pᵀ, dSᵀ */
  constexpr int LD = TL::LD;
  constexpr int LDP = PL::LD;
  constexpr int SK = BN / S_WK, SQ = BM / (NW / S_WK); /* Sᵀ: keys x queries per warp */
  /* A warp's Sᵀ/dPᵀ tile is computed in parts of at most FA2_BWD_S_PART_MAX (32) queries, so a
     128-query step (fewer barriers per FLOP) needs no more registers than a 64-query one. */
  constexpr int SQP = SQ > FA2_BWD_S_PART_MAX ? FA2_BWD_S_PART_MAX : SQ, S_PARTS = SQ / SQP;
  constexpr int MS = SK / 16, SNB = SQP / 8;
  /* Where the Sᵀ/dPᵀ tile takes several parts, K and V are held in registers as mma fragments
     for the whole key tile instead of read from shared memory in every part of every step
     (+7-8% at head dim 64). */
  constexpr bool HOLD_K = S_PARTS > 1, HOLD_V = S_PARTS > 1;
  constexpr int KK = BN / KV_WK, KD = HD / (NW / KV_WK); /* dK/dV: keys x columns per warp */
  constexpr int MK = KK / 16, KDB = KD / 8;
  constexpr int QQ = BM / DQ_WQ, QD = HD / (NW / DQ_WQ); /* dQ: queries x columns per warp */
  constexpr int MQ = QQ / 16, QDB = QD / 8;
  static_assert(
      SK % 16 == 0 && SQ % 16 == 0 && KK % 16 == 0 && KD % 16 == 0 && QQ % 16 == 0 && QD % 16 == 0,
      "warp tiles must be multiples of 16");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  E *sK = reinterpret_cast<E *>(smem_raw);
  E *sV = sK + BN * LD;
  E *sQ = sV + BN * LD;       /* QS stages */
  E *sdO = sQ + QS * BM * LD; /* QS stages */
  E *sPt = sdO + QS * BM * LD;
  E *sdSt = sPt + BN * LDP;
  float *sLse = reinterpret_cast<float *>(sdSt + BN * LDP); /* two stages, log2 units */
  float *sD = sLse + 2 * BM;                                /* two stages */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* dQ of a step staged as [BM][HD] fp32, rows' 8-float chunks rotated by the row (the
     accumulator's layout, fa2_args.h), then added by one bulk reduction. */
  constexpr bool DQ_BULK = DQB;
  float *sDQ = sD + 2 * BM;
#else
  constexpr bool DQ_BULK = false;
#endif
  /* dQ between dV and dK on the bulk path, whose reduction waits for the next barrier anyway;
     before dV where its reductions come straight from registers, so that they drain under two
     products instead of one. */
  constexpr bool DQ_FIRST = !DQ_BULK;
  /* sm_90 without staging: dQ's reductions issued a few after each k-step of dV rather than all
     before it, where they filled the memory instruction queue ahead of dV's ldmatrix. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool DQ_SPREAD = !DQ_BULK;
#else
  constexpr bool DQ_SPREAD = false;
#endif

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3, mi = lane >> 3;
  const int group = a.p.heads_q / a.p.heads_kv;
  const int d = a.p.head_dim;
  /* The block's sequence (SEQS): its rows from q_start, its k_rows keys from k_start, of which
     seqlen_k are used. Without sequences, every batch's alike. */
  int q_start = 0, k_start = 0, seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;
  int k_rows = seqlen_k;
  int64_t ws_seq = 0; /* SEQS: the workspace row of the sequence's row 0 of head 0 */
  if constexpr (SEQS) {
    const seq_rows r =
        seq_rows_of(a.ix, (int)blockIdx.z, a.p.seqlen_q, a.p.seqlen_k, a.ix.cu_k != nullptr);
    q_start = r.q_start;
    k_start = r.k_start;
    seqlen_q = r.sq;
    seqlen_k = r.sk;
    k_rows = r.k_rows;
    ws_seq = seq_bwd_ws_row(a, (int)blockIdx.z, 0, q_start);
  }
  const bool capped = a.p.softcap > 0.0f;
  const float sl2 = capped ? CUDA_LOG2E : a.p.scale * CUDA_LOG2E;
  const float inv_cap = capped ? 1.0f / a.p.softcap : 0.0f;

  const fa_mask mask = SEQS ? seq_mask_of(a.ix, seqlen_q, seqlen_k) : cuda_mask_of(a.p);

  const int n_blocks = (k_rows + BN - 1) / BN;
  const int split = a.deterministic ? (int)blockIdx.x : 0;
  const int n_step = a.deterministic ? (int)gridDim.x : n_blocks;
  const int64_t split_rows =
      SEQS ? cuda_bwd_split_rows(&a) : (int64_t)a.p.batch * a.p.heads_q * a.seqlen_q_padded;
  float *dq_acc = a.dq_accum + (int64_t)split * split_rows * HD;

  /* Warp roles. */
  const int s_key = (warp % S_WK) * SK, s_q = (warp / S_WK) * SQ;
  const int kv_key = (warp % KV_WK) * KK, kv_d = (warp / KV_WK) * KD;
  const int dq_q = (warp % DQ_WQ) * QQ, dq_d = (warp / DQ_WQ) * QD;

  /* The balanced last wave's units per tile: every query tile of every query head of the group
     (there is no mask where it runs). */
  const int tail_steps = group * ((seqlen_q + BM - 1) / BM);

  /* The whole tiles' block: its KV head and batch (the grid's). */
  const int hk_grid = blockIdx.y, b_grid = blockIdx.z;
  const E *k_grid = static_cast<const E *>(a.k) + b_grid * a.k_str.batch + hk_grid * a.k_str.head +
                    (int64_t)k_start * a.k_str.row;
  const E *v_grid = static_cast<const E *>(a.v) + b_grid * a.v_str.batch + hk_grid * a.v_str.head +
                    (int64_t)k_start * a.v_str.row;

  /* The block's work, segment by segment: a key tile and a range of its steps. */
  for (int seg = 0, n_block_grid = blockIdx.x;; ++seg, n_block_grid += n_step) {
    int n_block, hk, b;
    int s_lo = 0, s_hi = INT_MAX; /* this block's steps of the tile */
    int cut = -1;                 /* >= 0: the tail tile, cut between pieces, whose sums we add */
    if constexpr (!TAIL) {
      n_block = n_block_grid;
      if (n_block >= n_blocks) break;
      hk = hk_grid;
      b = b_grid;
    } else {
      /* Piece blockIdx.x: units [u0, u1) of the tail tiles, in at most two tiles. */
      const int u0 = (int)blockIdx.x * a.tail_piece_steps;
      const int u1 = min(u0 + a.tail_piece_steps, a.tail_tiles * tail_steps);
      const int r = u0 / tail_steps + seg;
      if (r * tail_steps >= u1) break;
      s_lo = max(u0 - r * tail_steps, 0);
      s_hi = min(u1 - r * tail_steps, tail_steps);
      if (s_lo > 0 || s_hi < tail_steps) cut = r;
      const int lin = a.tail_first + r; /* key tile fastest, then KV head, then batch */
      n_block = lin % n_blocks;
      hk = lin / n_blocks % a.p.heads_kv;
      b = lin / n_blocks / a.p.heads_kv;
    }
    const E *k =
        TAIL ? static_cast<const E *>(a.k) + b * a.k_str.batch + hk * a.k_str.head : k_grid;
    const E *v =
        TAIL ? static_cast<const E *>(a.v) + b * a.v_str.batch + hk * a.v_str.head : v_grid;
    const int n0 = n_block * BN;
    const int n1 = min(n0 + BN, seqlen_k);
    __syncthreads(); /* the previous key tile's readers are done */
    tile_load_async<BN, HD, NT, TL>(sK, k + (int64_t)n0 * a.k_str.row, a.k_str.row, seqlen_k - n0,
                                    d, tid);
    tile_load_async<BN, HD, NT, TL>(sV, v + (int64_t)n0 * a.v_str.row, a.v_str.row, seqlen_k - n0,
                                    d, tid);
    cp_async_commit();

    float dk[MK][KDB][4], dv[MK][KDB][4];
    zero_tile(dk);
    zero_tile(dv);

    int64_t r_lo, r_hi;
    fa_mask_row_range(&mask, n0, n1, seqlen_q, &r_lo, &r_hi);
    if (SEQS && n0 >= seqlen_k) r_hi = r_lo; /* keys past the used ones: zero gradients */
    const int m_begin = (int)(r_lo / BM);
    const int m_end = r_hi > r_lo ? (int)((r_hi + BM - 1) / BM) : m_begin;
    const int m_count = m_end - m_begin;

    /* One flat loop over (query head of the group, query tile) so the prefetch crosses heads;
       this block's steps [s_begin, s_end) of it. */
    const int steps = group * m_count;
    const int s_begin = s_lo, s_end = min(s_hi, steps);
    /* The first step's query head and query tile (from the group's first and the tile's first
       where the block starts at step 0). */
    const int h_first = hk * group + (s_begin ? s_begin / m_count : 0);
    const int m_first = m_begin + (s_begin ? s_begin % m_count : 0);
    if (s_end > s_begin)
      bwd_load_query_tile<Tr, HD, BM, NT>(a, b, h_first, m_first * BM, q_start, seqlen_q,
                                          bwd_ws_row<SEQS>(a, b, h_first, ws_seq) + m_first * BM,
                                          sQ, sdO, sLse, sD, tid);
    cp_async_commit();

    /* The warp's K and V fragments, once the key tile has landed (the query tile's copies may
       still be in flight). */
    uint32_t kf[HOLD_K ? HD / 16 : 1][MS][4], vf[HOLD_V ? HD / 16 : 1][MS][4];
    if constexpr (HOLD_K || HOLD_V) {
      cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
        if constexpr (HOLD_K) load_a_frags<MS, TL>(kf[ks], sK, s_key, ks, lane);
        if constexpr (HOLD_V) load_a_frags<MS, TL>(vf[ks], sV, s_key, ks, lane);
      }
    }

    /* This step's (query head, query tile), advanced without divisions. */
    int h = h_first, m_idx = m_first;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The accumulator tile whose dQ sits in the staging buffer, added after the next barrier. */
    float *dq_pending = nullptr;
#endif
    for (int step = s_begin; step < s_end; ++step) {
      const int st = QS == 2 ? (step - s_begin) & 1 : 0;
      const int m0 = m_idx * BM;
      int h_next = h, m_next = m_idx + 1;
      if (m_next == m_end) {
        m_next = m_begin;
        ++h_next;
      }
      /* This step's tile has landed; after the barrier every warp is also done with the last
         step (its Q/dO stage, Pᵀ and dSᵀ), so the next tile's loads may overwrite that stage. */
      cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      /* The last step's dQ staging, made visible to the bulk copy: fenced here, where this
         thread has no loads in flight that the fence might wait for. */
      if (DQ_BULK && dq_pending) fence_proxy_async_smem();
#endif
      __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      /* Every warp has staged and fenced the last step's dQ. */
      if (DQ_BULK && tid == 0 && dq_pending) {
        bulk_reduce_add_f32(dq_pending, smem_u32(sDQ), BM * HD * (int)sizeof(float));
        bulk_commit();
      }
#endif

      const E *tQ = sQ + st * BM * LD;
      const E *tdO = sdO + st * BM * LD;
      const float *tLse = sLse + st * BM;
      const float *tD = sD + st * BM;

      /* Only tiles the mask (or the end of the keys) cuts pay for per-element masking. */
      const bool masked =
          n0 + BN > seqlen_k ||
          fa_mask_tile_class(&mask, m0, min(m0 + BM, seqlen_q), n0, n1, seqlen_k) != FA_TILE_FULL;

#pragma unroll 1
      for (int part = 0; part < S_PARTS; ++part) {
        const int q_p = s_q + part * SQP;
        /* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for this warp's SK keys x SQ queries. */
        float s[MS][SNB][4], dp[MS][SNB][4];
        zero_tile(s);
        zero_tile(dp);
        bwd_scores<Tr, TL, MS, SNB, HD / 16, HOLD_K, HOLD_V>(s, dp, kf, vf, sK, sV, s_key, tQ, tdO,
                                                             q_p, lane);
        if (QS == 2 && part == 0) {
          /* The next tile's loads, issued here rather than right after the barrier: there they
             queued behind every warp's first ldmatrix, and the instructions reusing their
             address registers waited for them. The stage they overwrite
             was last read in the previous step. */
          if (step + 1 < s_end)
            bwd_load_query_tile<Tr, HD, BM, NT>(
                a, b, h_next, m_next * BM, q_start, seqlen_q,
                bwd_ws_row<SEQS>(a, b, h_next, ws_seq) + m_next * BM, sQ + (st ^ 1) * BM * LD,
                sdO + (st ^ 1) * BM * LD, sLse + (st ^ 1) * BM, sD + (st ^ 1) * BM, tid);
          cp_async_commit();
        }

        /* Pᵀ and dSᵀ, element by element, into shared memory. The softcap and the mask are each
           one uniform branch around a loop, so the loop that does the work has no branch. */
        if (capped) softcap_tile(s, a.p.scale, a.p.softcap);
        if (masked) {
#pragma unroll
          for (int m = 0; m < MS; ++m)
#pragma unroll
            for (int nb = 0; nb < SNB; ++nb)
#pragma unroll
              for (int c = 0; c < 4; ++c) {
                const int key = n0 + s_key + m * 16 + g + 8 * (c >> 1);
                const int row = m0 + q_p + nb * 8 + 2 * t + (c & 1);
                if (!fa_mask_allows(&mask, row, key, seqlen_k)) s[m][nb][c] = -INFINITY;
              }
        }
        if (capped)
          bwd_probs_to_smem<Tr, true, MS, SNB, LDP>(s, dp, tLse, tD, sPt, sdSt, s_key, q_p, lane,
                                                    sl2, inv_cap);
        else
          bwd_probs_to_smem<Tr, false, MS, SNB, LDP>(s, dp, tLse, tD, sPt, sdSt, s_key, q_p, lane,
                                                     sl2, inv_cap);
      }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      /* The staging buffer is rewritten after the barrier below: its last reduction has read it
         (long done by now: a whole Sᵀ/dPᵀ phase has passed since it was issued). */
      if (DQ_BULK && tid == 0) bulk_wait_read<0>();
#endif
      __syncthreads();

      /* dV += Pᵀ dO (reduction over the query tile), before or after dQ (DQ_FIRST). */
      if (!DQ_FIRST) mma_rows_kn<Tr, MK, KDB, BM / 16, PL, TL>(dv, sPt, kv_key, tdO, kv_d, lane);

      /* dQ (this warp's QQ queries x QD columns) = dS K, added to the fp32 accumulator. */
      {
        float dq[MQ][QDB][4];
        zero_tile(dq);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          uint32_t sa[MQ][4];
#pragma unroll
          for (int m = 0; m < MQ; ++m)
            ldmatrix_x4_trans(sa[m], smem_u32(sdSt + (kk * 16 + (mi >> 1) * 8 + (lane & 7)) * LDP +
                                              dq_q + m * 16 + (mi & 1) * 8));
#pragma unroll
          for (int db2 = 0; db2 < QDB / 2; ++db2) {
            uint32_t kb[4];
            ldmatrix_x4_trans(kb, smem_u32(sK + TL::off8(kk * 16 + (mi & 1) * 8, lane & 7,
                                                         dq_d + db2 * 16 + (mi >> 1) * 8)));
#pragma unroll
            for (int m = 0; m < MQ; ++m) {
              mma_16816<Tr>(dq[m][2 * db2], sa[m], kb);
              mma_16816<Tr>(dq[m][2 * db2 + 1], sa[m], kb + 2);
            }
          }
        }
        /* The accumulator is padded to whole query tiles and HD columns: no bounds checks, and
           every offset below is a constant from one base address. */
        float *acc_tile = dq_acc + (bwd_ws_row<SEQS>(a, b, h, ws_seq) + m0) * HD;
        if (DQ_BULK) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          constexpr int NC = HD / 8; /* 8-float chunks per row */
          const int rot0 = (dq_d / 8 + dq_q + g) % NC;
#pragma unroll
          for (int m = 0; m < MQ; ++m)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int db = 0; db < QDB; ++db) {
                int c = rot0 + (m * 16 + 8 * r + db) % NC;
                c = c >= NC ? c - NC : c;
                *reinterpret_cast<float2 *>(sDQ + (dq_q + m * 16 + 8 * r + g) * HD + c * 8 +
                                            2 * t) =
                    make_float2(dq[m][db][2 * r], dq[m][db][2 * r + 1]);
              }
          dq_pending = acc_tile;
#endif
        } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          /* The accumulator's fragment layout (fa2_args.h): each 16 x 8 accumulator tile of
             the warp is one 512-byte block, a lane's four values 16 contiguous bytes, added
             straight from the mma's registers (the row-wise layout before needed register
             moves that waited for the previous reduction to read its operands). */
          float *acc = acc_tile + ((dq_q / 16) * (HD / 8) + dq_d / 8) * 128 + 4 * lane;
          if (DQ_SPREAD) {
            /* dV's k-steps with a few reductions after each (DQ_SPREAD). */
            constexpr int KS = BM / 16, NR = MQ * QDB, PER = (NR + KS - 1) / KS;
#pragma unroll
            for (int j = 0; j < KS; ++j) {
              uint32_t af[MK][4];
              load_a_frags<MK, PL>(af, sPt, kv_key, j, lane);
              mma_k_step<Tr, true, MK, KDB, TL>(dv, af, tdO, kv_d, j, lane);
#pragma unroll
              for (int r = 0; r < PER; ++r) {
                const int i = j * PER + r, m = i / QDB, db = i % QDB;
                if (i < NR)
                  red_add_v4_f32(acc + (m * (HD / 8) + db) * 128, dq[m][db][0], dq[m][db][1],
                                 dq[m][db][2], dq[m][db][3]);
              }
            }
          } else {
#pragma unroll
            for (int m = 0; m < MQ; ++m)
#pragma unroll
              for (int db = 0; db < QDB; ++db)
                red_add_v4_f32(acc + (m * (HD / 8) + db) * 128, dq[m][db][0], dq[m][db][1],
                               dq[m][db][2], dq[m][db][3]);
          }
#else
          float *acc = acc_tile + (dq_q + g) * HD + dq_d + 2 * t;
#pragma unroll
          for (int m = 0; m < MQ; ++m)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int db = 0; db < QDB; ++db)
                atomic_add_pair(acc + (m * 16 + 8 * r) * HD + db * 8, dq[m][db][2 * r],
                                dq[m][db][2 * r + 1]);
#endif
        }
      }
      if (DQ_FIRST && !DQ_SPREAD)
        mma_rows_kn<Tr, MK, KDB, BM / 16, PL, TL>(dv, sPt, kv_key, tdO, kv_d, lane);
      /* dK += dSᵀ Q, last: its mma run while the dQ reductions above drain. */
      mma_rows_kn<Tr, MK, KDB, BM / 16, PL, TL>(dk, sdSt, kv_key, tQ, kv_d, lane);
      if (QS == 1) {
        /* One stage: every warp is done with this step's Q, dO, LSE and D. */
        __syncthreads();
        if (step + 1 < s_end)
          bwd_load_query_tile<Tr, HD, BM, NT>(a, b, h_next, m_next * BM, q_start, seqlen_q,
                                              bwd_ws_row<SEQS>(a, b, h_next, ws_seq) + m_next * BM,
                                              sQ, sdO, sLse, sD, tid);
        cp_async_commit();
      }
      h = h_next;
      m_idx = m_next;
    }
    cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (DQ_BULK && dq_pending) fence_proxy_async_smem();
#endif
    /* Every warp is done with the last step: K and V are free for the dK and dV stores below,
       and the last step's dQ is staged. */
    __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The last step's dQ. In deterministic mode this key tile's reductions complete before the
       next tile's begin, so the adds to one element happen in key-tile order; otherwise they
       need only have read the staging buffer before the block exits. */
    if (DQ_BULK && tid == 0 && dq_pending) {
      bulk_reduce_add_f32(dq_pending, smem_u32(sDQ), BM * HD * (int)sizeof(float));
      bulk_commit();
      if (a.deterministic)
        bulk_wait<0>();
      else
        bulk_wait_read<0>();
    }
#endif

    if (cut >= 0) {
      /* A cut tile: this piece's dK (unscaled) and dV added to the tile's sums, each thread's
         fragments as float4s by thread, coalesced; the piece that counts last reads the sums
         back (from L2, where the additions were done) and writes them as a whole tile would. */
      float4 *sums =
          reinterpret_cast<float4 *>(a.tail_acc) + (int64_t)cut * 2 * MK * KDB * NT + tid;
#pragma unroll
      for (int m = 0; m < MK; ++m)
#pragma unroll
        for (int db = 0; db < KDB; ++db) {
          add_f32x4(sums + (m * KDB + db) * NT, dk[m][db]);
          add_f32x4(sums + ((MK + m) * KDB + db) * NT, dv[m][db]);
        }
      __threadfence();
      __syncthreads(); /* every thread's additions are fenced before the count */
      const int per = a.tail_piece_steps;
      const unsigned pieces =
          (unsigned)(((cut + 1) * tail_steps - 1) / per - cut * tail_steps / per + 1);
      const bool last = tid == 0 && atomicAdd(a.tail_count + cut, 1u) + 1 == pieces;
      if (!__syncthreads_or(last)) continue;
      __threadfence();
#pragma unroll
      for (int m = 0; m < MK; ++m)
#pragma unroll
        for (int db = 0; db < KDB; ++db) {
          const float4 x = __ldcg(sums + (m * KDB + db) * NT);
          const float4 y = __ldcg(sums + ((MK + m) * KDB + db) * NT);
          dk[m][db][0] = x.x, dk[m][db][1] = x.y, dk[m][db][2] = x.z, dk[m][db][3] = x.w;
          dv[m][db][0] = y.x, dv[m][db][1] = y.y, dv[m][db][2] = y.z, dv[m][db][3] = y.w;
        }
    }

    /* dK (scaled) and dV of this key tile, packed into the K and V tiles' shared memory, then
       stored by whole rows. */
#pragma unroll
    for (int m = 0; m < MK; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int db = 0; db < KDB; ++db) {
          const int at = TL::off8(kv_key + m * 16 + 8 * r, g, kv_d + db * 8 + 2 * t);
          *reinterpret_cast<uint32_t *>(sK + at) =
              Tr::pack(dk[m][db][2 * r] * a.p.scale, dk[m][db][2 * r + 1] * a.p.scale);
          *reinterpret_cast<uint32_t *>(sV + at) = Tr::pack(dv[m][db][2 * r], dv[m][db][2 * r + 1]);
        }
    __syncthreads();
    E *dkp = static_cast<E *>(a.dk) + b * a.dk_str.batch + hk * a.dk_str.head;
    E *dvp = static_cast<E *>(a.dv) + b * a.dv_str.batch + hk * a.dv_str.head;
    const int64_t r0 = (int64_t)k_start + n0;
    tile_store<BN, HD, NT, TL>(dkp + r0 * a.dk_str.row, a.dk_str.row, k_rows - n0, d, sK, tid);
    tile_store<BN, HD, NT, TL>(dvp + r0 * a.dv_str.row, a.dv_str.row, k_rows - n0, d, sV, tid);
  }
}

#endif /* FA_CUDA_FA2_BWD_CUH */
