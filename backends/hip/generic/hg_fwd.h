/*
 * hg_fwd.h: the generic forward (FlashAttention-2 structure, no matrix instructions). A block
 * owns HG_FWD_TILE_M query rows of one head; K and V stream through shared memory in tiles of
 * BN keys (HG_FWD_TILE_N or HG_FWD_TILE_N_MAX, from core/plan: hg_host.c) over the key range
 * core/math/mask.h gives the block's first and last rows; each row keeps its running max and sum
 * (online softmax in log2 units, exp2) and its output in registers, split over HG_FWD_TPR threads
 * that exchange probabilities by shuffles. The output is normalised once at the end and the LSE
 * written in natural log. MFMA = 1 (cdna/hg_mfma.h): the two products run on CDNA's matrix
 * instructions instead. The scores go through a [BM][BN + 1] fp32 tile in shared memory to the same
 * per-row softmax; its probabilities (in the storage type, as FlashAttention rounds P for its P·V)
 * and each row's rescale factor go back through shared memory to the waves, whose output tiles (the
 * layout of cdna/hg_mfma_layout.h) replace o[] one for one; the epilogue reads each row's 1/l from
 * there.
 */
#ifndef FA_HIP_HG_FWD_H
#define FA_HIP_HG_FWD_H

#include "backends/hip/cdna/hg_mfma_fwd.h"
#include "backends/hip/generic/hg_common.h"

/* The generic O = O * alpha + P·V of a thread's row: key jl's probability lives in lane jl % TPR
   of the row's group, slot jl / TPR; the thread's columns are sub, sub + TPR, ... */
template <int BF16, int HC, int BN>
FA_GPU_DEVICE void hg_fwd_pv(float *o, const float *s, float alpha, const uint16_t *sv, int sub,
                             int d) {
  constexpr int TPR = HG_FWD_TPR, CPT = HC / TPR;
#pragma unroll
  for (int j = 0; j < CPT; ++j) o[j] *= alpha;
#pragma unroll
  for (int jl = 0; jl < BN; ++jl) {
    const float pj = fa_gpu_shfl(s[jl / TPR], jl % TPR, TPR);
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int c = sub + TPR * j;
      if (c < d) o[j] += pj * fa_gpu_load<BF16>(sv + jl * d + c);
    }
  }
}

template <int BF16, int HC, int MFMA, int BN>
FA_GPU_DEVICE void hg_fwd(const hg_params &p) {
  constexpr int BM = HG_FWD_TILE_M, TPR = HG_FWD_TPR;
  constexpr int KPT = BN / TPR; /* keys per thread and step */
  constexpr int CPT = HC / TPR; /* output columns per thread: sub, sub + TPR, ... */
  FA_GPU_DYNAMIC_SMEM(smem);
  const int d = p.head_dim;
  uint16_t *sq = (uint16_t *)smem;
  uint16_t *sk = sq + BM * d;
  uint16_t *sv = sk + BN * d;
  float *ss = (float *)(sv + BN * d);     /* MFMA only: [BM][BN + 1] raw scores */
  float *srow = ss + BM * (BN + 1);       /* MFMA only: a row's rescale factor, then its 1/l */
  uint16_t *sp = (uint16_t *)(srow + BM); /* MFMA only: [BM][BN] probabilities */
  const int tid = fa_gpu_tid(), row = tid / TPR, sub = tid % TPR;
  const int b = fa_gpu_block_z(), hq = fa_gpu_block_y();
  const int hk = hq / (p.heads_q / p.heads_kv);
  const int64_t r0 = (int64_t)fa_gpu_block_x() * BM;
  const int64_t r_last = (r0 + BM < p.seqlen_q ? r0 + BM : (int64_t)p.seqlen_q) - 1;
  const fa_mask m = hg_mask(p);

  hg_load_tile<BF16>(sq, p.q, b, r0, BM, p.seqlen_q, hq, d);
  const int64_t gi = r0 + row;
  int64_t lo = 0, hi = 0; /* rows past seqlen_q see no key (and are not stored) */
  if (gi < p.seqlen_q) fa_mask_key_range(&m, gi, p.seqlen_k, &lo, &hi);
  /* Both ends of a row's key range grow with the row: the first row's start and the last row's
     end bound the keys any row of the block sees. */
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&m, r0, p.seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(&m, r_last, p.seqlen_k, &lo_last, &hi_last);
  const int64_t n_begin = lo_first / BN * BN, n_end = hi_last;

  static_assert(!MFMA || CPT == HG_MFMA_ACC_REGS(BM, HC), "o[] holds the MFMA output tiles");
  float o[CPT];
#pragma unroll
  for (int j = 0; j < CPT; ++j) o[j] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f; /* l_run: this thread's share of the row sum */

  for (int64_t n0 = n_begin; n0 < n_end; n0 += BN) {
    fa_gpu_barrier(); /* the previous tile's readers are done (and Q is in on the first step) */
    hg_load_tile<BF16>(sk, p.k, b, n0, BN, p.seqlen_k, hk, d);
    hg_load_tile<BF16>(sv, p.v, b, n0, BN, p.seqlen_k, hk, d);
    fa_gpu_barrier();
    if constexpr (MFMA) {
      hg_mfma_store<BF16, BM, BN>(ss, BN + 1, sq, sk, hg_mm_abt(d, BN), 0);
      fa_gpu_barrier();
    }

    float s[KPT];
    float tile_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < KPT; ++t) {
      const int jl = sub + TPR * t;
      const int64_t j = n0 + jl;
      s[t] = -INFINITY;
      if (j >= lo && j < hi) {
        float acc = 0.0f;
        if constexpr (MFMA)
          acc = ss[row * (BN + 1) + jl];
        else
          for (int c = 0; c < d; ++c)
            acc += fa_gpu_load<BF16>(sq + row * d + c) * fa_gpu_load<BF16>(sk + jl * d + c);
        s[t] = hg_score_log2(acc, p);
      }
      tile_max = fmaxf(tile_max, s[t]);
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off /= 2)
      tile_max = fmaxf(tile_max, fa_gpu_shfl_xor(tile_max, off, TPR));
    const float m_new = fmaxf(m_run, tile_max);
    const float alpha = m_run == -INFINITY ? 0.0f : fa_gpu_exp2(m_run - m_new);
    const float m_safe = fa_softmax_safe_max(m_new);
    float p_sum = 0.0f;
#pragma unroll
    for (int t = 0; t < KPT; ++t) {
      s[t] = fa_gpu_exp2(s[t] - m_safe); /* a hidden key: exp2(-inf) = 0 */
      p_sum += s[t];
    }
    m_run = m_new;
    l_run = l_run * alpha + p_sum;
    if constexpr (MFMA) {
#pragma unroll
      for (int t = 0; t < KPT; ++t) sp[row * BN + sub + TPR * t] = fa_gpu_to_storage<BF16>(s[t]);
      if (sub == 0) srow[row] = alpha;
      fa_gpu_barrier();
      hg_fwd_mfma_pv<BF16, HC, BN>(o, sp, sv, srow, d);
    } else {
      hg_fwd_pv<BF16, HC, BN>(o, s, alpha, sv, sub, d);
    }
  }

#pragma unroll
  for (int off = TPR / 2; off > 0; off /= 2) l_run += fa_gpu_shfl_xor(l_run, off, TPR);
  const float inv = fa_softmax_out_scale(l_run); /* 0 for a row that saw no key */
  if (p.lse && sub == 0 && gi < p.seqlen_q)
    p.lse[(int64_t)b * p.lse_batch + (int64_t)hq * p.lse_head + gi * p.lse_row] =
        fa_softmax_lse(m_run * HG_LN2, l_run);
  if constexpr (MFMA) {
    fa_gpu_barrier(); /* the last step's P·V has read every row's rescale factor */
    if (sub == 0) srow[row] = inv;
    fa_gpu_barrier();
    hg_fwd_mfma_store<BF16, HC>(o, srow, p, b, r0, hq);
  } else if (gi < p.seqlen_q) {
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int c = sub + TPR * j;
      if (c < d) hg_put<BF16>(p.out, b, gi, hq, c, o[j] * inv);
    }
  }
}

#endif /* FA_HIP_HG_FWD_H */
