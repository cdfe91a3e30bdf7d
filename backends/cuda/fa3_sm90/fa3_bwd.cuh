/*
 * fa3_bwd.cuh: the FlashAttention-3 backward kernel (Hopper, sm_90a), first version.
 *
 * One block per (key tile of 128 keys, K/V head, batch), as fa2's backward: K and V of the tile
 * stay in shared memory, dK and dV accumulate in registers over every query row that sees the
 * tile (core/mask.h's row range) of every query head of the K/V head's group, so GQA needs no
 * reduction afterwards. Three warpgroups:
 *
 * The producer (warpgroup 0, one thread; registers given back with setmaxnreg) loads K and V
 * once by TMA, then per step (query head, 64-row query tile) Q and dO by TMA into a two-stage
 * ring: a stage completes on its "full" mbarrier and is released on its "empty" one by both
 * consumers. Each consumer loads the step's LSE (log2 units) and D = rowsum(dO∘O) from the
 * workspace the preprocessing kernel filled (fa2_bwd_aux.cu), one value a thread while its first
 * wgmmas run, into slots of its own. (Bulk copies of them into the stage, read back by ordinary
 * loads, drew 3072 racecheck hazards per copy although the stage's mbarriers order them; each
 * thread loading its 16 rows' values itself kept 32 more registers live across the wgmmas and
 * spilled.)
 *
 * Two consumers (registers taken with setmaxnreg), each owning 64 of the tile's keys:
 *   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ        wgmma from shared memory (M = 64 keys, N = 64 queries)
 *   Pᵀ = exp2(Sᵀ·scale·log2e − LSE), masked to 0 outside core/mask.h's ranges
 *   dSᵀ = Pᵀ ∘ (dPᵀ − D)           core/backward.h
 *   dV += Pᵀ dO, dK += dSᵀ Q       wgmma with Pᵀ and dSᵀ from registers: the Sᵀ accumulator's
 *                                   layout is the A operand's
 *   dQ = dS K over its 64 keys     dSᵀ written transposed to shared memory (the A operand,
 *                                   K-major), K as the MN-major B operand; staged in shared
 *                                   memory and added to the fp32 dQ accumulator (fa2's rotated
 *                                   layout) by one bulk reduction a step
 * At the end dK (times the softmax scale) and dV are stored from registers; dQ is scaled and
 * converted by fa2's conversion kernel. HD: the head dim (64 or 128; the others run fa2's
 * backward).
 */
#ifndef FA_CUDA_FA3_BWD_CUH
#define FA_CUDA_FA3_BWD_CUH

#include "core/backward.h"
#include "fa3_fwd.cuh"

/* Registers per thread of the producer and of each consumer warpgroup (setmaxnreg): 384 threads
   start with 168 each, and 24 + 2 x 240 = 3 x 168. */
#define FA3_BWD_PRODUCER_REGS 24
#define FA3_BWD_CONSUMER_REGS 240

/* The shared-memory layout (offsets from a 1024-byte aligned base; every tile 1024-aligned for
   the 128-byte swizzle). */
template <int HD>
struct fa3_bwd_layout {
  static constexpr int BM = FA3_BWD_TILE_M, BN = FA3_BWD_TILE_N;
  static constexpr int KV_BOX = BN * 128, Q_BOX = BM * 128; /* bytes of one 64-column box */
  static constexpr int KV_BYTES = BN * HD * 2, Q_BYTES = BM * HD * 2;
  static constexpr int DS_BYTES = BM * 64 * 2; /* one consumer's dS: 64 queries x 64 keys */
  static constexpr int DQ_BYTES = BM * HD * 4; /* one consumer's fp32 dQ staging tile */
  static constexpr int K = 0, V = KV_BYTES, Q = 2 * KV_BYTES, DO = Q + 2 * Q_BYTES;
  static constexpr int DS = DO + 2 * Q_BYTES, DQ = DS + 2 * DS_BYTES;
  static constexpr int LSED = DQ + 2 * DQ_BYTES, BARS = LSED + 2 * 2 * BM * 4, END = BARS + 5 * 8;
  static_assert(END + 1024 <= (int)FA3_BWD_SMEM(HD), "FA3_BWD_SMEM covers the layout");
};

/* Writes a consumer's dSᵀ (accumulator layout: rows = its 64 keys, columns = 64 queries) as dS
   into its 64 x 64 tile, rows = queries, keys along the row, 128-byte swizzled: the K-major A
   operand of dQ = dS K. */
template <typename Tr>
__device__ __forceinline__ void fa3_bwd_store_ds(const float (&ds)[32], unsigned char *tile,
                                                 int warp, int g, int t) {
  typedef typename Tr::elem E;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q = 8 * j + 2 * t + (i & 1), key = 16 * warp + g + 8 * (i >> 1);
      *reinterpret_cast<E *>(tile + q * 128 + (((key >> 3) ^ (q & 7)) << 4) + (key & 7) * 2) =
          Tr::from_float(ds[4 * j + i]);
    }
}

template <typename Tr, int HD>
__global__ void __launch_bounds__(384, 1) fa3_bwd_kernel(const __grid_constant__ fa3_bwd_args A) {
  typedef fa3_bwd_layout<HD> L;
  typedef typename Tr::elem E;
  constexpr bool F16 = Tr::is_f16;
  constexpr int BM = L::BM, BN = L::BN, BOXES = HD / 64;
  extern __shared__ unsigned char fa3_bwd_smem[];
  unsigned char *sm = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(fa3_bwd_smem) + 1023) & ~(uintptr_t)1023);
  uint64_t *bars = reinterpret_cast<uint64_t *>(sm + L::BARS);
  uint64_t *kv_full = bars, *full = bars + 1, *empty = bars + 3;

  const fa2_bwd_args &a = A.a;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int n0 = blockIdx.x * BN, seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;
  const int group = a.p.heads_q / a.p.heads_kv;
  const fa_mask mask = fa2_mask_of(a.p);
  int64_t r_lo, r_hi;
  fa_mask_row_range(&mask, n0, min(n0 + BN, seqlen_k), seqlen_q, &r_lo, &r_hi);
  const int m_begin = (int)(r_lo / BM);
  const int m_count = r_hi > r_lo ? (int)((r_hi + BM - 1) / BM) - m_begin : 0;
  const int steps = group * m_count; /* (query head of the group, query tile) */

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < 2; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 2); /* one arrival per consumer */
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<FA3_BWD_PRODUCER_REGS>();
    if (tid != 0 || steps == 0) return;
    mbar_arrive_expect_tx(kv_full, 2 * L::KV_BYTES);
#pragma unroll
    for (int x = 0; x < BOXES; ++x) {
      tma_load_4d(sm + L::K + x * L::KV_BOX, A.tk, kv_full, 64 * x, n0, hk, b);
      tma_load_4d(sm + L::V + x * L::KV_BOX, A.tv, kv_full, 64 * x, n0, hk, b);
    }
    for (int i = 0; i < steps; ++i) {
      const int st = i & 1;
      if (i >= 2) mbar_wait(empty + st, ((i >> 1) - 1) & 1);
      const int h = hk * group + i / m_count, m0 = (m_begin + i % m_count) * BM;
      mbar_arrive_expect_tx(full + st, 2 * L::Q_BYTES);
#pragma unroll
      for (int x = 0; x < BOXES; ++x) {
        tma_load_4d(sm + L::Q + st * L::Q_BYTES + x * L::Q_BOX, A.tq, full + st, 64 * x, m0, h, b);
        tma_load_4d(sm + L::DO + st * L::Q_BYTES + x * L::Q_BOX, A.tdo, full + st, 64 * x, m0, h,
                    b);
      }
    }
    return;
  }

  setmaxnreg_inc<FA3_BWD_CONSUMER_REGS>();
  const int c = wg - 1; /* this consumer's keys: n0 + 64 c .. */
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int key0 = n0 + 64 * c;
  const unsigned char *kc = sm + L::K + 64 * c * 128, *vc = sm + L::V + 64 * c * 128;
  unsigned char *dsc = sm + L::DS + c * L::DS_BYTES;
  float *dqs = reinterpret_cast<float *>(sm + L::DQ + c * L::DQ_BYTES);
  float *lsed = reinterpret_cast<float *>(sm + L::LSED + c * 2 * BM * 4); /* LSE, then D */
  const float sl2 = a.p.scale * FA2_LOG2E;
  /* No key of this consumer's is a key of the sequence: its rows of dK and dV are not stored,
     and every P is masked (the class is computed only for real keys). */
  const bool real = key0 < seqlen_k;

  float dk[HD / 2], dv[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) dk[i] = dv[i] = 0.0f;

  if (steps > 0) mbar_wait(kv_full, 0);
  for (int i = 0; i < steps; ++i) {
    const int st = i & 1;
    const int h = hk * group + i / m_count, m0 = (m_begin + i % m_count) * BM;
    const unsigned char *q = sm + L::Q + st * L::Q_BYTES, *dO = sm + L::DO + st * L::Q_BYTES;
    /* The step's 64 LSEs (log2 units; padded rows +inf) and D (padded rows 0), one value a
       thread, loaded while the wgmmas run and shared through the consumer's own slots (the last
       step's readers have all passed its dS barrier). */
    const int64_t row0 = ((int64_t)b * a.p.heads_q + h) * a.seqlen_q_padded + m0;
    const float lse_or_d = tid < 64 ? a.lse_log2[row0 + tid] : a.dsum[row0 + tid - 64];
    mbar_wait(full + st, (i >> 1) & 1);

    float s[32], dp[32];
    wgmma_fence();
    fa3_issue_s<HD, 64, L::KV_BOX, L::Q_BOX, F16>(s, kc, q);
    fa3_issue_s<HD, 64, L::KV_BOX, L::Q_BOX, F16>(dp, vc, dO);
    wgmma_commit();
    lsed[tid] = lse_or_d;
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    wgmma_fence_regs(dp);
    bar_sync(2 + c, 128); /* every slot written */

    /* Pᵀ into s, dSᵀ into dp. Rows past seqlen_q have LSE +inf (P = 0); keys past seqlen_k and
       outside a row's range are masked here. */
    const bool partial = !real || key0 + 64 > seqlen_k ||
                         fa_mask_tile_class(&mask, m0, min(m0 + BM, seqlen_q), key0, key0 + 64,
                                            seqlen_k) != FA_TILE_FULL;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int ql = 8 * j + 2 * t;
      const float2 l2 = *reinterpret_cast<const float2 *>(lsed + ql);
      const float2 d2 = *reinterpret_cast<const float2 *>(lsed + 64 + ql);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = 4 * j + e;
        float p = fast_exp2(s[x] * sl2 - ((e & 1) ? l2.y : l2.x));
        if (partial && !fa_mask_allows(&mask, m0 + ql + (e & 1),
                                       key0 + 16 * warp + g + 8 * (e >> 1), seqlen_k))
          p = 0.0f;
        dp[x] = fa_bwd_ds(p, dp[x], (e & 1) ? d2.y : d2.x);
        s[x] = p;
      }
    }
    uint32_t pa[4][4], dsa[4][4];
    fa3_pack_p<Tr, 64>(s, pa);
    fa3_pack_p<Tr, 64>(dp, dsa);
    fa3_bwd_store_ds<Tr>(dp, dsc, warp, g, t);
    fence_proxy_async_smem(); /* the generic stores, before the async proxy's wgmma reads them */
    if (tid == 0) bulk_wait_read<0>(); /* the last step's dQ reduction has read its staging */
    bar_sync(2 + c, 128);

    /* dV += Pᵀ dO and dK += dSᵀ Q (B: dO and Q, MN-major), waited for before dQ so that the A
       fragments' registers are free for dQ's accumulator. */
    wgmma_fence();
    fa3_issue_pv<HD, 64, F16>(dv, pa, dO, L::Q_BOX, 1);
    fa3_issue_pv<HD, 64, F16>(dk, dsa, q, L::Q_BOX, 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(dv);
    wgmma_fence_regs(dk);
    wgmma_fence_frags(pa);
    wgmma_fence_frags(dsa);

    /* dQ (64 queries x HD) over this consumer's 64 keys: A = dS (K-major), B = its K rows
       (MN-major, 64-column boxes KV_BOX apart), k-step 16 keys. */
    float dq[HD / 2];
#pragma unroll
    for (int x = 0; x < HD / 2; ++x) dq[x] = 0.0f;
    {
      const uint64_t da = wgmma_desc_sw128_at(smem_addr_opaque(dsc), 16, 1024);
      const uint64_t db = wgmma_desc_sw128_at(smem_addr_opaque(kc), L::KV_BOX, 1024);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_n<HD>::template ss<1, F16>(dq, da + ((ks * 32) >> 4), db + ((ks * 2048) >> 4), 1);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_regs(dq);
    }
    /* Q, dO and this step's dS are read: the stage goes back to the producer. */
    if (tid == 0) mbar_arrive(empty + st);

      /* dQ into the staging tile in the accumulator's rotated layout (fa2_args.h, FA2_DQ_ROTATED:
         8-column chunk j of row r at chunk (j + r) mod (HD / 8), so that a warp's stores spread
         over the banks), then added to the tile's rows of the accumulator (padded to whole
         tiles) by one bulk reduction, which runs while the next step computes. */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * warp + g + 8 * r;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j)
        *reinterpret_cast<float2 *>(dqs + row * HD + ((j + row) & (HD / 8 - 1)) * 8 + 2 * t) =
            make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
    }
    fence_proxy_async_smem();
    bar_sync(2 + c, 128);
    if (tid == 0) {
      bulk_reduce_add_f32(
          a.dq_accum + (((int64_t)b * a.p.heads_q + h) * a.seqlen_q_padded + m0) * HD,
          smem_u32(dqs), L::DQ_BYTES);
      bulk_commit();
    }
  }
  if (tid == 0) bulk_wait<0>(); /* the block's shared memory outlives the last reduction */

  /* dK (times the softmax scale) and dV of this consumer's keys. */
  E *dkp = static_cast<E *>(a.dk) + b * a.dk_str.batch + hk * a.dk_str.head;
  E *dvp = static_cast<E *>(a.dv) + b * a.dv_str.batch + hk * a.dv_str.head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 16 * warp + g + 8 * r;
    if (key >= seqlen_k) continue;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      const int col = 8 * j + 2 * t;
      *reinterpret_cast<uint32_t *>(dkp + (int64_t)key * a.dk_str.row + col) =
          Tr::pack(dk[4 * j + 2 * r] * a.p.scale, dk[4 * j + 2 * r + 1] * a.p.scale);
      *reinterpret_cast<uint32_t *>(dvp + (int64_t)key * a.dv_str.row + col) =
          Tr::pack(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
}

#endif /* FA_CUDA_FA3_BWD_CUH */
