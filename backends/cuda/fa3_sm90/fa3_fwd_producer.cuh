/*
 * fa3_fwd_producer.cuh: the FlashAttention-3 forward's producer warpgroup (one thread of it loads,
 * one stores; the rest give their registers back).
 *
 * The loads (fa3_fwd_produce): the block's tiles in the scheduler's order (fa3_fwd_scheduler.cuh);
 * for each, its record published to the consumers (q_tile, q_info; q_own), its Q loaded by TMA
 * into the next Q buffer, then its K and V tiles of BN keys into the K/V ring (4-D tensor maps:
 * head dim, row, head, batch; rows and columns past the tensor read as zeros). K and V of a stage
 * complete on their own mbarriers ("full") and are released separately ("empty"): K once Q Kᵀ has
 * read it, V once P V has, so the next K streams in while P V still runs. A persistent block
 * loads the next tile's Q, K and V during this tile's last P V and epilogue. The last use of a Q
 * buffer, with no tile, tells the consumers that none is left.
 *
 * The store (TMA_EPILOGUE: fa3_fwd_store_from_q or, EPILOGUE_IN_KV_STAGE, fa3_fwd_store_from_kv):
 * in a thread of its own, so that waiting for TMA to read a buffer never holds up the loads.
 */
#ifndef FA_CUDA_FA3_FWD_PRODUCER_CUH
#define FA_CUDA_FA3_FWD_PRODUCER_CUH

#include "../common/sm90_async.cuh"
#include "fa3_fwd_block.cuh"
#include "fa3_col_boxes.cuh"
#include "fa3_fwd_epilogue.cuh"

template <int HD, int WGS, int BN, int FLAGS>
__device__ __forceinline__ void fa3_fwd_produce(const fa3_fwd_args &A, const fa3_fwd_smem &S,
                                                int hb_count, int total) {
  typedef fa3_fwd_traits<HD, WGS, BN, FLAGS> K;
  constexpr int CB = K::CB, BOXQ = K::BOXQ, BOXK = K::BOXK, STAGES = K::STAGES;
  int kv = 0, qn = 0; /* K/V tiles loaded so far, Q buffer uses */
  /* whether the last of the CB column boxes is loaded (SEQS: fa3_col_boxes.cuh) */
  const bool last = !(K::SEQS && CB == 4) || fa3_col_boxes(A.a.p.head_dim) == CB;
  int j = 0, k = (int)blockIdx.x;
  fa3_tile ti;
  fa3_seq_cursor cur = {0, 0};
  for (;;) {
    bool done, empty = true;
    if (K::SEQS) {
      done = !fa3_seq_tile_of<K::BM, BN>(k, cur, A, ti);
      if (done) k = FA3_SEQS_TOTAL; /* what the consumers and the store thread stop at */
    } else {
      done = k >= total;
      if (!done) fa3_tile_of<K::BM, BN, K::LPT, K::SHORT_FIRST>(k, total, hb_count, A, ti);
    }
    if (!done) empty = ti.n_end == ti.n_begin;
    const int qb = qn % K::QB, quse = qn / K::QB, slot = qn & 1;
    if (K::IN_KV) {
      /* the slot's last tile stored; the Q buffer's last tile past its last Q Kᵀ */
      if (qn >= 2) mbar_wait(&S.o_free[slot], ((qn >> 1) - 1) & 1);
      if (quse > 0) mbar_wait(&S.q_empty[qb], (quse - 1) & 1);
    } else if (quse > 0) { /* the buffer's last tile done with it (TMA_EPILOGUE: its O stored) */
      mbar_wait(K::TMA_EPI ? &S.o_free[qb] : &S.q_empty[qb], (quse - 1) & 1);
    }
    ++qn;
    S.q_tile[slot] = k;
    if (!done) S.q_info[slot] = ti;
    if (K::OWN_END && !done)
      for (int cc = 0; cc < WGS; ++cc) {
        S.q_own[slot * WGS + cc] = ti;
        S.q_own[slot * WGS + cc].n_end = fa3_own_end<BN, K::SEQS>(A, ti, cc);
      }
    if (empty) { /* tell the consumers (no Q), then take the next tile */
      mbar_arrive(&S.q_full[qb]);
      if (done) break;
      k = fa3_next_tile<K::DYNAMIC>(A, j);
      continue;
    }
    int qy, qw, ky, kw, vy, vw;
    fa3_rows_at<K::SEQS>(ti, A.q_ext, A.q_batch_rows, false, ti.m0, qy, qw);
    fa3_rows_at<K::SEQS>(ti, A.k_ext, A.k_batch_rows, true, 0, ky, kw);
    fa3_rows_at<K::SEQS>(ti, A.k_ext, A.v_batch_rows, true, 0, vy, vw);
    mbar_arrive_expect_tx(&S.q_full[qb], (last ? CB : CB - 1) * BOXQ);
#pragma unroll
    for (int cb = 0; cb < CB; ++cb)
      if (cb < CB - 1 || last)
        tma_load_4d(S.q + (qb * CB + cb) * BOXQ, A.tq, &S.q_full[qb], cb * 64, qy, ti.h, qw);
    for (int n = ti.n_begin; n < ti.n_end; ++n, ++kv) {
      const int st = kv % STAGES, use = kv / STAGES;
      /* OWN_KEY_END: the consumers whose key tiles end before n release this use of the stage
         here (its previous use is complete, so the arrivals count toward this one) */
      int skip = 0;
      if (K::OWN_END && !(K::IN_KV && n + 1 == ti.n_end)) /* IN_KV: the store thread's */
        for (int cc = 0; cc < WGS; ++cc) skip += n >= S.q_own[slot * WGS + cc].n_end;
      if (use > 0) mbar_wait(&S.k_empty[st], (use - 1) & 1);
      mbar_arrive_expect_tx(&S.k_full[st], (last ? CB : CB - 1) * BOXK);
#pragma unroll
      for (int cb = 0; cb < CB; ++cb)
        if (cb < CB - 1 || last)
          tma_load_4d(S.k + (st * CB + cb) * BOXK, A.tk, &S.k_full[st], cb * 64, ky + n * BN, ti.hk,
                      kw);
      if (skip) mbar_arrive_n(&S.k_empty[st], 128 * skip);
      if (use > 0) mbar_wait(&S.v_empty[st], (use - 1) & 1);
      mbar_arrive_expect_tx(&S.v_full[st], (last ? CB : CB - 1) * BOXK);
#pragma unroll
      for (int cb = 0; cb < CB; ++cb)
        if (cb < CB - 1 || last)
          tma_load_4d(S.v + (st * CB + cb) * BOXK, A.tv, &S.v_full[st], cb * 64, vy + n * BN, ti.hk,
                      vw);
      if (skip) mbar_arrive_n(&S.v_empty[st], 128 * skip);
    }
    k = fa3_next_tile<K::DYNAMIC>(A, j);
  }
  if (K::DYNAMIC) fa3_sched_finish(A);
}

/* EPILOGUE_IN_KV_STAGE: each tile in turn once the consumers have written its O into its last K/V
   stage (o_ready), then that stage handed back to the loads on behalf of the consumers (they did
   not release it) and the slot to the producer (o_free). */
template <int HD, int WGS, int BN, int FLAGS>
__device__ __forceinline__ void fa3_fwd_store_from_kv(const fa3_fwd_args &A, const fa3_fwd_smem &S,
                                                      int total) {
  typedef fa3_fwd_traits<HD, WGS, BN, FLAGS> K;
  const int rows = K::BM >> A.pack_log2;
  for (int u = 0, kvs = 0;; ++u) {
    const int sl = u & 1;
    mbar_wait_sleepy(&S.o_ready[sl], (u >> 1) & 1, 1000000);
    if (S.q_tile[sl] >= total) break;
    const fa3_tile tf = S.q_info[sl];
    if (tf.n_end != tf.n_begin) {
      kvs += tf.n_end - tf.n_begin;
      const int ls = (kvs - 1) % K::STAGES;
      fa3_store_o_staged<K::SEQS>(A, tf, S.k + ls * K::CB * K::BOXK, S.v + ls * K::CB * K::BOXK,
                                  rows);
      mbar_arrive_n(&S.k_empty[ls], K::NC);
      mbar_arrive_n(&S.v_empty[ls], K::NC);
    }
    mbar_arrive(&S.o_free[sl]);
  }
  bulk_wait<0>();
}

/* TMA_EPILOGUE from the Q buffer: each Q buffer use in turn, once the consumers release it, its
   tile's O stored (none for a tile without keys), then the buffer handed back to the loads
   (o_free). The use that says no tile is left ends it. */
template <int HD, int WGS, int BN, int FLAGS>
__device__ __forceinline__ void fa3_fwd_store_from_q(const fa3_fwd_args &A, const fa3_fwd_smem &S,
                                                     int total) {
  typedef fa3_fwd_traits<HD, WGS, BN, FLAGS> K;
  for (int u = 0;; ++u) {
    const int b = u % K::QB;
    mbar_wait_sleepy(&S.q_full[b], (u / K::QB) & 1, 1000000);
    if (S.q_tile[u & 1] >= total) break;
    const fa3_tile tf = S.q_info[u & 1];
    mbar_wait_sleepy(&S.q_empty[b], (u / K::QB) & 1, 1000000);
    if (tf.n_end != tf.n_begin)
      fa3_store_o<K::SEQS>(A, tf, S.q + b * K::CB * K::BOXQ, K::BOXQ,
                           K::SHORT_FIRST && A.pack_log2 == 0);
    mbar_arrive(&S.o_free[b]);
  }
  bulk_wait<0>();
}

#endif /* FA_CUDA_FA3_FWD_PRODUCER_CUH */
