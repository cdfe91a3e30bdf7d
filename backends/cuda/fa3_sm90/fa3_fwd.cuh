/*
 * fa3_fwd.cuh: the FlashAttention-3 forward kernel (Hopper, sm_90a), first version.
 *
 * One block per (128 query rows, query head, batch), three warpgroups:
 *   producer (warpgroup 0, one thread; registers given back with setmaxnreg): Q once, then K and
 *     V tiles of 128 keys by TMA (4-D tensor maps: head dim, row, head, batch; rows past the
 *     sequence read as zeros) into a two-stage ring; each stage's K and V complete on their own
 *     mbarrier ("full"), and a stage is refilled once both consumers have released it ("empty").
 *   two consumers (warpgroups 1 and 2, 64 query rows each; registers taken with setmaxnreg):
 *     S = Q Kᵀ by wgmma from shared memory, online softmax in registers (core/ mask and softmax
 *     rules, exp2 with log2-scaled scores), O += P V by wgmma with P from registers, where the
 *     S accumulator's layout is the A operand's; at the end O / l and the LSE.
 * Not yet (issue 5): ping-pong between the consumers, the softmax of tile j overlapped with
 * Q Kᵀ of tile j + 1, an epilogue through shared memory and TMA, GQA packing, fully masked tile
 * skipping beyond the block's key range, head dims other than 64 and 128, fp8.
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

template <typename Tr, int HD>
__global__ void __launch_bounds__(384, 1) fa3_fwd_kernel(const __grid_constant__ fa3_fwd_args A) {
  constexpr int BM = FA3_FWD_TILE_M, BN = FA3_FWD_TILE_N, CB = HD / 64; /* 64-column boxes */
  constexpr bool F16 = Tr::is_f16;
  constexpr int BOXQ = BM * 128, BOXK = BN * 128; /* bytes of one 64-column box */
  const fa2_fwd_args &a = A.a;

  extern __shared__ unsigned char smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: boxes start on such a boundary. */
  unsigned char *sQ = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sK = sQ + CB * BOXQ; /* stage s at s * CB * BOXK */
  unsigned char *sV = sK + 2 * CB * BOXK;
  __shared__ uint64_t q_full, k_full[2], v_full[2], kv_empty[2];

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
    for (int s = 0; s < 2; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&kv_empty[s], 256); /* every consumer thread releases */
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (tid == 0) {
      mbar_arrive_expect_tx(&q_full, CB * BOXQ);
      for (int cb = 0; cb < CB; ++cb) tma_load_4d(sQ + cb * BOXQ, A.tq, &q_full, cb * 64, m0, h, b);
      for (int n = n_begin, it = 0; n < n_end; ++n, ++it) {
        const int s = it & 1;
        if (it >= 2) mbar_wait(&kv_empty[s], ((it >> 1) - 1) & 1);
        mbar_arrive_expect_tx(&k_full[s], CB * BOXK);
        for (int cb = 0; cb < CB; ++cb)
          tma_load_4d(sK + (s * CB + cb) * BOXK, A.tk, &k_full[s], cb * 64, n * BN, hk, b);
        mbar_arrive_expect_tx(&v_full[s], CB * BOXK);
        for (int cb = 0; cb < CB; ++cb)
          tma_load_4d(sV + (s * CB + cb) * BOXK, A.tv, &v_full[s], cb * 64, n * BN, hk, b);
      }
    }
    return;
  }
  setmaxnreg_inc<232>();

  /* Consumer c: rows m0 + 64 c + [0, 64); this thread's two rows r = 0, 1 (8 apart). */
  const int c = wg - 1, ctid = tid - 128 * wg, warp = ctid / 32, lane = ctid % 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = m0 + 64 * c + 16 * warp + g;
  int row_lo[2], row_hi[2];
  for (int r = 0; r < 2; ++r) {
    int64_t lo, hi;
    fa_mask_key_range(&mask, row0 + 8 * r, seqlen_k, &lo, &hi);
    row_lo[r] = (int)lo;
    row_hi[r] = (int)hi;
  }
  const bool capped = a.p.softcap > 0.0f;
  const float sl2 = capped ? FA2_LOG2E : a.p.scale * FA2_LOG2E;

  float o[HD / 2], s[BN / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  mbar_wait(&q_full, 0);
  for (int n = n_begin, it = 0; n < n_end; ++n, ++it) {
    const int st = it & 1, ph = (it >> 1) & 1;
    const int c0 = n * BN;
    unsigned char *tK = sK + st * CB * BOXK, *tV = sV + st * CB * BOXK;

    /* S = Q Kᵀ: k-step ks is 16 columns, 32 bytes into box ks / 4. */
    mbar_wait(&k_full[st], ph);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      const int off = (ks % 4) * 32;
      wgmma_m64n128k16_ss<0, F16>(
          s, wgmma_desc_sw128(sQ + (ks / 4) * BOXQ + c * 64 * 128 + off, 16, 1024),
          wgmma_desc_sw128(tK + (ks / 4) * BOXK + off, 16, 1024), ks > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(s);

    fa_tile_class cls = fa_mask_tile_class_from_ranges(lo_first, hi_first, lo_last, hi_last, c0,
                                                       min(c0 + BN, seqlen_k));
    if (cls == FA_TILE_FULL && c0 + BN > seqlen_k) cls = FA_TILE_PARTIAL;
    if (capped) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = fa_score_softcap(s[i] * a.p.scale, a.p.softcap);
    }
    if (cls != FA_TILE_FULL) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = c0 + 8 * j + 2 * t + (i & 1), r = i >> 1;
          if (key < row_lo[r] || key >= row_hi[r]) s[4 * j + i] = -INFINITY;
        }
    }
    /* Online softmax, per row (a row's pieces sit in the 4 threads of a quad). */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
        mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = fa_softmax_safe_max(mx) * sl2;
      const float alpha = row_max[r] == -INFINITY ? 0.0f : fast_exp2(row_max[r] * sl2 - ms);
      row_max[r] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = fast_exp2(s[4 * j + 2 * r + e] * sl2 - ms);
          s[4 * j + 2 * r + e] = p;
          sum += p;
        }
      row_sum[r] = row_sum[r] * alpha + sum;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) {
        o[4 * j + 2 * r] *= alpha;
        o[4 * j + 2 * r + 1] *= alpha;
      }
    }
    /* P as the A operand: the accumulator of keys 16 kk.. is kk's A fragment. */
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Tr::pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = Tr::pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = Tr::pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = Tr::pack(s[8 * kk + 6], s[8 * kk + 7]);
    }

    /* O += P V: V MN-major, k-step kk is 16 keys (2048 bytes) on; 64-column boxes BOXK apart. */
    mbar_wait(&v_full[st], ph);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      if constexpr (HD == 128)
        wgmma_m64n128k16_rs<1, F16>(o, pa[kk], wgmma_desc_sw128(tV + kk * 2048, BOXK, 1024), 1);
      else
        wgmma_m64n64k16_rs<1, F16>(o, pa[kk], wgmma_desc_sw128(tV + kk * 2048, BOXK, 1024), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    mbar_arrive(&kv_empty[st]);
  }

  /* Epilogue: O / l straight from the accumulators (4-byte stores), the LSE in natural log. */
  typedef typename Tr::elem E;
  E *out = static_cast<E *>(a.out) + b * a.o_str.batch + h * a.o_str.head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = fa_softmax_out_scale(l);
    const int i = row0 + 8 * r;
    if (i >= seqlen_q) continue;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<uint32_t *>(out + (int64_t)i * a.o_str.row + 8 * j + 2 * t) =
          Tr::pack(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    if (a.lse && t == 0)
      a.lse[b * a.lse_str.batch + h * a.lse_str.head + (int64_t)i * a.lse_str.row] =
          l > 0.0f ? row_max[r] * sl2 * FA2_LN2 + logf(l) : -INFINITY;
  }
}

#endif /* FA_CUDA_FA3_FWD_CUH */
