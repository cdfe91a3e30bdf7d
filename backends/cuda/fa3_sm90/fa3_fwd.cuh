/*
 * fa3_fwd.cuh: the FlashAttention-3 forward kernel (Hopper, sm_90a).
 *
 * One block per (64 x WGS query rows, query head, batch); WGS + 1 warpgroups:
 *   producer (warpgroup 0, one thread; registers given back with setmaxnreg): Q once, then K and
 *     V tiles of BN keys by TMA (4-D tensor maps: head dim, row, head, batch; rows and columns past
 *     the tensor read as zeros) into a two-stage ring. K and V of a stage complete on their own
 *     mbarriers ("full") and are released separately ("empty"): K once Q Kᵀ has read it, V once
 *     P V has, so the next K streams in while P V still runs.
 *   WGS consumers (64 query rows each; registers taken with setmaxnreg): S = Q Kᵀ by wgmma from
 *     shared memory, online softmax in registers (core/ mask and softmax rules, exp2 with
 *     log2-scaled scores), O += P V by wgmma with P from registers, where the S accumulator's
 *     layout is the A operand's; at the end O / l and the LSE.
 * FLAGS (fa3_args.h): FA3_OVERLAP issues Q Kᵀ of tile j + 1 with P V of tile j and runs the softmax
 * of j + 1 under P V; FA3_PINGPONG makes the consumers take turns issuing their MMAs (named barrier
 * 1 + c waits for consumer c's turn), so one's softmax runs under the others' MMAs.
 * HD is the padded head dim (64, 128, 256); the real one (a.p.head_dim, 96 or 192 as well) bounds
 * the stores: the columns past it are zeros read by TMA in Q, K and V.
 */
#ifndef FA_CUDA_FA3_FWD_CUH
#define FA_CUDA_FA3_FWD_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "../fa2_sm80/fa2_common.cuh"
#include "core/mask.h"
#include "core/score.h"
#include "core/softmax.h"
#include "fa3_args.h"

/* Registers per thread of the producer and of each consumer warpgroup (setmaxnreg): the whole
   file of 64 K registers less the producer's share. */
template <int WGS>
struct fa3_regs {
  static constexpr int producer = 24;
  static constexpr int consumer = WGS == 2 ? 240 : 160;
  static_assert(producer * 128 + consumer * 128 * WGS <= 65536, "register file");
};

/* S = Q Kᵀ of one consumer: k-step ks is 16 columns, 32 bytes into 64-column box ks / 4. */
template <int HD, int BN, int BOXQ, int BOXK, bool F16>
__device__ __forceinline__ void fa3_issue_s(float (&s)[BN / 2], const unsigned char *q,
                                            const unsigned char *k) {
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int off = (ks % 4) * 32;
    wgmma_n<BN>::template ss<0, F16>(s, wgmma_desc_sw128(q + (ks / 4) * BOXQ + off, 16, 1024),
                                     wgmma_desc_sw128(k + (ks / 4) * BOXK + off, 16, 1024), ks > 0);
  }
}

/* O += P V: V MN-major, k-step kk is 16 keys (2048 bytes) on; 64-column boxes BOXK apart. */
template <int HD, int BN, int BOXK, bool F16>
__device__ __forceinline__ void fa3_issue_pv(float (&o)[HD / 2], const uint32_t (&pa)[BN / 16][4],
                                             const unsigned char *v) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    wgmma_n<HD>::template rs<1, F16>(o, pa[kk], wgmma_desc_sw128(v + kk * 2048, BOXK, 1024), 1);
}

/* A consumer's running softmax state for its thread's two rows (8 apart). */
struct fa3_rows {
  int lo[2], hi[2]; /* each row's key range under the mask */
  float max[2], sum[2];
};

/* Softcap, mask and online softmax of one tile of scores (keys c0..c0 + BN), in place: s becomes
   P; alpha gets each row's rescale factor for O (the caller applies it once P V of the previous
   tile no longer reads O). */
template <int BN>
__device__ __forceinline__ void fa3_softmax(float (&s)[BN / 2], fa3_rows &r, fa_tile_class cls,
                                            int c0, int t, const fa2_problem &p, float sl2,
                                            float (&alpha)[2]) {
  if (p.softcap > 0.0f) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = fa_score_softcap(s[i] * p.scale, p.softcap);
  }
  if (cls != FA_TILE_FULL) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = c0 + 8 * j + 2 * t + (i & 1), w = i >> 1;
        if (key < r.lo[w] || key >= r.hi[w]) s[4 * j + i] = -INFINITY;
      }
  }
  /* Per row: a row's pieces sit in the 4 threads of a quad. */
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float mx = r.max[w];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * w], s[4 * j + 2 * w + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ms = fa_softmax_safe_max(mx) * sl2;
    alpha[w] = r.max[w] == -INFINITY ? 0.0f : fast_exp2(r.max[w] * sl2 - ms);
    r.max[w] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = fast_exp2(s[4 * j + 2 * w + e] * sl2 - ms);
        s[4 * j + 2 * w + e] = pe;
        sum += pe;
      }
    r.sum[w] = r.sum[w] * alpha[w] + sum;
  }
}

template <int HD>
__device__ __forceinline__ void fa3_rescale(float (&o)[HD / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < HD / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[4 * j + i] *= alpha[i >> 1];
}

/* P as the A operand: the accumulator of keys 16 kk.. is kk's A fragment. */
template <typename Tr, int BN>
__device__ __forceinline__ void fa3_pack_p(const float (&s)[BN / 2], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) pa[kk][i] = Tr::pack(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

template <typename Tr, int HD, int WGS, int BN, int FLAGS>
__global__ void __launch_bounds__(128 * (WGS + 1), 1)
    fa3_fwd_kernel(const __grid_constant__ fa3_fwd_args A) {
  constexpr int BM = 64 * WGS, CB = HD / 64; /* 64-column boxes */
  constexpr bool F16 = Tr::is_f16, OVERLAP = (FLAGS & FA3_OVERLAP) != 0;
  constexpr bool PINGPONG = (FLAGS & FA3_PINGPONG) != 0;
  constexpr int BOXQ = BM * 128, BOXK = BN * 128; /* bytes of one 64-column box */
  constexpr int NC = 128 * WGS;                   /* consumer threads */
  const fa2_fwd_args &a = A.a;

  extern __shared__ unsigned char smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: boxes start on such a boundary. */
  unsigned char *sQ = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sK = sQ + CB * BOXQ; /* stage s at s * CB * BOXK */
  unsigned char *sV = sK + FA3_FWD_STAGES * CB * BOXK;
  __shared__ uint64_t q_full, k_full[FA3_FWD_STAGES], v_full[FA3_FWD_STAGES];
  __shared__ uint64_t k_empty[FA3_FWD_STAGES], v_empty[FA3_FWD_STAGES];

  const int tid = threadIdx.x, wg = tid / 128;
  /* Largest query tiles first: under a causal mask they hold the most key tiles. */
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (a.p.heads_q / a.p.heads_kv);
  const int m0 = m_block * BM;
  const int seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;
  const fa_mask mask = fa2_mask_of(a.p);
  const int rows_end = min(m0 + BM, seqlen_q);
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&mask, m0, seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(&mask, rows_end - 1, seqlen_k, &lo_last, &hi_last);
  const int n_begin = (int)(lo_first / BN);
  const int n_end = hi_last > lo_first ? (int)((hi_last + BN - 1) / BN) : n_begin;

  if (tid == 0) {
    mbar_init(&q_full, 1);
    for (int s = 0; s < FA3_FWD_STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], NC); /* every consumer thread releases */
      mbar_init(&v_empty[s], NC);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<fa3_regs<WGS>::producer>();
    if (tid == 0) {
      mbar_arrive_expect_tx(&q_full, CB * BOXQ);
      for (int cb = 0; cb < CB; ++cb) tma_load_4d(sQ + cb * BOXQ, A.tq, &q_full, cb * 64, m0, h, b);
      for (int n = n_begin, it = 0; n < n_end; ++n, ++it) {
        const int st = it % FA3_FWD_STAGES, use = it / FA3_FWD_STAGES;
        if (use > 0) mbar_wait(&k_empty[st], (use - 1) & 1);
        mbar_arrive_expect_tx(&k_full[st], CB * BOXK);
        for (int cb = 0; cb < CB; ++cb)
          tma_load_4d(sK + (st * CB + cb) * BOXK, A.tk, &k_full[st], cb * 64, n * BN, hk, b);
        if (use > 0) mbar_wait(&v_empty[st], (use - 1) & 1);
        mbar_arrive_expect_tx(&v_full[st], CB * BOXK);
        for (int cb = 0; cb < CB; ++cb)
          tma_load_4d(sV + (st * CB + cb) * BOXK, A.tv, &v_full[st], cb * 64, n * BN, hk, b);
      }
    }
    return;
  }
  setmaxnreg_inc<fa3_regs<WGS>::consumer>();

  /* Consumer c: rows m0 + 64 c + [0, 64); this thread's two rows (8 apart). */
  const int c = wg - 1, ctid = tid - 128 * wg, warp = ctid / 32, lane = ctid % 32;
  const int t = lane % 4;
  const int row0 = m0 + 64 * c + 16 * warp + lane / 4;
  fa3_rows r;
  for (int w = 0; w < 2; ++w) {
    int64_t lo, hi;
    fa_mask_key_range(&mask, row0 + 8 * w, seqlen_k, &lo, &hi);
    r.lo[w] = (int)lo;
    r.hi[w] = (int)hi;
    r.max[w] = -INFINITY;
    r.sum[w] = 0.0f;
  }
  const float sl2 = a.p.softcap > 0.0f ? FA2_LOG2E : a.p.scale * FA2_LOG2E;
  const unsigned char *q = sQ + c * 64 * 128;
  /* Each tile's mask class from the block's first and last rows (keys past seqlen_k: partial). */
  auto class_of = [&](int n) {
    const int c0 = n * BN;
    fa_tile_class cls = fa_mask_tile_class_from_ranges(lo_first, hi_first, lo_last, hi_last, c0,
                                                       min(c0 + BN, seqlen_k));
    return cls == FA_TILE_FULL && c0 + BN > seqlen_k ? FA_TILE_PARTIAL : cls;
  };
  /* Ping-pong: wait for this consumer's turn to issue MMAs; pass the turn on after issuing. The
     last consumer passes the first turn to consumer 0, and consumer 0 takes one more turn at the
     end (the last consumer's final pass), so that every barrier completes as often as it is
     waited for. */
  const int tiles = n_end - n_begin;
  auto turn_wait = [&]() {
    if (PINGPONG) bar_sync(1 + c, 256);
  };
  auto turn_pass = [&]() {
    if (PINGPONG) bar_arrive(1 + (c + 1) % WGS, 256);
  };
  if (PINGPONG && c == WGS - 1 && tiles > 0) bar_arrive(1, 256);

  float o[HD / 2], s[BN / 2], alpha[2];
  uint32_t pa[BN / 16][4];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.0f;

  mbar_wait(&q_full, 0);
  if (OVERLAP && tiles > 0) {
    /* Tile n_begin: S and its softmax alone. */
    turn_wait();
    mbar_wait(&k_full[0], 0);
    wgmma_fence();
    fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    mbar_arrive(&k_empty[0]);
    fa3_softmax<BN>(s, r, class_of(n_begin), n_begin * BN, t, a.p, sl2, alpha);
    fa3_pack_p<Tr, BN>(s, pa);
    /* Then per tile: S of this tile and P V of the previous one issued together. */
    for (int n = n_begin + 1, it = 1; n < n_end; ++n, ++it) {
      const int st = it % FA3_FWD_STAGES, pst = (it - 1) % FA3_FWD_STAGES;
      turn_wait();
      mbar_wait(&k_full[st], (it / FA3_FWD_STAGES) & 1);
      mbar_wait(&v_full[pst], ((it - 1) / FA3_FWD_STAGES) & 1);
      wgmma_fence();
      fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK + st * CB * BOXK);
      wgmma_commit();
      fa3_issue_pv<HD, BN, BOXK, F16>(o, pa, sV + pst * CB * BOXK);
      wgmma_commit();
      turn_pass();
      wgmma_wait<1>();
      wgmma_fence_regs(s);
      mbar_arrive(&k_empty[st]);
      fa3_softmax<BN>(s, r, class_of(n), n * BN, t, a.p, sl2, alpha);
      wgmma_wait<0>();
      wgmma_fence_regs(o);
      wgmma_fence_frags(pa);
      mbar_arrive(&v_empty[pst]);
      fa3_rescale<HD>(o, alpha);
      fa3_pack_p<Tr, BN>(s, pa);
    }
    /* P V of the last tile. */
    const int last = tiles - 1, lst = last % FA3_FWD_STAGES;
    turn_wait();
    mbar_wait(&v_full[lst], (last / FA3_FWD_STAGES) & 1);
    wgmma_fence();
    fa3_issue_pv<HD, BN, BOXK, F16>(o, pa, sV + lst * CB * BOXK);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    wgmma_fence_frags(pa);
    mbar_arrive(&v_empty[lst]);
    if (PINGPONG && c == 0) turn_wait();
  } else if (!OVERLAP) {
    /* One tile at a time: S, softmax, P V (a turn for each MMA). */
    for (int n = n_begin, it = 0; n < n_end; ++n, ++it) {
      const int st = it % FA3_FWD_STAGES, ph = (it / FA3_FWD_STAGES) & 1;
      turn_wait();
      mbar_wait(&k_full[st], ph);
      wgmma_fence();
      fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK + st * CB * BOXK);
      wgmma_commit();
      turn_pass();
      wgmma_wait<0>();
      wgmma_fence_regs(s);
      mbar_arrive(&k_empty[st]);
      fa3_softmax<BN>(s, r, class_of(n), n * BN, t, a.p, sl2, alpha);
      fa3_rescale<HD>(o, alpha);
      fa3_pack_p<Tr, BN>(s, pa);
      turn_wait();
      mbar_wait(&v_full[st], ph);
      wgmma_fence();
      fa3_issue_pv<HD, BN, BOXK, F16>(o, pa, sV + st * CB * BOXK);
      wgmma_commit();
      turn_pass();
      wgmma_wait<0>();
      wgmma_fence_regs(o);
      wgmma_fence_frags(pa);
      mbar_arrive(&v_empty[st]);
    }
    if (PINGPONG && c == 0 && tiles > 0) turn_wait();
  }

  /* Epilogue: O / l straight from the accumulators (4-byte stores of the real head dim's columns),
     the LSE in natural log. */
  typedef typename Tr::elem E;
  E *out = static_cast<E *>(a.out) + b * a.o_str.batch + h * a.o_str.head;
  const int hd = a.p.head_dim;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float l = r.sum[w];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = fa_softmax_out_scale(l);
    const int i = row0 + 8 * w;
    if (i >= seqlen_q) continue;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      if (8 * j < hd)
        *reinterpret_cast<uint32_t *>(out + (int64_t)i * a.o_str.row + 8 * j + 2 * t) =
            Tr::pack(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv);
    if (a.lse && t == 0)
      a.lse[b * a.lse_str.batch + h * a.lse_str.head + (int64_t)i * a.lse_str.row] =
          l > 0.0f ? r.max[w] * sl2 * FA2_LN2 + logf(l) : -INFINITY;
  }
}

#endif /* FA_CUDA_FA3_FWD_CUH */
