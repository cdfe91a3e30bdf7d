/*
 * fa3_fwd_kernel.cuh: the FlashAttention-3 forward kernel (Hopper, sm_90a): its roles, their
 * barriers and the consumers' main loop. WGS + 1 warpgroups:
 *
 * The producer (warpgroup 0; fa3_fwd_producer.cuh): one thread loads each tile's Q and its K and
 * V tiles by TMA and publishes the tile to the consumers (fa3_fwd_scheduler.cuh decides which
 * tiles); one thread stores the outputs by TMA (TMA_EPILOGUE); registers given back with
 * setmaxnreg.
 *
 * WGS consumers (64 query rows each; registers taken with setmaxnreg): S = Q Kᵀ by wgmma from
 * shared memory, online softmax in registers (fa3_softmax.cuh; core/math's mask and softmax
 * rules, exp2 with log2-scaled scores), O += P V by wgmma with P from registers, where the S
 * accumulator's layout is the A operand's; at the end O / l and the LSE (fa3_fwd_epilogue.cuh).
 * A consumer issues S of key tile j + 1 with P V of tile j and runs the softmax of j + 1 under
 * P V (PINNED_SOFTMAX keeps ptxas from waiting for P V first); the consumers take ping-pong turns
 * issuing their MMAs (named barrier 1 + c waits for consumer c's turn), so one's softmax runs
 * under the others' MMAs.
 *
 * HD is the padded head dim (64, 128, 256); the real one (a.p.head_dim, 96 or 192 as well) bounds
 * the stores: the columns past it are zeros read by TMA in Q, K and V. FLAGS: the configuration's
 * features (fa3_tile_size.h).
 */
#ifndef FA_CUDA_FA3_FWD_KERNEL_CUH
#define FA_CUDA_FA3_FWD_KERNEL_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "core/math/mask.h"
#include "fa3_args.h"
#include "fa3_col_boxes.cuh"
#include "fa3_fwd_block.cuh"
#include "fa3_fwd_epilogue.cuh"
#include "fa3_fwd_producer.cuh"
#include "fa3_fwd_scheduler.cuh"
#include "fa3_mma.cuh"
#include "fa3_softmax.cuh"

template <typename Tr, int HD, int WGS, int BN, int FLAGS>
__global__ void __launch_bounds__(128 * (WGS + 1), 1)
    fa3_fwd_kernel(const __grid_constant__ fa3_fwd_args A) {
  typedef fa3_fwd_traits<HD, WGS, BN, FLAGS> K;
  constexpr int BM = K::BM, CB = K::CB, STAGES = K::STAGES, BOXQ = K::BOXQ, BOXK = K::BOXK;
  constexpr int NC = K::NC, QB = K::QB, NP = K::NP;
  constexpr bool F16 = Tr::is_f16;
  const cuda_fwd_args &a = A.a;

  extern __shared__ unsigned char smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: boxes start on such a boundary. */
  unsigned char *sQ = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sK = sQ + QB * CB * BOXQ;
  unsigned char *sV = sK + STAGES * CB * BOXK;
  unsigned char *sOnes = sV + STAGES * CB * BOXK; /* MMA_ROW_SUM: BN rows of 128 bytes */
  __shared__ uint64_t q_full[2], q_empty[2], k_full[STAGES], v_full[STAGES];
  __shared__ uint64_t k_empty[STAGES], v_empty[STAGES];
  __shared__ uint64_t o_free[2], o_ready[2];
  /* PINNED_SOFTMAX: one slot per consumer thread, never read; each stores its row sums there once
     its softmax is done, which keeps ptxas from moving the wait for the previous P V above the
     softmax (pin_after). */
  __shared__ float pin_slot[K::PINNED ? 128 * WGS : 1];
  __shared__ int q_tile[2];
  __shared__ fa3_tile q_info[2];
  __shared__ fa3_tile q_own[K::OWN_END ? 2 * WGS : 1];
  const fa3_fwd_smem S = {sQ,      sK,      sV,     q_full,  q_empty, k_full, v_full,
                          k_empty, v_empty, o_free, o_ready, q_tile,  q_info, q_own};

  /* The warpgroup by a shuffle from lane 0, so that ptxas keeps what derives from it in uniform
     registers. */
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int seqlen_k = a.p.seqlen_k;
  /* The grid's tiles (after each role's setmaxnreg: values live across it cost registers). */
  int hb_count, total;

  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(&q_full[b], 1);
      mbar_init(&q_empty[b], NC);
      mbar_init(&o_free[b], 1);
      mbar_init(&o_ready[b], NC);
    }
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], NC); /* every consumer thread releases */
      mbar_init(&v_empty[s], NC);
    }
    mbar_init_fence();
  }
  if (K::SEQS && CB == 4) { /* head dim 192: the column box its loads skip (fa3_col_boxes.cuh) */
    const int nb = fa3_col_boxes(a.p.head_dim);
    fa3_zero_unloaded_boxes(sQ, QB, CB, nb, BOXQ, CB * BOXQ);
    fa3_zero_unloaded_boxes(sK, STAGES, CB, nb, BOXK, CB * BOXK);
    fa3_zero_unloaded_boxes(sV, STAGES, CB, nb, BOXK, CB * BOXK);
  }
  if (K::ROW_SUM) { /* written by the generic proxy, read by wgmma's (async) proxy */
    const uint32_t ones = F16 ? 0x3C003C00u : 0x3F803F80u;
    for (int i = threadIdx.x; i < BN * 128 / 16; i += blockDim.x)
      reinterpret_cast<uint4 *>(sOnes)[i] = make_uint4(ones, ones, ones, ones);
    fence_proxy_async_smem();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<fa3_regs<WGS, K::DYNAMIC>::producer>();
    fa3_grid_of<BM>(A, hb_count, total);
    if (K::SEQS) total = FA3_SEQS_TOTAL;
    if (tid == 0)
      fa3_fwd_produce<HD, WGS, BN, FLAGS>(A, S, hb_count, total);
    else if (K::IN_KV && tid == 32)
      fa3_fwd_store_from_kv<HD, WGS, BN, FLAGS>(A, S, total);
    else if (K::TMA_EPI && tid == 32)
      fa3_fwd_store_from_q<HD, WGS, BN, FLAGS>(A, S, total);
    return;
  }
  setmaxnreg_inc<fa3_regs<WGS, K::DYNAMIC>::consumer>();
  fa3_grid_of<BM>(A, hb_count, total);
  if (K::SEQS) total = FA3_SEQS_TOTAL;

  /* Consumer c: rows m0 + 64 c + [0, 64) of each tile; this thread's two rows (8 apart). */
  const int c = wg - 1, ctid = tid - 128 * wg, warp = ctid / 32, lane = ctid % 32;
  const int t = lane % 4, rl = 64 * c + 16 * warp + lane / 4; /* first row within the tile */
  const float sl2 = a.p.scale * CUDA_LOG2E;
  const fa3_consumer me = {c, lane, t, rl, sl2};
  /* Ping-pong: wait for this consumer's turn to issue MMAs; pass the turn on after issuing. The
     last consumer passes the first turn to consumer 0 (before its own first turn), and consumer
     0 takes one more turn at the very end (the last consumer's final pass), so that every
     barrier completes as often as it is waited for. */
  auto turn_wait = [&]() { bar_sync(1 + c, 256); };
  auto turn_pass = [&]() { bar_arrive(1 + (c + 1) % WGS, 256); };
  bool turned = false;
  int kv = 0, qn = 0; /* as the producer counts */
  fa3_tile ti;

  float o[NP / 2], s[BN / 2], alpha[2];
  uint32_t pa[BN / 16][4];
  /* P V's leading-byte offset: V's next box, or (MMA_ROW_SUM) the box of ones after the stages */
  auto pv_lbo = [&](int stage) -> uint32_t {
    return K::ROW_SUM ? (uint32_t)((STAGES - stage) * BOXK) : (uint32_t)BOXK;
  };
#pragma unroll
  for (int i = 0; i < NP / 2; ++i) o[i] = 0.0f; /* never read (add 0): defined for the asm */
  for (;;) {
    const int qb = qn % QB, slot = qn & 1;
    mbar_wait(&q_full[qb], (qn / QB) & 1); /* the producer's next tile (its Q loaded) */
    const int k = q_tile[slot];
    if (k >= total) {
      if (K::IN_KV) mbar_arrive(&o_ready[slot]); /* the store thread stops too */
      break;
    }
    /* OWN_KEY_END: this consumer's key tiles end at its own n_end; the producer releases the
       block's later ones for it, and it takes their turns after its last P V. The index goes
       through a shuffle so that ptxas sees it warp-uniform and keeps ti in uniform registers
       (indexed by c itself, the key loop spilled). */
    ti = K::OWN_END ? q_own[slot * WGS + __shfl_sync(0xffffffffu, c, 0)] : q_info[slot];
    if (ti.n_end == ti.n_begin) { /* it took a use of the Q buffer, with no Q */
      fa3_fwd_epilogue_empty<Tr, BM, K::SEQS>(A, S, me, slot);
      mbar_arrive(&q_empty[qb]);
      if (K::IN_KV) mbar_arrive(&o_ready[slot]);
      ++qn;
      continue;
    }
    fa3_rows r;
    const fa_mask mask = fa3_mask_of<K::SEQS>(A, ti);
    for (int w = 0; w < 2; ++w) {
      int64_t lo, hi;
      int head, pos;
      fa3_row_of<BM>(A, rl + 8 * w, head, pos);
      fa_mask_key_range(&mask, ti.m0 + pos, K::SEQS ? ti.sk : seqlen_k, &lo, &hi);
      r.lo[w] = (int)lo;
      r.hi[w] = (int)hi;
      r.max[w] = -INFINITY;
      r.sum[w] = 0.0f;
    }
    /* Whether the key tile at c0 holds only keys both of this thread's rows see (their ranges
       end at seqlen_k at most): then no element needs the mask. */
    auto class_of = [&](int n) {
      return n * BN >= max(r.lo[0], r.lo[1]) && n * BN + BN <= min(r.hi[0], r.hi[1])
                 ? FA_TILE_FULL
                 : FA_TILE_PARTIAL;
    };

    if (!turned && c == WGS - 1) bar_arrive(1, 256);
    turned = true;
    /* A consumer whose 64 rows all lie past the tile's (the rest of the short query block: at head
       dim 64, 1k rows are 5 1/3 blocks of 192) computes nothing: it takes its turns and releases
       each stage in step with the others (every release after the stage's load, so that no
       arrival counts toward an earlier phase) and writes no output (TMA clips those rows).
       Decided at the tile's start, with no wgmma in flight, and broadcast so that ptxas sees it
       warp-uniform. Three consumers only (so never with IN_KV): with two, where it rarely
       applies, its mere presence cost 2.5% at hd64 causal 1k. */
    int idle = 0;
    if (WGS == 3)
      idle = __shfl_sync(0xffffffffu, A.pack_log2 == 0 && ti.m0 + 64 * c >= ti.m_end, 0);
    if (idle) {
      for (int n = ti.n_begin; n < ti.n_end; ++n, ++kv) {
        const int st = kv % STAGES;
        turn_wait();
        mbar_wait(&k_full[st], (kv / STAGES) & 1);
        turn_pass();
        mbar_arrive(&k_empty[st]);
        if (n > ti.n_begin) {
          const int ps = (kv - 1) % STAGES;
          mbar_wait(&v_full[ps], ((kv - 1) / STAGES) & 1);
          mbar_arrive(&v_empty[ps]);
        }
      }
      const int ls = (kv - 1) % STAGES;
      turn_wait();
      mbar_wait(&v_full[ls], ((kv - 1) / STAGES) & 1);
      turn_pass();
      mbar_arrive(&v_empty[ls]);
      mbar_arrive(&q_empty[qb]); /* once, as the others (after the loop, or with the epilogue) */
      ++qn;
      continue;
    }
    const unsigned char *q = sQ + qb * CB * BOXQ + c * 64 * 128;
    /* Key tile n_begin: S and its softmax alone. */
    int st = kv % STAGES;
    turn_wait();
    mbar_wait(&k_full[st], (kv / STAGES) & 1);
    wgmma_fence();
    fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK + st * CB * BOXK);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    /* IN_KV: the tile's last K stage is released by the store thread (O is written there) */
    if (!K::IN_KV || ti.n_begin + 1 < ti.n_end) mbar_arrive(&k_empty[st]);
    fa3_softmax<BN, !K::ROW_SUM, K::SPLIT_MAX>(s, r, class_of(ti.n_begin), ti.n_begin * BN, t, sl2,
                                               alpha);
    fa3_pack_p<Tr, BN>(s, pa);
    ++kv;
    /* Then per key tile: S of this tile and P V of the previous one issued together. */
    for (int n = ti.n_begin + 1; n < ti.n_end; ++n, ++kv) {
      const int ps = (kv - 1) % STAGES;
      st = kv % STAGES;
      turn_wait();
      mbar_wait(&k_full[st], (kv / STAGES) & 1);
      mbar_wait(&v_full[ps], ((kv - 1) / STAGES) & 1);
      wgmma_fence();
      fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK + st * CB * BOXK);
      wgmma_commit();
      fa3_issue_pv<NP, BN, F16>(o, pa, sV + ps * CB * BOXK, pv_lbo(ps), n > ti.n_begin + 1);
      wgmma_commit();
      turn_pass();
      wgmma_wait<1>();
      wgmma_fence_regs(s);
      if (!K::IN_KV || n + 1 < ti.n_end) mbar_arrive(&k_empty[st]);
      fa3_softmax<BN, !K::ROW_SUM, K::SPLIT_MAX>(s, r, class_of(n), n * BN, t, sl2, alpha);
      if (K::PINNED) pin_after(&pin_slot[tid - 128], r.sum[0] + r.sum[1]);
      wgmma_wait<0>();
      wgmma_fence_regs(o);
      wgmma_fence_frags(pa);
      mbar_arrive(&v_empty[ps]);
      fa3_rescale<NP>(o, alpha);
      fa3_pack_p<Tr, BN>(s, pa);
    }
    /* Every S of the tile has been read: Q may be replaced (TMA_EPILOGUE: once O is in its place;
       IN_KV: now, and consumer 1 tells consumer 0 that the K stage is free for its O). */
    if (!K::TMA_EPI || K::IN_KV) mbar_arrive(&q_empty[qb]);
    if (K::IN_KV && c == 1) bar_arrive(3, 256);
    /* Then P V of the last key tile, alone; the output. */
    const int ls = (kv - 1) % STAGES;
    turn_wait();
    mbar_wait(&v_full[ls], ((kv - 1) / STAGES) & 1);
    wgmma_fence();
    fa3_issue_pv<NP, BN, F16>(o, pa, sV + ls * CB * BOXK, pv_lbo(ls), ti.n_end - ti.n_begin > 1);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    wgmma_fence_frags(pa);
    if (!K::IN_KV) mbar_arrive(&v_empty[ls]);
    int os = ls;      /* IN_KV: the stage of the block's last key tile, where O goes */
    if (K::OWN_END) { /* the block's key tiles past this consumer's (q_info read again: no
                         register holds the block's end through the loop) */
      const int end = q_info[slot].n_end;
      /* IN_KV: this consumer's last stage is not the one the store thread releases */
      if (K::IN_KV && ti.n_end < end) {
        mbar_arrive(&k_empty[ls]);
        mbar_arrive(&v_empty[ls]);
      }
      for (; ti.n_end < end; ++ti.n_end, ++kv) {
        turn_wait();
        turn_pass();
      }
      os = (kv - 1) % STAGES;
    }
    if (K::IN_KV && c == 0) bar_arrive(4, 256); /* the V stage is free for consumer 1's O */
    fa3_fwd_epilogue<Tr, HD, WGS, BN, FLAGS>(A, S, me, k, total, hb_count, o, r.sum, r.max, qb,
                                             slot, os);
    ++qn;
  }
  if (c == 0 && turned) turn_wait();
}

#endif /* FA_CUDA_FA3_FWD_KERNEL_CUH */
