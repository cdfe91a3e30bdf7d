/*
 * hg_mfma_layout.h: where the operands and results of AMD's 16x16x16 matrix instructions live,
 * and how the kernels' products are cut into such tiles, for the two kinds (mi):
 *   HG_MI_MFMA  CDNA's wave64 MFMA (v_mfma_f32_16x16x16f16, v_mfma_f32_16x16x16bf16_1k on
 *               gfx90a, v_mfma_f32_16x16x16_bf16 on gfx940): 4 waves of 64 lanes per block;
 *   HG_MI_WMMA  RDNA3's wave32 WMMA (v_wmma_f32_16x16x16_{f16,bf16}, gfx1100): 8 waves of 32.
 * Plain C (FA_HOST_DEVICE), so the kernels (cdna/hg_mfma.h), the nvcc emulation of MFMA
 * (cdna/hg_mfma_emu.h) and the host model that checks the mapping without AMD hardware
 * (tests/hip/test_hip_mfma_model.c) use the very same index functions.
 *
 * The documented layouts, for D = A·B + C with A 16x16 (rows i, depth k), B 16x16 (depth k,
 * columns j), fp32 C/D:
 *   MFMA (AMD's CDNA ISA guides, matrix instruction calculator): A(i, k) is item k % 4 of lane
 *     i + 16 (k / 4); B(k, j) item k % 4 of lane j + 16 (k / 4); C/D(i, j) item i % 4 of lane
 *     j + 16 (i / 4).
 *   WMMA (RDNA3 ISA guide; GPUOpen's WMMA-on-RDNA3 article): A(i, k) is item k of lanes i and
 *     i + 16 (both halves of the wave hold the same operands); B(k, j) item k of lanes j and
 *     j + 16; C/D(i, j) item i / 2 of lane j + 16 (i % 2).
 * These layouts are taken from the documentation; the test suite, which has no AMD GPU, does not
 * observe them.
 */
#ifndef FA_HIP_HG_MFMA_LAYOUT_H
#define FA_HIP_HG_MFMA_LAYOUT_H

#include <stdint.h>

#include "core/math/host_device.h"

#define HG_MI_MFMA 0
#define HG_MI_WMMA 1
#define HG_MFMA_LANES 64 /* a wave64 wavefront (MFMA) */
#define HG_MFMA_WAVES 4  /* HG_THREADS / 64 */
#define HG_MFMA_DIM 16   /* M = N = K of the instruction */
/* Static shared memory of the instruction's nvcc emulation (cdna/hg_mfma_emu.h): each lane's
   four A and four B operands of 16 bits. */
#define HG_MFMA_EMU_SMEM (2 * HG_MFMA_WAVES * HG_MFMA_LANES * 4 * 2)

/* Per kind: lanes per wave, waves per 256-thread block, operand and result items per lane (as
   macros too, for array sizes and static assertions). */
#define HG_MI_LANES(mi) ((mi) == HG_MI_WMMA ? 32 : 64)
#define HG_MI_WAVES(mi) (256 / HG_MI_LANES(mi))
#define HG_MI_IN_ITEMS(mi) ((mi) == HG_MI_WMMA ? 16 : 4)
#define HG_MI_OUT_ITEMS(mi) ((mi) == HG_MI_WMMA ? 8 : 4)
FA_HOST_DEVICE int hg_mi_lanes(int mi) { return HG_MI_LANES(mi); }
FA_HOST_DEVICE int hg_mi_waves(int mi) { return HG_MI_WAVES(mi); }
FA_HOST_DEVICE int hg_mi_in_items(int mi) { return HG_MI_IN_ITEMS(mi); }
FA_HOST_DEVICE int hg_mi_out_items(int mi) { return HG_MI_OUT_ITEMS(mi); }

/* The operands a lane supplies: row (of A) and column (of B) rc, depth k of its item e. */
FA_HOST_DEVICE int hg_mfma_in_rc(int lane) { return lane % 16; }
FA_HOST_DEVICE int hg_mfma_in_k(int mi, int lane, int e) {
  return mi == HG_MI_WMMA ? e : 4 * (lane / 16) + e;
}
/* The result item e of a lane: D(out_row, out_col). */
FA_HOST_DEVICE int hg_mfma_out_row(int mi, int lane, int e) {
  return mi == HG_MI_WMMA ? 2 * e + lane / 16 : 4 * (lane / 16) + e;
}
FA_HOST_DEVICE int hg_mfma_out_col(int lane) { return lane % 16; }
/* The inverse of MFMA's operand mapping (the emulation reads A(i, k) and B(k, j) with it). */
FA_HOST_DEVICE int hg_mfma_src_lane(int rc, int k) { return rc + 16 * (k / 4); }
FA_HOST_DEVICE int hg_mfma_src_item(int k) { return k % 4; }

/* A product's operands in shared memory, in elements: A(r, k) = a[r * a_r + k * a_k] and
   B(k, c) = b[k * b_k + c * b_c] for k < depth; depth past the end (head dims are multiples of 8,
   the instruction's depth is 16) and B's columns c >= cols read as zero. */
typedef struct hg_mm {
  int a_r, a_k, b_k, b_c, depth, cols;
} hg_mm;

/* X·Yᵀ over the head dim d, X [.][d] and Y [n][d] row-major: the forward's S = Q·Kᵀ, the
   backward's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ. */
FA_HOST_DEVICE hg_mm hg_mm_abt(int d, int n) {
  hg_mm m = {d, 1, 1, d, d, n};
  return m;
}
/* X·Y, X [.][n] and Y [n][d] row-major: the forward's P·V (n keys), the backward's Pᵀ·dO and
   dSᵀ·Q (X = Pᵀ, dSᵀ kept key-major, n queries). */
FA_HOST_DEVICE hg_mm hg_mm_ab(int d, int n) {
  hg_mm m = {n, 1, d, 1, n, d};
  return m;
}
/* Xᵀ·Y, X [n][m] and Y [n][d] row-major: the backward's dQ = dS·K from dSᵀ [n keys][m queries]. */
FA_HOST_DEVICE hg_mm hg_mm_atb(int d, int m, int n) {
  hg_mm r = {1, m, d, 1, n, d};
  return r;
}

/* Lane `lane`'s operands (hg_mi_in_items(mi) of each) for the depth step k0 of the 16x16 output
   tile at (r0, c0). */
FA_HOST_DEVICE void hg_mfma_fetch(int mi, const uint16_t *a, const uint16_t *b, hg_mm mm, int r0,
                                  int c0, int k0, int lane, uint16_t *av, uint16_t *bv) {
  const int rc = hg_mfma_in_rc(lane);
  for (int e = 0; e < hg_mi_in_items(mi); ++e) {
    const int k = k0 + hg_mfma_in_k(mi, lane, e);
    av[e] = k < mm.depth ? a[(r0 + rc) * mm.a_r + k * mm.a_k] : (uint16_t)0;
    bv[e] = k < mm.depth && c0 + rc < mm.cols ? b[k * mm.b_k + (c0 + rc) * mm.b_c] : (uint16_t)0;
  }
}

/* Output tile t of a product with `cols` columns (a multiple of 16), row-major over tiles. */
FA_HOST_DEVICE int hg_mfma_tile_r0(int t, int cols) { return 16 * (t / (cols / 16)); }
FA_HOST_DEVICE int hg_mfma_tile_c0(int t, int cols) { return 16 * (t % (cols / 16)); }

/* A product kept in registers (O, dK, dV, dQ): wave w of W owns tiles w, w + W, ...; its slot s
   is tile w + W s, and register n s + e of a lane (n = hg_mi_out_items) holds the element at
   (acc_row, acc_col). A thread holds rows x cols / 256 of them with either kind. */
#define HG_MFMA_ACC_REGS(rows, cols) ((rows) * (cols) / 256)
FA_HOST_DEVICE int hg_mfma_acc_row(int mi, int reg, int wave, int lane, int cols) {
  const int n = hg_mi_out_items(mi);
  return hg_mfma_tile_r0(wave + hg_mi_waves(mi) * (reg / n), cols) +
         hg_mfma_out_row(mi, lane, reg % n);
}
FA_HOST_DEVICE int hg_mfma_acc_col(int mi, int reg, int wave, int lane, int cols) {
  const int n = hg_mi_out_items(mi);
  return hg_mfma_tile_c0(wave + hg_mi_waves(mi) * (reg / n), cols) + hg_mfma_out_col(lane);
}

#endif /* FA_HIP_HG_MFMA_LAYOUT_H */
