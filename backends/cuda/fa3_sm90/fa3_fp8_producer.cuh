/*
 * fa3_fp8_producer.cuh: the FP8 forward's block shape (fa3_fp8_traits) and its producer thread,
 * which loads each tile's Q and its K and Vᵀ tiles by TMA, as fa3_fwd_producer.cuh's loads do for
 * f16/bf16: the tiles in the scheduler's order (fa3_fwd_scheduler.cuh), each published to the
 * consumers with its Q (q_tile, q_info), K and Vᵀ of a stage completing on their own mbarriers and
 * released separately (K once Q Kᵀ has read it, Vᵀ once P V has). Q and K are read in boxes of
 * head-dim bytes a row (64 under the 64-byte swizzle, else 128 under the 128-byte one); Vᵀ in one
 * box of head_dim rows of BN key bytes from the pre-pass's copy (fa3_fp8_vt.cu).
 */
#ifndef FA_CUDA_FA3_FP8_PRODUCER_CUH
#define FA_CUDA_FA3_FP8_PRODUCER_CUH

#include "../common/sm90_async.cuh"
#include "fa3_fwd_block.cuh"
#include "fa3_fwd_scheduler.cuh"

template <int HD, int WGS, int BN, int FLAGS>
struct fa3_fp8_traits {
  static constexpr int BM = 64 * WGS;             /* query rows */
  static constexpr int ROW = HD < 128 ? HD : 128; /* bytes of a Q and K box row */
  static constexpr int CB = HD / ROW;             /* boxes a Q or K row spans */
  static constexpr int BOXQ = BM * ROW, BOXK = BN * ROW, BOXV = HD * BN; /* bytes of a box */
  static constexpr int STAGES = FA3_FWD_STAGES_OF(FLAGS);
  static constexpr int QB = (FLAGS & FA3_TWO_Q_BUFFERS) ? 2 : 1;
  static constexpr int NC = 128 * WGS; /* consumer threads */
  static constexpr bool PINNED = (FLAGS & FA3_PINNED_SOFTMAX) != 0;
  static constexpr bool DYNAMIC = (FLAGS & FA3_DYNAMIC_SCHEDULE) != 0;
  static constexpr bool LPT = DYNAMIC; /* largest first within L2-sized chunks */
  static constexpr bool SPLIT_MAX = (FLAGS & FA3_SPLIT_ROW_MAX) != 0;
  static_assert((FLAGS & FA3_FP8) != 0, "an FP8 configuration");
  static_assert((FLAGS & (FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE | FA3_MMA_ROW_SUM |
                          FA3_OWN_KEY_END | FA3_SHORT_BLOCK_FIRST | FA3_SEQS)) == 0,
                "the FP8 forward stores O from registers and runs dense calls only");
  static_assert(HD == 64 || HD == 128 || HD == 256, "FP8 head dims 64, 128, 256");
  static_assert(BN == 128, "a Vᵀ stage row is one 128-byte swizzle row of keys");
  static_assert(!DYNAMIC || (FLAGS & FA3_PERSISTENT), "the dynamic schedule's grid is persistent");
};

/* Registers per thread of the producer and of each consumer warpgroup (setmaxnreg): fa3_regs's,
   but 24 / 240 at head dim 256 whatever the schedule: there the consumers' O, S and P take 208
   registers, and at 232 their loop spilled; the producer's spills at 24 lie outside that loop. */
template <int WGS, int HD, bool DYNAMIC>
struct fa3_fp8_regs {
  static constexpr bool WIDE = WGS == 2 && HD == 256;
  static constexpr int producer = WIDE ? 24 : fa3_regs<WGS, DYNAMIC>::producer;
  static constexpr int consumer = WIDE ? 240 : fa3_regs<WGS, DYNAMIC>::consumer;
  static_assert(producer * 128 + consumer * 128 * WGS <=
                    fa3_regs<WGS, DYNAMIC>::at_launch * 128 * (WGS + 1),
                "register file");
};

template <int HD, int WGS, int BN, int FLAGS>
__device__ __forceinline__ void fa3_fp8_produce(const fa3_fwd_args &A, const fa3_fwd_smem &S,
                                                int hb_count, int total) {
  typedef fa3_fp8_traits<HD, WGS, BN, FLAGS> K;
  constexpr int CB = K::CB, ROW = K::ROW, BOXQ = K::BOXQ, BOXK = K::BOXK, STAGES = K::STAGES;
  int kv = 0, qn = 0; /* K/V tiles loaded so far, Q buffer uses */
  int j = 0, k = (int)blockIdx.x;
  fa3_tile ti;
  for (;;) {
    const bool done = k >= total;
    if (!done) fa3_tile_of<K::BM, BN, K::LPT, false>(k, total, hb_count, A, ti);
    const bool empty = done || ti.n_end == ti.n_begin;
    const int qb = qn % K::QB, quse = qn / K::QB, slot = qn & 1;
    /* the buffer's last tile done with it (its last Q Kᵀ, or its empty epilogue) */
    if (quse > 0) mbar_wait(&S.q_empty[qb], (quse - 1) & 1);
    ++qn;
    S.q_tile[slot] = k;
    if (!done) S.q_info[slot] = ti;
    if (empty) { /* tell the consumers (no Q), then take the next tile */
      mbar_arrive(&S.q_full[qb]);
      if (done) break;
      k = fa3_next_tile<K::DYNAMIC>(A, j);
      continue;
    }
    mbar_arrive_expect_tx(&S.q_full[qb], CB * BOXQ);
    for (int cb = 0; cb < CB; ++cb)
      tma_load_4d(S.q + (qb * CB + cb) * BOXQ, A.tq, &S.q_full[qb], cb * ROW, ti.m0, ti.h, ti.b);
    for (int n = ti.n_begin; n < ti.n_end; ++n, ++kv) {
      const int st = kv % STAGES, use = kv / STAGES;
      if (use > 0) mbar_wait(&S.k_empty[st], (use - 1) & 1);
      mbar_arrive_expect_tx(&S.k_full[st], CB * BOXK);
      for (int cb = 0; cb < CB; ++cb)
        tma_load_4d(S.k + (st * CB + cb) * BOXK, A.tk, &S.k_full[st], cb * ROW, n * BN, ti.hk,
                    ti.b);
      if (use > 0) mbar_wait(&S.v_empty[st], (use - 1) & 1);
      mbar_arrive_expect_tx(&S.v_full[st], K::BOXV);
      tma_load_4d(S.v + st * K::BOXV, A.tv, &S.v_full[st], n * BN, 0, ti.hk, ti.b);
    }
    k = fa3_next_tile<K::DYNAMIC>(A, j);
  }
  if (K::DYNAMIC) fa3_sched_finish(A);
}

#endif /* FA_CUDA_FA3_FP8_PRODUCER_CUH */
