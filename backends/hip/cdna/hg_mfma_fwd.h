/*
 * hg_mfma_fwd.h: the MFMA forward's own steps (hg_fwd.h with MFMA = 1): O += P·V on the matrix
 * instructions, and the epilogue of output tiles held in the waves' registers. The register o[]
 * of a thread holds HG_MFMA_ACC_REGS(HG_FWD_TILE_M, HC) elements of the block's [BM][HC] output
 * at the places hg_mfma_acc_row / hg_mfma_acc_col give, rows of several queries: so a row's
 * rescale factor and final 1/l come from shared memory (srow), where the row's softmax threads
 * left them.
 */
#ifndef FA_HIP_HG_MFMA_FWD_H
#define FA_HIP_HG_MFMA_FWD_H

#include "backends/hip/cdna/hg_mfma.h"
#include "backends/hip/generic/hg_common.h"

/* o = o * alpha(row) + P·V for the step's probabilities sp [BM][BN] and values sv [BN][d]. */
template <int BF16, int HC, int BN>
FA_GPU_DEVICE void hg_fwd_mfma_pv(float *o, const uint16_t *sp, const uint16_t *sv,
                                  const float *alpha, int d) {
  constexpr int BM = HG_FWD_TILE_M;
  const int wave = fa_gpu_tid() / HG_MI_LANES(HG_MI), lane = fa_gpu_tid() % HG_MI_LANES(HG_MI);
#pragma unroll
  for (int r = 0; r < HG_MFMA_ACC_REGS(BM, HC); ++r)
    o[r] *= alpha[hg_mfma_acc_row(HG_MI, r, wave, lane, HC)];
  hg_mfma_accumulate<BF16, BM, HC>(o, sp, sv, hg_mm_ab(d, BN));
}

/* out = o / l for the block's rows r0.. (inv: each row's 1/l, 0 for a row that saw no key). */
template <int BF16, int HC>
FA_GPU_DEVICE void hg_fwd_mfma_store(const float *o, const float *inv, const hg_params &p, int b,
                                     int64_t r0, int hq) {
  constexpr int BM = HG_FWD_TILE_M;
  const int wave = fa_gpu_tid() / HG_MI_LANES(HG_MI), lane = fa_gpu_tid() % HG_MI_LANES(HG_MI);
#pragma unroll
  for (int r = 0; r < HG_MFMA_ACC_REGS(BM, HC); ++r) {
    const int row = hg_mfma_acc_row(HG_MI, r, wave, lane, HC),
              c = hg_mfma_acc_col(HG_MI, r, wave, lane, HC);
    if (r0 + row < p.seqlen_q && c < p.head_dim)
      hg_put<BF16>(p.out, b, r0 + row, hq, c, o[r] * inv[row]);
  }
}

#endif /* FA_HIP_HG_MFMA_FWD_H */
