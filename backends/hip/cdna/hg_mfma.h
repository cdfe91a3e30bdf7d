/*
 * hg_mfma.h: CDNA's matrix instructions for the forward's scores: S = Q·Kᵀ of a 32 x 32 tile by
 * the four wave64 wavefronts of a block, each one 16 x 16 quarter through
 * v_mfma_f32_16x16x16f16 / v_mfma_f32_16x16x16bf16_1k (compiler builtins), the rest of the
 * generic forward unchanged (hg_fwd.h with MFMA = 1). gfx90a (MI200) and gfx940 (MI300) have
 * both instructions; Debian's clang 15 compiles them (gfx942 it rejects).
 *
 * Operand layout of the 16x16x16 instructions (wave64): lane l supplies row l % 16 of A and
 * column l % 16 of B, four consecutive k values starting at 4 * (l / 16) of the 16-wide k step;
 * the four results lane l holds are D[4 * (l / 16) + i][l % 16], i = 0..3.
 *
 * Compiled for the AMD targets only; never executed here (no AMD GPU), see the README.
 */
#ifndef FA_HIP_HG_MFMA_H
#define FA_HIP_HG_MFMA_H

#include "backends/hip/generic/hg_args.h"
#include "backends/hip/portable/fa_gpu_portable.h"

/* Scores of a [32][ld = d] Q tile and a [32][d] K tile into ss[32][33] (raw dot products). */
#if defined(__HIPCC__)
typedef float hg_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 hg_f16x4 __attribute__((ext_vector_type(4)));
typedef short hg_i16x4 __attribute__((ext_vector_type(4)));

#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx940__))
#define HG_HAVE_MFMA 1
#endif

template <int BF16>
FA_GPU_DEVICE void hg_mfma_scores(const uint16_t *sq, const uint16_t *sk, float *ss, int d) {
#if defined(HG_HAVE_MFMA)
  static_assert(HG_THREADS == 256 && HG_FWD_TILE_M == 32 && HG_FWD_TILE_N == 32,
                "four wave64 quarters of a 32 x 32 score tile");
  const int wave = fa_gpu_tid() / 64, lane = fa_gpu_tid() % 64;
  const int row0 = (wave / 2) * 16, col0 = (wave % 2) * 16;
  const int rc = lane % 16, kg = (lane / 16) * 4;
  const uint16_t *a = sq + (row0 + rc) * d;
  const uint16_t *b = sk + (col0 + rc) * d;
  hg_f32x4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  /* head dims are multiples of 8: the last 16-wide step may run 8 past d, read as zeros */
  for (int k0 = 0; k0 < d; k0 += 16) {
    uint16_t av[4], bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = k0 + kg + i;
      av[i] = k < d ? a[k] : (uint16_t)0;
      bv[i] = k < d ? b[k] : (uint16_t)0;
    }
    if (BF16) {
      hg_i16x4 x = {(short)av[0], (short)av[1], (short)av[2], (short)av[3]};
      hg_i16x4 y = {(short)bv[0], (short)bv[1], (short)bv[2], (short)bv[3]};
      acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(x, y, acc, 0, 0, 0);
    } else {
      hg_f16x4 x, y;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[i] = __builtin_bit_cast(_Float16, av[i]);
        y[i] = __builtin_bit_cast(_Float16, bv[i]);
      }
      acc = __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, acc, 0, 0, 0);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) ss[(row0 + kg + i) * (HG_FWD_TILE_N + 1) + col0 + rc] = acc[i];
#else
  /* A target without MFMA (the host pass, or an architecture added to FA_HIP_ARCHS without
     it): the plugin never selects these kernels there (hip_arch_has_mfma). */
  (void)sq, (void)sk, (void)ss, (void)d;
  __builtin_trap();
#endif
}
#else
/* nvcc: the generic forward's MFMA branch is never instantiated (hg_kernels.cu defines no MFMA
   kernel for CUDA); this declaration only lets hg_fwd.h name it. */
template <int BF16>
FA_GPU_DEVICE void hg_mfma_scores(const uint16_t *sq, const uint16_t *sk, float *ss, int d);
#endif

#endif /* FA_HIP_HG_MFMA_H */
