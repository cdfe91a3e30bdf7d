/*
 * hg_common.h: what the generic kernels share: element addressing of the argument block's
 * tensors, the mask of core/math/mask.h rebuilt from its resolved fields, and the log2 constants of
 * the exp2-based softmax (scores are kept in log2 units: exp(x) = exp2(x * log2 e)).
 */
#ifndef FA_HIP_HG_COMMON_H
#define FA_HIP_HG_COMMON_H

#include "backends/hip/generic/hg_args.h"
#include "backends/hip/portable/fa_gpu_portable.h"
#include "core/math/backward.h"
#include "core/math/mask.h"
#include "core/math/score.h"
#include "core/math/softmax.h"

#define HG_LOG2E 1.4426950408889634f
#define HG_LN2 0.6931471805599453f

FA_GPU_DEVICE int64_t hg_off(const hg_tensor &t, int b, int64_t row, int h, int c) {
  return (int64_t)b * t.batch + row * t.row + (int64_t)h * t.head + (int64_t)c * t.col;
}

template <int BF16>
FA_GPU_DEVICE float hg_get(const hg_tensor &t, int b, int64_t row, int h, int c) {
  return fa_gpu_load<BF16>((const uint16_t *)t.data + hg_off(t, b, row, h, c));
}

template <int BF16>
FA_GPU_DEVICE void hg_put(const hg_tensor &t, int b, int64_t row, int h, int c, float v) {
  ((uint16_t *)t.data)[hg_off(t, b, row, h, c)] = fa_gpu_to_storage<BF16>(v);
}

FA_GPU_DEVICE fa_mask hg_mask(const hg_params &p) {
  fa_mask m;
  m.shift = p.mask_shift;
  m.left = p.mask_left;
  m.right = p.mask_right;
  return m;
}

/* The transformed score in log2 units for a visible key (core/math/score.h: scale, then softcap).
 */
FA_GPU_DEVICE float hg_score_log2(float raw, const hg_params &p) {
  return fa_score_softcap(raw * p.scale, p.softcap) * HG_LOG2E;
}

/* Copies rows [r0, r0 + rows) of head h of t into a [rows][d] tile of 16-bit elements in shared
   memory, zeros past the last row; all threads of the block take part. */
template <int BF16>
FA_GPU_DEVICE void hg_load_tile(uint16_t *tile, const hg_tensor &t, int b, int64_t r0, int rows,
                                int64_t nrows, int h, int d) {
  for (int e = fa_gpu_tid(); e < rows * d; e += HG_THREADS) {
    const int r = e / d, c = e - r * d;
    const int64_t gr = r0 + r;
    tile[e] = gr < nrows ? ((const uint16_t *)t.data)[hg_off(t, b, gr, h, c)] : (uint16_t)0;
  }
}

#endif /* FA_HIP_HG_COMMON_H */
