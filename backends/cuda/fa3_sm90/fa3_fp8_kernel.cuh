/*
 * fa3_fp8_kernel.cuh: the FlashAttention-3 forward on FP8 inputs (Hopper, sm_90a; docs/fp8.md):
 * q, k and v in e4m3 (or e5m2: E5M2), out in Tr's f16 or bf16, the LSE in float32. The roles and
 * the consumers' loop are fa3_fwd_kernel.cuh's: the producer warpgroup's thread loads by TMA
 * (fa3_fp8_producer.cuh); WGS consumers of 64 query rows each issue S = Q Kᵀ of key tile j + 1 with
 * P V of tile j by wgmma k32 (fa3_fp8_mma.cuh), run the softmax of j + 1 under P V
 * (fa3_fp8_softmax.cuh, the descales folded into the scale) and take ping-pong turns issuing their
 * MMAs (named barrier 1 + c waits for consumer c's turn). P is rounded to e4m3 for P V (as
 * FlashAttention-3 does; its row sums are of the unrounded P); V is read from the pre-pass's Vᵀ.
 * The output, O / l times v's descale, goes from the accumulators straight to memory.
 */
#ifndef FA_CUDA_FA3_FP8_KERNEL_CUH
#define FA_CUDA_FA3_FP8_KERNEL_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "core/math/mask.h"
#include "fa3_args.h"
#include "fa3_fp8_mma.cuh"
#include "fa3_fp8_producer.cuh"
#include "fa3_fp8_softmax.cuh"
#include "fa3_fwd_block.cuh"
#include "fa3_fwd_epilogue.cuh"
#include "fa3_fwd_scheduler.cuh"
#include "fa3_softmax.cuh"

/* The output of tile kt for consumer thread me: O / l x vd (v's descale of the last key tile:
   O is in its units; 4-byte stores of column pairs; rows past seqlen_q are not stored) and the LSE
   in natural log (mx: the rows' running max of scaled scores, log2 units). The tile's coordinates
   are computed again from an opaque copy of kt rather than kept in registers through the main loop
   (the producer may have published a later tile in its slot). */
template <typename Tr, int HD, int WGS, int BN, int FLAGS>
__device__ __forceinline__ void fa3_fp8_epilogue(const fa3_fwd_args &A, const fa3_consumer &me,
                                                 int kt, int total, int hb_count,
                                                 const float (&o)[HD / 2], const float (&sum)[2],
                                                 const float (&mx)[2], float vd) {
  typedef fa3_fp8_traits<HD, WGS, BN, FLAGS> K;
  typedef typename Tr::elem E;
  const cuda_fwd_args &a = A.a;
  int k_again = kt;
  asm volatile("" : "+r"(k_again));
  fa3_tile tf;
  fa3_tile_of<K::BM, BN, K::LPT, false>(k_again, total, hb_count, A, tf);
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float l = fa3_row_sum<HD, false>(o, sum, w), inv = fa_softmax_out_scale(l) * vd;
    int head, pos;
    fa3_row_of<K::BM>(A, me.rl + 8 * w, head, pos);
    const int i = tf.m0 + pos;
    if (i >= a.p.seqlen_q) continue;
    E *out = fa3_out_row<E>(A, tf, tf.h + head, i);
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<uint32_t *>(out + 8 * j + 2 * me.t) =
          Tr::pack(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv);
    if (a.lse && me.t == 0)
      a.lse[fa3_lse_at<false>(A, tf, tf.h + head, i)] = fa3_row_lse(mx[w], l, 1.0f);
  }
}

template <typename Tr, bool E5M2, int HD, int WGS, int BN, int FLAGS>
__global__ void __launch_bounds__(128 * (WGS + 1), 1)
    fa3_fp8_kernel(const __grid_constant__ fa3_fwd_args A) {
  typedef fa3_fp8_traits<HD, WGS, BN, FLAGS> K;
  constexpr int CB = K::CB, STAGES = K::STAGES, BOXQ = K::BOXQ, BOXK = K::BOXK, NC = K::NC;
  constexpr int QB = K::QB;
  /* A warp skips the rescale of O when every alpha of its rows is 1 (the softmax's lazy
     reference max): it costs HD / 2 multiplies a thread a tile, and the vote a few instructions. */
  constexpr bool LAZY = HD >= 128;
  const cuda_fwd_args &a = A.a;

  extern __shared__ unsigned char smem_raw[];
  /* The swizzles repeat every 512 (64-byte) or 1024 bytes (128-byte): boxes start on such a
     boundary. */
  unsigned char *sQ = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sK = sQ + QB * CB * BOXQ;
  unsigned char *sV = sK + STAGES * CB * BOXK;
  __shared__ uint64_t q_full[2], q_empty[2], k_full[STAGES], v_full[STAGES];
  __shared__ uint64_t k_empty[STAGES], v_empty[STAGES];
  /* PINNED_SOFTMAX: one slot per consumer thread, never read (fa3_fwd_kernel.cuh) */
  __shared__ float pin_slot[K::PINNED ? 128 * WGS : 1];
  __shared__ int q_tile[2];
  __shared__ fa3_tile q_info[2];
  const fa3_fwd_smem S = {sQ,      sK,      sV,      q_full,  q_empty, k_full, v_full,
                          k_empty, v_empty, nullptr, nullptr, q_tile,  q_info, nullptr};

  /* The warpgroup by a shuffle from lane 0, so that ptxas keeps what derives from it in uniform
     registers. */
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int seqlen_k = a.p.seqlen_k;
  int hb_count, total;

  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(&q_full[b], 1);
      mbar_init(&q_empty[b], NC);
    }
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], NC); /* every consumer thread releases */
      mbar_init(&v_empty[s], NC);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<fa3_fp8_regs<WGS, HD, K::DYNAMIC>::producer>();
    fa3_grid_of<K::BM>(A, hb_count, total);
    if (tid == 0) fa3_fp8_produce<HD, WGS, BN, FLAGS>(A, S, hb_count, total);
    return;
  }
  setmaxnreg_inc<fa3_fp8_regs<WGS, HD, K::DYNAMIC>::consumer>();
  fa3_grid_of<K::BM>(A, hb_count, total);

  /* Consumer c: rows m0 + 64 c + [0, 64) of each tile; this thread's two rows (8 apart). */
  const int c = wg - 1, ctid = tid - 128 * wg, warp = ctid / 32, lane = ctid % 32;
  const int t = lane % 4, rl = 64 * c + 16 * warp + lane / 4; /* first row within the tile */
  const float sl2_base = a.p.scale * CUDA_LOG2E;
  const fa3_consumer me = {c, lane, t, rl, sl2_base};
  /* Ping-pong turns as fa3_fwd_kernel.cuh's: the last consumer passes the first turn to consumer
     0, and consumer 0 takes one more turn at the very end. */
  auto turn_wait = [&]() { bar_sync(1 + c, 256); };
  auto turn_pass = [&]() { bar_arrive(1 + (c + 1) % WGS, 256); };
  bool turned = false;
  int kv = 0, qn = 0; /* as the producer counts */
  fa3_tile ti;

  float o[HD / 2], s[BN / 2], alpha[2], qs[2], sl2[2], vd = 1.0f, vr = 1.0f;
  uint32_t pa[BN / 32][4];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.0f; /* never read (add 0): defined for the asm */
  for (;;) {
    const int qb = qn % QB, slot = qn & 1;
    mbar_wait(&q_full[qb], (qn / QB) & 1); /* the producer's next tile (its Q loaded) */
    const int k = q_tile[slot];
    if (k >= total) break;
    ti = q_info[slot];
    if (ti.n_end == ti.n_begin) { /* it took a use of the Q buffer, with no Q */
      fa3_fwd_epilogue_empty<Tr, K::BM, false>(A, S, me, slot);
      mbar_arrive(&q_empty[qb]);
      ++qn;
      continue;
    }
    fa3_rows r;
    const fa_mask mask = cuda_mask_of(a.p);
    for (int w = 0; w < 2; ++w) {
      int64_t lo, hi;
      int head, pos;
      fa3_row_of<K::BM>(A, rl + 8 * w, head, pos);
      fa_mask_key_range(&mask, ti.m0 + pos, seqlen_k, &lo, &hi);
      r.lo[w] = (int)lo;
      r.hi[w] = (int)hi;
      r.max[w] = -INFINITY;
      r.sum[w] = 0.0f;
      qs[w] = sl2_base * fa3_fp8_q_descale(A, ti.b, ti.h + head, ti.m0 + pos);
    }
    /* Whether key tile n holds only keys both of this thread's rows see (their ranges end at
       seqlen_k at most): then no element needs the mask. */
    auto class_of = [&](int n) {
      return n * BN >= max(r.lo[0], r.lo[1]) && n * BN + BN <= min(r.hi[0], r.hi[1])
                 ? FA_TILE_FULL
                 : FA_TILE_PARTIAL;
    };
    /* Each row's scale for key tile n: q's descale (per row) times k's (per tile); v's descale
       of the tile (vd), and the ratio that takes O from the previous tile's units to its (vr). */
    auto scale_of = [&](int n) {
      const float kd = fa3_fp8_k_descale(A, ti.b, ti.hk, n),
                  vd_n = fa3_fp8_v_descale(A, ti.b, ti.hk, n);
      sl2[0] = qs[0] * kd;
      sl2[1] = qs[1] * kd;
      vr = vd / vd_n;
      vd = vd_n;
    };

    if (!turned && c == WGS - 1) bar_arrive(1, 256);
    turned = true;
    const unsigned char *q = sQ + qb * CB * BOXQ + c * 64 * K::ROW;
    /* Key tile n_begin: S and its softmax alone. */
    int st = kv % STAGES;
    scale_of(ti.n_begin);
    turn_wait();
    mbar_wait(&k_full[st], (kv / STAGES) & 1);
    wgmma_fence();
    fa3_fp8_issue_s<HD, BN, BOXQ, BOXK, E5M2>(s, q, sK + st * CB * BOXK);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    mbar_arrive(&k_empty[st]);
    fa3_fp8_softmax<BN, K::SPLIT_MAX, LAZY>(s, r, class_of(ti.n_begin), ti.n_begin * BN, t, sl2,
                                            alpha);
    fa3_fp8_pack_p<BN>(s, pa);
    ++kv;
    /* Then per key tile: S of this tile and P V of the previous one issued together. */
    for (int n = ti.n_begin + 1; n < ti.n_end; ++n, ++kv) {
      const int ps = (kv - 1) % STAGES;
      st = kv % STAGES;
      scale_of(n);
      turn_wait();
      mbar_wait(&k_full[st], (kv / STAGES) & 1);
      mbar_wait(&v_full[ps], ((kv - 1) / STAGES) & 1);
      wgmma_fence();
      fa3_fp8_issue_s<HD, BN, BOXQ, BOXK, E5M2>(s, q, sK + st * CB * BOXK);
      wgmma_commit();
      fa3_fp8_issue_pv<HD, BN, E5M2>(o, pa, sV + ps * K::BOXV, n > ti.n_begin + 1);
      wgmma_commit();
      turn_pass();
      wgmma_wait<1>();
      wgmma_fence_regs(s);
      mbar_arrive(&k_empty[st]);
      fa3_fp8_softmax<BN, K::SPLIT_MAX, LAZY>(s, r, class_of(n), n * BN, t, sl2, alpha);
      if (K::PINNED) pin_after(&pin_slot[tid - 128], r.sum[0] + r.sum[1]);
      wgmma_wait<0>();
      wgmma_fence_regs(o);
      wgmma_fence_frags(pa);
      mbar_arrive(&v_empty[ps]);
      alpha[0] *= vr;
      alpha[1] *= vr;
      if (!LAZY || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
        fa3_rescale<HD>(o, alpha);
      fa3_fp8_pack_p<BN>(s, pa);
    }
    /* Every S of the tile has been read: Q may be replaced. */
    mbar_arrive(&q_empty[qb]);
    /* Then P V of the last key tile, alone; the output. */
    const int ls = (kv - 1) % STAGES;
    turn_wait();
    mbar_wait(&v_full[ls], ((kv - 1) / STAGES) & 1);
    wgmma_fence();
    fa3_fp8_issue_pv<HD, BN, E5M2>(o, pa, sV + ls * K::BOXV, ti.n_end - ti.n_begin > 1);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    wgmma_fence_frags(pa);
    mbar_arrive(&v_empty[ls]);
    fa3_fp8_epilogue<Tr, HD, WGS, BN, FLAGS>(A, me, k, total, hb_count, o, r.sum, r.max, vd);
    ++qn;
  }
  if (c == 0 && turned) turn_wait();
}

#endif /* FA_CUDA_FA3_FP8_KERNEL_CUH */
