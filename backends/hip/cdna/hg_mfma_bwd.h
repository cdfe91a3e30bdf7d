/*
 * hg_mfma_bwd.h: the MFMA backward's own steps (hg_bwd.h with MFMA = 1): dV += Pᵀ·dO,
 * dK += dSᵀ·Q and dQ += scale·dS·K on the matrix instructions, and the store of dK and dV from
 * the waves' registers. dk[] and dv[] of a thread hold HG_MFMA_ACC_REGS(BN, HC) elements of the
 * block's [BN][HC] gradients at the places hg_mfma_acc_row / hg_mfma_acc_col give.
 */
#ifndef FA_HIP_HG_MFMA_BWD_H
#define FA_HIP_HG_MFMA_BWD_H

#include "backends/hip/cdna/hg_mfma.h"
#include "backends/hip/generic/hg_common.h"

/* One step of BM query rows from m0: the key tile's dV and dK, and the step's dQ into the fp32
   accumulator (each element by one lane, so a block's additions keep their order). pt, dst:
   Pᵀ and dSᵀ [BN][BM] in the storage type; sq, sdo [BM][d]; sk [BN][d]. */
template <int BF16, int HC, int BN, int BM>
FA_GPU_DEVICE void hg_bwd_mfma_products(float *dk, float *dv, const uint16_t *pt,
                                        const uint16_t *dst, const uint16_t *sq,
                                        const uint16_t *sdo, const uint16_t *sk, const hg_params &p,
                                        int64_t head_rows, int64_t m0) {
  const int d = p.head_dim;
  const int wave = fa_gpu_tid() / HG_MI_LANES(HG_MI), lane = fa_gpu_tid() % HG_MI_LANES(HG_MI);
  hg_mfma_accumulate<BF16, BN, HC>(dv, pt, sdo, hg_mm_ab(d, BM));
  hg_mfma_accumulate<BF16, BN, HC>(dk, dst, sq, hg_mm_ab(d, BM));
  float dq[HG_MFMA_ACC_REGS(BM, HC)];
#pragma unroll
  for (int r = 0; r < HG_MFMA_ACC_REGS(BM, HC); ++r) dq[r] = 0.0f;
  hg_mfma_accumulate<BF16, BM, HC>(dq, dst, sk, hg_mm_atb(d, BM, BN));
#pragma unroll
  for (int r = 0; r < HG_MFMA_ACC_REGS(BM, HC); ++r) {
    const int64_t gi = m0 + hg_mfma_acc_row(HG_MI, r, wave, lane, HC);
    const int c = hg_mfma_acc_col(HG_MI, r, wave, lane, HC);
    if (gi < p.seqlen_q && c < d && dq[r] != 0.0f)
      fa_gpu_atomic_add(p.dq_accum + (head_rows + gi) * d + c, dq[r] * p.scale);
  }
}

/* dK (scaled) and dV of the key tile from c0 into their tensors. */
template <int BF16, int HC, int BN>
FA_GPU_DEVICE void hg_bwd_mfma_store_kv(const float *dk, const float *dv, const hg_params &p, int b,
                                        int64_t c0, int hk) {
  const int wave = fa_gpu_tid() / HG_MI_LANES(HG_MI), lane = fa_gpu_tid() % HG_MI_LANES(HG_MI);
#pragma unroll
  for (int r = 0; r < HG_MFMA_ACC_REGS(BN, HC); ++r) {
    const int64_t gj = c0 + hg_mfma_acc_row(HG_MI, r, wave, lane, HC);
    const int c = hg_mfma_acc_col(HG_MI, r, wave, lane, HC);
    if (gj < p.seqlen_k && c < p.head_dim) {
      hg_put<BF16>(p.dk, b, gj, hk, c, dk[r] * p.scale);
      hg_put<BF16>(p.dv, b, gj, hk, c, dv[r]);
    }
  }
}

#endif /* FA_HIP_HG_MFMA_BWD_H */
