/*
 * hg_mfma.h: the generic kernels' products on CDNA's wave64 matrix instructions, for the "mfma"
 * kernels (hg_fwd.h and hg_bwd.h with MFMA = 1): the forward's S = Q·Kᵀ and O += P·V, the
 * backward's Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q and dQ = dS·K, each cut into
 * 16x16 output tiles (cdna/hg_mfma_layout.h) spread over the block's four wavefronts, with
 * operands read from the tiles in shared memory.
 *
 * The instruction: v_mfma_f32_16x16x16f16 / v_mfma_f32_16x16x16bf16_1k (gfx90a, gfx940; compiler
 * builtins). Under nvcc (the hip-generic-on-cuda test plugin) the documented semantics of the
 * same instruction are emulated (cdna/hg_mfma_emu.h), so that everything around it (operand
 * fetches, tile spreading, the softmax between the products, the epilogues) runs on an NVIDIA
 * GPU; the instruction itself has run nowhere (no AMD GPU here).
 */
#ifndef FA_HIP_HG_MFMA_H
#define FA_HIP_HG_MFMA_H

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/generic/hg_args.h"
#include "backends/hip/portable/fa_gpu_portable.h"

#if defined(__HIPCC__)
typedef float hg_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 hg_f16x4 __attribute__((ext_vector_type(4)));
typedef short hg_i16x4 __attribute__((ext_vector_type(4)));

#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx940__))
#define HG_HAVE_MFMA 1
#endif

/* acc (C in, D out; the layout's items 0..3) += A·B of one 16-deep step. */
template <int BF16>
FA_GPU_DEVICE void hg_mfma_step(float acc[4], const uint16_t av[4], const uint16_t bv[4]) {
#if defined(HG_HAVE_MFMA)
  hg_f32x4 c = {acc[0], acc[1], acc[2], acc[3]};
  if (BF16) {
    hg_i16x4 x = {(short)av[0], (short)av[1], (short)av[2], (short)av[3]};
    hg_i16x4 y = {(short)bv[0], (short)bv[1], (short)bv[2], (short)bv[3]};
    c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(x, y, c, 0, 0, 0);
  } else {
    hg_f16x4 x, y;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[i] = __builtin_bit_cast(_Float16, av[i]);
      y[i] = __builtin_bit_cast(_Float16, bv[i]);
    }
    c = __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, c, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = c[i];
#else
  /* A target without MFMA (the host pass, or an architecture added to FA_HIP_ARCHS without
     it): the plugin never selects these kernels there (hip_arch_has_mfma). */
  (void)acc, (void)av, (void)bv;
  __builtin_trap();
#endif
}
#elif defined(__CUDACC__)
#include "backends/hip/cdna/hg_mfma_emu.h"
#endif

/* acc += the 16x16 tile at (r0, c0) of A·B, over the product's whole depth. Every lane of the
   wave takes part (the depth is uniform). */
template <int BF16>
FA_GPU_DEVICE void hg_mfma_tile(float acc[4], const uint16_t *a, const uint16_t *b, hg_mm mm,
                                int r0, int c0) {
  const int lane = fa_gpu_tid() % HG_MFMA_LANES;
  for (int k0 = 0; k0 < mm.depth; k0 += HG_MFMA_DIM) {
    uint16_t av[4], bv[4];
    hg_mfma_fetch(a, b, mm, r0, c0, k0, lane, av, bv);
    hg_mfma_step<BF16>(acc, av, bv);
  }
}

/* out[r * ldo + c] = (A·B)(r, c) for an R x C product; tile t is computed by wave (t + first) % 4,
   so that two products with fewer than four tiles each run on different waves. */
template <int BF16, int R, int C>
FA_GPU_DEVICE void hg_mfma_store(float *out, int ldo, const uint16_t *a, const uint16_t *b,
                                 hg_mm mm, int first) {
  static_assert(R % 16 == 0 && C % 16 == 0, "16x16 output tiles");
  const int wave = fa_gpu_tid() / HG_MFMA_LANES, lane = fa_gpu_tid() % HG_MFMA_LANES;
  for (int t = (wave + HG_MFMA_WAVES - first) % HG_MFMA_WAVES; t < (R / 16) * (C / 16);
       t += HG_MFMA_WAVES) {
    const int r0 = hg_mfma_tile_r0(t, C), c0 = hg_mfma_tile_c0(t, C);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    hg_mfma_tile<BF16>(acc, a, b, mm, r0, c0);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      out[(r0 + hg_mfma_out_row(lane, e)) * ldo + c0 + hg_mfma_out_col(lane)] = acc[e];
  }
}

/* acc[HG_MFMA_ACC_REGS(R, C)] += A·B for an R x C product kept in registers (the layout of
   hg_mfma_acc_row / hg_mfma_acc_col). */
template <int BF16, int R, int C>
FA_GPU_DEVICE void hg_mfma_accumulate(float *acc, const uint16_t *a, const uint16_t *b, hg_mm mm) {
  static_assert(R % 16 == 0 && C % 16 == 0 && (R / 16) * (C / 16) % HG_MFMA_WAVES == 0,
                "whole 16x16 tiles, the same number on every wave");
  const int wave = fa_gpu_tid() / HG_MFMA_LANES;
#pragma unroll
  for (int s = 0; s < HG_MFMA_ACC_REGS(R, C) / 4; ++s) {
    const int t = wave + HG_MFMA_WAVES * s;
    hg_mfma_tile<BF16>(acc + 4 * s, a, b, mm, hg_mfma_tile_r0(t, C), hg_mfma_tile_c0(t, C));
  }
}

#endif /* FA_HIP_HG_MFMA_H */
