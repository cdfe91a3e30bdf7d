/*
 * fa3_bwd_kernel.cuh: the FlashAttention-3 backward kernel (Hopper, sm_90a): its roles, their
 * barriers and the narrow kernels' consumer loop.
 *
 * One block per (key tile of 128 keys, K/V head, batch), as fa2's backward: K and V of the tile
 * stay in shared memory, dK and dV accumulate in registers over every query row that sees the
 * tile (core/math/mask.h's row range) of every query head of the K/V head's group, so GQA needs no
 * reduction afterwards (deterministic mode: one block per split of the key tiles, below). A step
 * is one (query head of the group, 64-row query tile). Three warpgroups:
 *
 * Warpgroup 0 gives its registers back (setmaxnreg). One thread of its warp 0 is the producer:
 * K and V once a key tile by TMA, then per step by TMA Q, dO and the step's LSE (log2 units) and D
 * = rowsum(dO∘O) (from the workspace common/bwd_aux.cu's preprocessing filled) into a two-stage
 * ring: a stage completes on its "full" mbarrier and is released on its "empty" one by both
 * consumers. (LSE and D by bulk copies or by the warp's ordinary stores, ordered by the same
 * mbarriers, drew racecheck hazards between those writes and the consumers' reads; by TMA they draw
 * none, as Q's.) Its warp 1 is the dQ writer: once the consumers have put the step's dQ into the
 * staging tile, one bulk reduction adds it to the fp32 dQ accumulator (the rotated layout); when
 * the reduction has read the tile, the consumers may fill it again (named barriers FULL_DQ /
 * EMPTY_DQ).
 *
 * Two consumers, each owning 64 of the tile's keys, per step:
 *   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ        wgmma from shared memory (M = 64 keys, N = 64 queries), two
 *                                   groups: Pᵀ = exp2(Sᵀ·scale·log2e − LSE) (masked to 0 outside
 *                                   core/math/mask.h's ranges) is computed while dPᵀ runs
 *   dSᵀ = Pᵀ ∘ (dPᵀ − D)           core/math/backward.h; written transposed into the stage's dS
 * tile (64 queries x 128 keys, the consumer's 64 keys its half) dV += Pᵀ dO wgmma, Pᵀ from
 * registers (the Sᵀ accumulator's layout is the A operand's), B = dO MN-major; issued before dPᵀ is
 * waited for, it runs under dSᵀ and the barrier that waits for both halves of dS dQ = dS K wgmma
 * over all 128 keys, A = dS (K-major), B = K MN-major: all HD columns by the consumer of the step's
 * parity (in 64-column parts), the other not waiting for its partner's dS dK += dSᵀ Q wgmma, dSᵀ
 * from registers; runs while dQ goes to the staging tile so each step's dQ is reduced into global
 * memory once per block, not once per consumer. At the end dK (times the softmax scale) and dV are
 * stored from registers; dQ is scaled and converted by the conversion kernel (common/bwd_aux.cu).
 * HD: the kernel's head dim, 64 or 128 as above ("narrow"), 256 with 64-key tiles and other
 * consumers (fa3_bwd_wide.cuh: the producer, the layout and the epilogue are these); head dims 96
 * and 192 run on the 128 and 256 kernels, the columns past them read as zeros by TMA (they add
 * nothing) and not stored (the dQ accumulator is as wide as the kernel's head dim, fa2's conversion
 * reads the real columns); the others run fa2's backward.
 */
#ifndef FA_CUDA_FA3_BWD_KERNEL_CUH
#define FA_CUDA_FA3_BWD_KERNEL_CUH

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "../common/attn_common.cuh"
#include "core/math/backward.h"
#include "core/math/mask.h"
#include "fa3_args.h"
#include "fa3_bwd_block.cuh"
#include "fa3_col_boxes.cuh"
#include "fa3_bwd_epilogue.cuh"
#include "fa3_bwd_scheduler.cuh"
#include "fa3_bwd_step.cuh"
#include "fa3_bwd_wide.cuh"
#include "fa3_mma.cuh"
#include "fa3_softmax.cuh"

template <typename Tr, int HD, bool SEQS>
__global__ void __launch_bounds__(384, 1) fa3_bwd_kernel(const __grid_constant__ fa3_bwd_args A) {
  typedef fa3_bwd_layout<HD> L;
  typedef typename Tr::elem E;
  constexpr bool F16 = Tr::is_f16;
  constexpr int BM = L::BM, BN = L::BN, BOXES = HD / 64;
  constexpr bool DV_FIRST = HD <= 64, KV_RS = HD <= 64;
  /* A step's whole dQ is one consumer's (the consumer of the step's parity, over all 128 keys:
     dS read once) rather than half of its columns each consumer's, and the other only arrives at
     the dS barrier instead of waiting there (hd64 +8.6..+13.0% on the H200). It computes dQ in
     64-column parts one after the other (at hd128 64 accumulator registers at once made ptxas
     serialise the wgmmas, C7512). The staging tile's hand-off to the dQ writer is that consumer's
     128 threads and the writer's 32 lanes. */
  constexpr int DQN = 64, DQ_PARTS = HD / 64, DQ_THREADS = 128 + 32;
  extern __shared__ unsigned char fa3_bwd_smem[];
  /* Aligned by an offset from the array, not through an integer: the compiler then knows every
     pointer below is in shared memory (STS/LDS with 32-bit addresses, not generic ST/LD). */
  unsigned char *sm = fa3_bwd_smem + ((1024u - (smem_u32(fa3_bwd_smem) & 1023u)) & 1023u);
  uint64_t *bars = reinterpret_cast<uint64_t *>(sm + L::BARS);
  uint64_t *kv_full = bars + L::KV_FULL, *kv_empty = bars + L::KV_EMPTY;
  uint64_t *full = bars + L::FULL, *empty = bars + L::EMPTY, *item_full = bars + L::ITEM_FULL;
  constexpr int KV_ST = L::KV_ST;
  /* The narrow kernels' producer publishes the block's items (below); the wide kernel's roles
     each walk the fixed deal (no persistent grid runs there to need the publication, whose
     per-thread arrivals cost it 2-3%). */
  constexpr bool PUBLISH = !L::WIDE;
  /* The block's items as the producer takes them (a slot per K/V buffer: the fixed deal or the
     counter's; fa3_bwd_take_item). */
  __shared__ int kv_item[2];
  /* SEQS, narrow kernels: the published items' records (fa3_bwd_seq_item_of), read by the
     consumers and the dQ writer before they release the slot (the wide kernel's roles find them
     with cursors of their own). */
  __shared__ fa3_bwd_seq_item kv_rec[SEQS && PUBLISH ? 2 : 1];

  const cuda_bwd_args &a = A.a;
  /* The warpgroup by a shuffle from lane 0: ptxas then knows it is the same in every lane of a
     warp and keeps what derives from it (the consumer's K and V addresses, the wgmma descriptors
     of its keys) in uniform registers, stepped by uniform adds; from threadIdx.x / 128 it builds
     each of dQ's B descriptors by 64-bit arithmetic and copies to uniform registers. */
  const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0), tid = threadIdx.x % 128;
  const int seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;
  const int group = a.p.heads_q / a.p.heads_kv;
  const fa_mask mask = cuda_mask_of(a.p);
  /* The block's key tiles (fa3_bwd_item_of). In deterministic mode a split's dQ goes to its own
     accumulator: each element's additions then come in a fixed order (the key tiles' of the
     split, each waited for before the next tile's begin; fa2's conversion kernel sums the splits
     in order). K and V are loaded again for each tile (at hd64 into the other of two buffers,
     during the last steps of the tile before). */
  const int n_tiles = (seqlen_k + BN - 1) / BN, items = fa3_bwd_items(A, n_tiles);
  float *dq_acc = a.dq_accum + (a.deterministic ? (int64_t)blockIdx.x : 0) * a.p.batch *
                                   a.p.heads_q * a.seqlen_q_padded * HD;

  if (threadIdx.x == 0) {
    for (int s = 0; s < KV_ST; ++s) {
      mbar_init(kv_full + s, 1);
      /* one arrival per consumer thread once its warpgroup has read a tile's K and V and it
         has read the item, and per lane of the dQ writer once it has read the item (each
         reader's own arrival: compute-sanitizer's racecheck does not see an item's reads as
         ordered before the producer's next write through a barrier and one thread's arrival) */
      mbar_init(kv_empty + s, PUBLISH ? 256 + 32 : 2);
      if (PUBLISH) mbar_init(item_full + s, 1);
    }
    for (int s = 0; s < 2; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 2); /* one arrival per consumer */
    }
    mbar_init_fence();
  }
  if (SEQS && BOXES == 4) { /* head dim 192: the column box its loads skip (fa3_col_boxes.cuh) */
    const int nb = fa3_col_boxes(a.p.head_dim);
    fa3_zero_unloaded_boxes(sm + L::K, KV_ST, BOXES, nb, L::KV_BOX, L::KV_SLOT);
    fa3_zero_unloaded_boxes(sm + L::V, KV_ST, BOXES, nb, L::KV_BOX, L::KV_SLOT);
    fa3_zero_unloaded_boxes(sm + L::Q, 2, BOXES, nb, L::Q_BOX, L::Q_BYTES);
    fa3_zero_unloaded_boxes(sm + L::DO, 2, BOXES, nb, L::Q_BOX, L::Q_BYTES);
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<FA3_BWD_PRODUCER_REGS(L::WIDE)>();
    const int warp = tid >> 5, lane = tid & 31;
    if (warp > (L::WIDE ? 0 : 1)) return; /* the wide kernel has no dQ writer */
    if (warp == 0) {                      /* the producer */
      if (lane != 0) return;
      /* Steps and items published so far (ring positions, phases). PUBLISH: every item goes
         through a K/V slot, one without steps (no K/V load: the consumers store its zero dK and
         dV) and the final "none left" (-1) included. */
      int it = 0, loaded = 0;
      fa3_bwd_cursor cur = {0, 0};
      for (int w = blockIdx.x;;) {
        const int slot = loaded % KV_ST;
        fa3_bwd_seq_item R;
        const bool have = SEQS ? fa3_bwd_seq_item_of<BN>(w, cur, A, R) : w < items;
        if (PUBLISH) {
          if (loaded >= KV_ST) mbar_wait(kv_empty + slot, ((loaded / KV_ST) - 1) & 1);
          ++loaded;
          kv_item[slot] = have ? w : -1;
          if (SEQS && have) kv_rec[slot] = R;
          mbar_arrive(item_full + slot);
        }
        if (!have) break;
        const fa3_bwd_item I = fa3_bwd_item_at<SEQS>(A, w, n_tiles, R);
        const int hk = I.hk, b = I.b;
        const fa3_bwd_tile T =
            fa3_bwd_seq_tile_of<SEQS>(mask, R, I.n, BM, BN, seqlen_q, seqlen_k, group, a.ix);
        /* The next item, taken now so that the counter's latency passes under this one */
        w = PUBLISH && A.tile_counter ? (int)gridDim.x + (int)atomicAdd(A.tile_counter, 1u)
                                      : w + gridDim.x;
        if (T.steps == 0) {
          if (PUBLISH) mbar_arrive(kv_full + slot);
          continue;
        }
        if (!PUBLISH) { /* the wide kernel: a tile without steps takes no slot */
          if (loaded >= KV_ST) mbar_wait(kv_empty + slot, ((loaded / KV_ST) - 1) & 1);
          ++loaded;
        }
        const int nb =
            SEQS && BOXES == 4 ? fa3_col_boxes(a.p.head_dim) : BOXES; /* fa3_col_boxes.cuh */
        mbar_arrive_expect_tx(kv_full + slot, 2 * nb * L::KV_BOX);
        unsigned char *kv = sm + slot * L::KV_SLOT;
        int ky = T.n0, kw = b, vw = b; /* SEQS: the views' coordinates (fa3_seq_tensor_map) */
        if (SEQS) {
          ky = A.k_ext - R.sk + T.n0;
          kw = R.k_start + b * A.k_batch_rows + R.sk;
          vw = R.k_start + b * A.v_batch_rows + R.sk;
        }
#pragma unroll
        for (int x = 0; x < BOXES; ++x) {
          if (x >= nb) break;
          tma_load_4d(kv + L::K + x * L::KV_BOX, A.tk, kv_full + slot, 64 * x, ky, hk, kw);
          tma_load_4d(kv + L::V + x * L::KV_BOX, A.tv, kv_full + slot, 64 * x, ky, hk, vw);
        }
        /* Steps in order (query head h of the group, query tile mt), counted without
           divisions. */
        int h = hk * group, mt = T.m_begin;
        for (int i = 0; i < T.steps; ++i, ++it) {
          const int st = it & 1, m0 = mt * BM;
          /* Q's and dO's rows (SEQS: the views' coordinates) and the workspace's (column, row) of
             the step's LSE and D (SEQS: the sequence's rows of the head, seq_bwd_ws_row) */
          int qy = m0, qw = b, dw = b, wc = m0, wr = b * a.p.heads_q + h;
          if (SEQS) {
            qy = A.q_ext - R.sq + m0;
            qw = R.q_start + b * A.q_batch_rows + R.sq;
            dw = R.q_start + b * A.do_batch_rows + R.sq;
            const int64_t ws = seq_bwd_ws_row(a, b, h, R.q_start);
            wc = (int)(ws % a.ws_head) + m0;
            wr = (int)(ws / a.ws_head);
          }
          if (it >= 2) mbar_wait(empty + st, ((it >> 1) - 1) & 1);
          mbar_arrive_expect_tx(full + st, 2 * nb * L::Q_BOX + 2 * BM * 4);
#pragma unroll
          for (int x = 0; x < BOXES; ++x) {
            if (x >= nb) break;
            tma_load_4d(sm + L::Q + st * L::Q_BYTES + x * L::Q_BOX, A.tq, full + st, 64 * x, qy, h,
                        qw);
            tma_load_4d(sm + L::DO + st * L::Q_BYTES + x * L::Q_BOX, A.tdo, full + st, 64 * x, qy,
                        h, dw);
          }
          unsigned char *lsed = sm + L::LSED + st * 2 * BM * 4;
          tma_load_2d(lsed, A.tlse, full + st, wc, wr);
          tma_load_2d(lsed + BM * 4, A.tdsum, full + st, wc, wr);
          if (++mt == T.m_begin + T.m_count) mt = T.m_begin, ++h;
        }
      }
      return;
    }
    /* The dQ writer: the block's items as the consumers take them (each lane arrives on the
       slot's kv_empty once it has read the item, so that the producer cannot publish over it
       first); the staging tile is announced empty after every reduction has read it (the
       consumers' first step does not wait; they take the last announcement after their last
       step). In deterministic mode a tile's reductions complete before the next tile's begin. */
    for (int loaded = 0;; ++loaded) {
      const int w = fa3_bwd_take_item(item_full, kv_item, loaded, KV_ST);
      fa3_bwd_seq_item R;
      if (SEQS && w >= 0) R = kv_rec[loaded % KV_ST]; /* read before the slot is released */
      mbar_arrive(kv_empty + loaded % KV_ST);
      if (w < 0) break;
      const fa3_bwd_item I = fa3_bwd_item_at<SEQS>(A, w, n_tiles, R);
      const int b = I.b;
      const fa3_bwd_tile T =
          fa3_bwd_seq_tile_of<SEQS>(mask, R, I.n, BM, BN, seqlen_q, seqlen_k, group, a.ix);
      int h = I.hk * group, mt = T.m_begin;
      for (int i = 0; i < T.steps; ++i) {
        bar_sync(FA3_BWD_BAR_FULL_DQ, DQ_THREADS);
        if (lane == 0) {
          const int64_t row0 = SEQS ? seq_bwd_ws_row(a, b, h, R.q_start)
                                    : ((int64_t)b * a.p.heads_q + h) * a.seqlen_q_padded;
          bulk_reduce_add_f32(dq_acc + (row0 + mt * BM) * HD, smem_u32(sm + L::DQ), L::DQ_BYTES);
          bulk_commit();
          if (a.deterministic && i + 1 == T.steps)
            bulk_wait<0>();
          else
            bulk_wait_read<0>();
        }
        __syncwarp();
        bar_arrive(FA3_BWD_BAR_EMPTY_DQ, DQ_THREADS);
        if (++mt == T.m_begin + T.m_count) mt = T.m_begin, ++h;
      }
    }
    if (lane == 0) bulk_wait<0>(); /* the block's shared memory outlives the last reduction */
    return;
  }

  setmaxnreg_inc<FA3_BWD_CONSUMER_REGS(L::WIDE)>();
  if constexpr (L::WIDE) {
    fa3_bwd_consume_wide<Tr, HD, SEQS>(A, sm, dq_acc, wg - 1, tid);
  } else {
    const int c = wg - 1; /* this consumer's keys: n0 + 64 c .. */
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const uint32_t dqs = smem_u32(sm + L::DQ);
    const float sl2 = a.p.scale * CUDA_LOG2E;

    int it = 0, loaded = 0; /* as the producer's */
    for (;; ++loaded) {
      const int w = fa3_bwd_take_item(item_full, kv_item, loaded, KV_ST);
      if (w < 0) break;
      /* The item's sequence: its rows, keys and mask (SEQS), else the problem's. */
      int sq = seqlen_q, sk = seqlen_k, k_rows = seqlen_k, k_start = 0;
      fa3_bwd_seq_item R;
      fa_mask mk = mask;
      if constexpr (SEQS) {
        R = kv_rec[loaded % KV_ST];
        sq = R.sq, sk = R.sk, k_rows = R.k_rows, k_start = R.k_start;
        mk = seq_mask_of(a.ix, sq, sk);
      }
      const fa3_bwd_item I = fa3_bwd_item_at<SEQS>(A, w, n_tiles, R);
      const int hk = I.hk, b = I.b;
      const fa3_bwd_tile T =
          fa3_bwd_seq_tile_of<SEQS>(mask, R, I.n, BM, BN, seqlen_q, seqlen_k, group, a.ix);
      const int key0 = T.n0 + 64 * c;
      /* This tile's K/V slot, and this consumer's 64 keys of it. */
      const int slot = loaded % KV_ST;
      const unsigned char *kslot = sm + L::K + slot * L::KV_SLOT;
      const unsigned char *kc = kslot + 64 * c * 128,
                          *vc = sm + L::V + slot * L::KV_SLOT + 64 * c * 128;
      /* The query rows that see every one of this consumer's 64 keys (none when some key is past
         seqlen_k): a step within them needs no mask, two comparisons a step (the tile class's
         64-bit arithmetic was as many instructions as the step's exponentials at hd64). */
      int full_lo, full_hi;
      fa3_bwd_full_rows(mk, key0, key0 + 64, sq, sk, full_lo, full_hi);
      /* The query rows that see one of this consumer's keys at least: in a step outside them
         (under a causal mask, the second consumer in the first query tile of each key tile) P,
         dS, and what they add to dV and dK are zero: the consumer writes its half of dS as zeros
         for the other's dQ and computes only its own part of dQ. */
      int seen_lo = 0, seen_hi = 0;
      if (key0 < sk) {
        int64_t r0, r1;
        fa_mask_row_range(&mk, key0, min(key0 + 64, sk), sq, &r0, &r1);
        seen_lo = (int)r0;
        seen_hi = (int)max(r0, r1);
        asm volatile("" : "+r"(seen_lo), "+r"(seen_hi));
      }

      float dk[HD / 2], dv[HD / 2];
#pragma unroll
      for (int i = 0; i < HD / 2; ++i) dk[i] = dv[i] = 0.0f;

      mbar_wait(kv_full + slot, (loaded / KV_ST) & 1);
      /* hd64: this consumer's keys of K and V in registers for the tile (32 registers; at hd128
         they would take 64, which the accumulators leave no room for). */
      uint32_t kf[KV_RS ? HD / 16 : 1][4], vf[KV_RS ? HD / 16 : 1][4];
      if constexpr (KV_RS) {
        if (T.steps > 0) {
          fa3_bwd_load_keys<HD, L::KV_BOX>(kf, kc, warp, lane);
          fa3_bwd_load_keys<HD, L::KV_BOX>(vf, vc, warp, lane);
        }
      }
      int mt = T.m_begin; /* the step's query tile (the query head is the producer's concern) */
      for (int i = 0; i < T.steps; ++i, ++it) {
        const int st = it & 1, m0 = mt * BM;
        if (++mt == T.m_begin + T.m_count) mt = T.m_begin;
        const unsigned char *q = sm + L::Q + st * L::Q_BYTES, *dO = sm + L::DO + st * L::Q_BYTES;
        unsigned char *ds = sm + L::DS + st * L::DS_BYTES;
        const float *lsed = reinterpret_cast<const float *>(sm + L::LSED + st * 2 * BM * 4);
        mbar_wait(full + st, (it >> 1) & 1);
        const bool idle = m0 >= seen_hi || m0 + BM <= seen_lo;
        uint32_t pa[4][4], dsa[4][4];
        if (idle) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) pa[kk][e] = dsa[kk][e] = 0u;
          fa3_bwd_store_ds(dsa, smem_u32(ds + c * L::DS_HALF), warp, lane);
        } else {
          float s[32], dp[32];
          wgmma_fence();
          if constexpr (KV_RS) {
            fa3_bwd_issue_rs<HD, L::Q_BOX, F16>(s, kf, q);
            wgmma_commit();
            fa3_bwd_issue_rs<HD, L::Q_BOX, F16>(dp, vf, dO);
          } else {
            fa3_issue_s<HD, 64, L::KV_BOX, L::Q_BOX, F16>(s, kc, q);
            wgmma_commit();
            fa3_issue_s<HD, 64, L::KV_BOX, L::Q_BOX, F16>(dp, vc, dO);
          }
          wgmma_commit();
          wgmma_wait<1>();
          wgmma_fence_regs(s);
          if (m0 < full_lo || min(m0 + BM, sq) > full_hi)
            fa3_bwd_p<true, BM>(s, lsed, sl2, mk, m0, key0, sk, warp, g, t);
          else
            fa3_bwd_p<false, BM>(s, lsed, sl2, mk, m0, key0, sk, warp, g, t);
          fa3_pack_p<Tr, 64>(s, pa);
          /* The exponentials must run under dPᵀ's wgmma; a wait placed after them is not enough
             (ptxas moved it above them). At hd64, dV += Pᵀ dO is issued before dPᵀ is waited for
             (its A operand needs them); at hd128 the registers do not allow that (ptxas serialised
             every wgmma), and a warpgroup barrier holds the wait below them. */
          if (DV_FIRST) {
            wgmma_fence();
            fa3_issue_pv<HD, 64, F16>(dv, pa, dO, L::Q_BOX, 1);
            wgmma_commit();
            wgmma_wait<1>(); /* dPᵀ */
          } else {
            wgmma_fence_frags(pa);
            bar_sync(FA3_BWD_BAR_PIN + c, 128);
            wgmma_wait<0>(); /* dPᵀ */
          }
          wgmma_fence_regs(dp);
          fa3_bwd_ds<BM>(s, dp, lsed, t);
          fa3_pack_p<Tr, 64>(dp, dsa);
          /* The stage's dS was last read by the dQ wgmma two steps ago, which both consumers waited
             for before the last step's DS barrier. */
          fa3_bwd_store_ds(dsa, smem_u32(ds + c * L::DS_HALF), warp, lane);
          if (!DV_FIRST) { /* dV across the barrier that waits for the other consumer's dS */
            wgmma_fence();
            fa3_issue_pv<HD, 64, F16>(dv, pa, dO, L::Q_BOX, 1);
            wgmma_commit();
          }
        }
        fence_proxy_async_smem(); /* the generic dS stores, before the async proxy's wgmma reads */
        /* The step's dQ is consumer (it & 1)'s, which waits for the other's half of dS; the other
           only announces its own and goes on. */
        const bool dq_mine = (it & 1) == c;
        if (dq_mine)
          bar_sync((it & 1) ? FA3_BWD_BAR_DS_ODD : FA3_BWD_BAR_DS, 256);
        else
          bar_arrive((it & 1) ? FA3_BWD_BAR_DS_ODD : FA3_BWD_BAR_DS, 256);

        if (dq_mine) {
          /* dQ (64 queries x DQN columns from col0, DQ_PARTS times) over all 128 keys: A = dS
             (K-major, the two halves 64 keys apart), B = K rows (MN-major) from column col0:
             k-step 16 keys. */
#pragma unroll
          for (int part = 0; part < DQ_PARTS; ++part) {
            const int col0 = DQN * part;
            float dq[DQN / 2];
            {
              const uint64_t da = wgmma_desc_sw128_at(smem_addr_opaque(ds), 16, 1024);
              const uint64_t db = wgmma_desc_sw128_at(
                  smem_addr_opaque(kslot + (col0 / 64) * L::KV_BOX + (col0 % 64) * 2), L::KV_BOX,
                  1024);
              wgmma_fence();
#pragma unroll
              for (int ks = 0; ks < BN / 16; ++ks)
                wgmma_n<DQN>::template ss<1, F16>(
                    dq, da + (((ks / 4) * L::DS_HALF + (ks % 4) * 32) >> 4),
                    db + ((ks * 2048) >> 4), ks > 0);
              wgmma_commit();
            }
            if (part == 0) {
              wgmma_wait<1>(); /* dV (none in an idle step) */
              wgmma_fence_regs(dv);
              wgmma_fence_frags(pa);

              /* dK += dSᵀ Q (B: Q, MN-major) while dQ goes to the staging tile. */
              if (idle) {
                wgmma_wait<0>(); /* dQ */
              } else {
                wgmma_fence();
                fa3_issue_pv<HD, 64, F16>(dk, dsa, q, L::Q_BOX, 1);
                wgmma_commit();
                wgmma_wait<1>(); /* dQ */
              }
            } else {
              wgmma_wait<0>(); /* this part of dQ (and dK) */
            }
            wgmma_fence_regs(dq);

            /* dQ into the staging tile in the accumulator's rotated layout (fa2_args.h,
               CUDA_DQ_ROTATED: 8-column chunk j of row r at chunk (j + r) mod (HD / 8), so that a
               warp's stores spread over the banks), once the last reduction has read it; the
               writer warp adds it. */
            if (part == 0 && it > 0) bar_sync(FA3_BWD_BAR_EMPTY_DQ, DQ_THREADS);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int row = 16 * warp + g + 8 * r;
#pragma unroll
              for (int j = 0; j < DQN / 8; ++j) {
                const int chunk = (col0 / 8 + j + row) & (HD / 8 - 1);
                st_shared_v2_f32(dqs + (row * HD + chunk * 8 + 2 * t) * 4, dq[4 * j + 2 * r],
                                 dq[4 * j + 2 * r + 1]);
              }
            }
          }
          fence_proxy_async_smem();
          bar_arrive(FA3_BWD_BAR_FULL_DQ, DQ_THREADS);
        } else if (!idle) {
          wgmma_fence();
          fa3_issue_pv<HD, 64, F16>(dk, dsa, q, L::Q_BOX, 1);
          wgmma_commit();
        }

        wgmma_wait<0>(); /* dK (and, without dQ, dV) */
        wgmma_fence_regs(dk);
        wgmma_fence_regs(dv);
        wgmma_fence_frags(pa);
        wgmma_fence_frags(dsa);
        /* Q, dO, LSE and D are read: the stage goes back to the producer. */
        if (tid == 0) mbar_arrive(empty + st);
      }
      /* The tile's K and V are read (its last dQ and dK waited for by the warpgroup, whose
         wgmmas hold its warps together), and the item by this thread: the producer may publish
         the next item in this slot. */
      mbar_arrive(kv_empty + slot);

      fa3_bwd_store_dkv<Tr, HD>(dk, dv, a, hk, b, key0, 0, warp, g, t, k_rows, k_start);
    }
    /* The writer's announcement after the block's last reduction: taken by the consumer that
       staged the last dQ, after its own wait for the one before (the other consumer may get here
       first, and its wait would complete that earlier announcement in its place). */
    if (it > 0 && ((it - 1) & 1) == c) bar_sync(FA3_BWD_BAR_EMPTY_DQ, DQ_THREADS);
  }
}

#endif /* FA_CUDA_FA3_BWD_KERNEL_CUH */
