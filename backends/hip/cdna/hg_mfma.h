/*
 * hg_mfma.h: the generic kernels' products on AMD's matrix instructions, for the "mfma" kernels
 * (hg_fwd.h and hg_bwd.h with MFMA = 1): the forward's S = Q·Kᵀ and O += P·V, the backward's
 * Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q and dQ = dS·K, each cut into 16x16 output
 * tiles (cdna/hg_mfma_layout.h) spread over the block's waves, with operands read from the tiles
 * in shared memory.
 *
 * The instruction, by the target being compiled (HG_MI): CDNA's wave64 MFMA
 * v_mfma_f32_16x16x16f16 / v_mfma_f32_16x16x16bf16_1k (gfx90a, gfx940), or RDNA3's wave32 WMMA
 * v_wmma_f32_16x16x16_f16 / _bf16 (gfx1100, built with -nogpulib: rdna/hg_nogpulib.h); compiler
 * builtins. Under nvcc (the hip-generic-on-cuda test plugin) the documented semantics of MFMA are
 * emulated (cdna/hg_mfma_emu.h), so that everything around it (operand fetches, tile spreading,
 * the softmax between the products, the epilogues) runs on an NVIDIA GPU; the instructions
 * themselves are not run by the test suite, which has no AMD GPU.
 */
#ifndef FA_HIP_HG_MFMA_H
#define FA_HIP_HG_MFMA_H

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/generic/hg_args.h"
#include "backends/hip/portable/fa_gpu_portable.h"

#if defined(__HIPCC__)
#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx940__))
#define HG_HAVE_MFMA 1
#elif defined(__HIP_DEVICE_COMPILE__) && defined(__gfx1100__)
#define HG_HAVE_WMMA 1
#endif
#endif

/* The kind of matrix instruction of the target being compiled (the host pass: MFMA's, unused). */
#if defined(HG_HAVE_WMMA)
#define HG_MI HG_MI_WMMA
#else
#define HG_MI HG_MI_MFMA
#endif

#if defined(__HIPCC__)
typedef float hg_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 hg_f16x4 __attribute__((ext_vector_type(4)));
typedef short hg_i16x4 __attribute__((ext_vector_type(4)));
typedef float hg_f32x8 __attribute__((ext_vector_type(8)));
typedef _Float16 hg_f16x16 __attribute__((ext_vector_type(16)));
typedef short hg_i16x16 __attribute__((ext_vector_type(16)));

/* acc (C in, D out; the layout's HG_MI_OUT_ITEMS items) += A·B of one 16-deep step, from the
   lane's HG_MI_IN_ITEMS operands of each. */
template <int BF16>
FA_GPU_DEVICE void hg_mfma_step(float *acc, const uint16_t *av, const uint16_t *bv) {
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
#elif defined(HG_HAVE_WMMA)
  hg_f32x8 c;
#pragma unroll
  for (int i = 0; i < 8; ++i) c[i] = acc[i];
  if (BF16) {
    hg_i16x16 x, y;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      x[i] = (short)av[i];
      y[i] = (short)bv[i];
    }
    c = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(x, y, c);
  } else {
    hg_f16x16 x, y;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      x[i] = __builtin_bit_cast(_Float16, av[i]);
      y[i] = __builtin_bit_cast(_Float16, bv[i]);
    }
    c = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(x, y, c);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = c[i];
#else
  /* A target without either (the host pass, or an architecture added to FA_HIP_ARCHS without
     them): the plugin never selects these kernels there (hip_arch_has_mfma, hip_arch_has_wmma). */
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
FA_GPU_DEVICE void hg_mfma_tile(float *acc, const uint16_t *a, const uint16_t *b, hg_mm mm, int r0,
                                int c0) {
  const int lane = fa_gpu_tid() % HG_MI_LANES(HG_MI);
  for (int k0 = 0; k0 < mm.depth; k0 += HG_MFMA_DIM) {
    uint16_t av[HG_MI_IN_ITEMS(HG_MI)], bv[HG_MI_IN_ITEMS(HG_MI)];
    hg_mfma_fetch(HG_MI, a, b, mm, r0, c0, k0, lane, av, bv);
    hg_mfma_step<BF16>(acc, av, bv);
  }
}

/* out[r * ldo + c] = (A·B)(r, c) for an R x C product; tile t is computed by wave
   (t + first) % waves, so that two products with few tiles each run on different waves. */
template <int BF16, int R, int C>
FA_GPU_DEVICE void hg_mfma_store(float *out, int ldo, const uint16_t *a, const uint16_t *b,
                                 hg_mm mm, int first) {
  static_assert(R % 16 == 0 && C % 16 == 0, "16x16 output tiles");
  constexpr int W = HG_MI_WAVES(HG_MI), N = HG_MI_OUT_ITEMS(HG_MI);
  const int wave = fa_gpu_tid() / HG_MI_LANES(HG_MI), lane = fa_gpu_tid() % HG_MI_LANES(HG_MI);
  for (int t = (wave + W - first) % W; t < (R / 16) * (C / 16); t += W) {
    const int r0 = hg_mfma_tile_r0(t, C), c0 = hg_mfma_tile_c0(t, C);
    float acc[N];
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] = 0.0f;
    hg_mfma_tile<BF16>(acc, a, b, mm, r0, c0);
#pragma unroll
    for (int e = 0; e < N; ++e)
      out[(r0 + hg_mfma_out_row(HG_MI, lane, e)) * ldo + c0 + hg_mfma_out_col(lane)] = acc[e];
  }
}

/* acc[HG_MFMA_ACC_REGS(R, C)] += A·B for an R x C product kept in registers (the layout of
   hg_mfma_acc_row / hg_mfma_acc_col). */
template <int BF16, int R, int C>
FA_GPU_DEVICE void hg_mfma_accumulate(float *acc, const uint16_t *a, const uint16_t *b, hg_mm mm) {
  constexpr int W = HG_MI_WAVES(HG_MI), N = HG_MI_OUT_ITEMS(HG_MI);
  static_assert(R % 16 == 0 && C % 16 == 0 && (R / 16) * (C / 16) % W == 0,
                "whole 16x16 tiles, the same number on every wave");
  const int wave = fa_gpu_tid() / HG_MI_LANES(HG_MI);
#pragma unroll
  for (int s = 0; s < HG_MFMA_ACC_REGS(R, C) / N; ++s) {
    const int t = wave + W * s;
    hg_mfma_tile<BF16>(acc + N * s, a, b, mm, hg_mfma_tile_r0(t, C), hg_mfma_tile_c0(t, C));
  }
}

#endif /* FA_HIP_HG_MFMA_H */
