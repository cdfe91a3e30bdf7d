/*
 * hg_mfma_layout.h: where the operands and results of CDNA's wave64 16x16x16 MFMA instructions
 * (v_mfma_f32_16x16x16f16, v_mfma_f32_16x16x16bf16_1k on gfx90a, v_mfma_f32_16x16x16_bf16 on
 * gfx940) live, and how the kernels' products are cut into such tiles. Plain C (FA_HD), so the
 * kernels (cdna/hg_mfma.h), the nvcc emulation of the instruction (cdna/hg_mfma_emu.h) and the
 * host model that checks the mapping without AMD hardware (tests/hip/test_hip_mfma_model.c) use
 * the very same index functions.
 *
 * The instruction's documented layout (AMD's CDNA ISA guides and matrix instruction calculator),
 * for D = A·B + C with A 16x16 (rows i, depth k), B 16x16 (depth k, columns j), wave64:
 *   A(i, k) is item k % 4 of lane i + 16 * (k / 4);  B(k, j) is item k % 4 of lane j + 16 * (k /
 * 4); C/D(i, j) is item i % 4 of lane j + 16 * (i / 4). No AMD GPU exists here: that layout is
 * taken from the documentation, not observed.
 */
#ifndef FA_HIP_HG_MFMA_LAYOUT_H
#define FA_HIP_HG_MFMA_LAYOUT_H

#include <stdint.h>

#include "core/fa_hd.h"

#define HG_MFMA_LANES 64 /* a wave64 wavefront */
#define HG_MFMA_WAVES 4  /* HG_THREADS / 64 */
#define HG_MFMA_DIM 16   /* M = N = K of the instruction */
/* Static shared memory of the instruction's nvcc emulation (cdna/hg_mfma_emu.h): each lane's
   four A and four B operands of 16 bits. */
#define HG_MFMA_EMU_SMEM (2 * HG_MFMA_WAVES * HG_MFMA_LANES * 4 * 2)

/* The operands a lane supplies: row (of A) and column (of B) rc, depth k of its item e. */
FA_HD int hg_mfma_in_rc(int lane) { return lane % 16; }
FA_HD int hg_mfma_in_k(int lane, int e) { return 4 * (lane / 16) + e; }
/* The result item e of a lane: D(out_row, out_col). */
FA_HD int hg_mfma_out_row(int lane, int e) { return 4 * (lane / 16) + e; }
FA_HD int hg_mfma_out_col(int lane) { return lane % 16; }
/* The inverse of the operand mapping (the emulation reads A(i, k) and B(k, j) with it). */
FA_HD int hg_mfma_src_lane(int rc, int k) { return rc + 16 * (k / 4); }
FA_HD int hg_mfma_src_item(int k) { return k % 4; }

/* A product's operands in shared memory, in elements: A(r, k) = a[r * a_r + k * a_k] and
   B(k, c) = b[k * b_k + c * b_c] for k < depth; depth past the end (head dims are multiples of 8,
   the instruction's depth is 16) and B's columns c >= cols read as zero. */
typedef struct hg_mm {
  int a_r, a_k, b_k, b_c, depth, cols;
} hg_mm;

/* X·Yᵀ over the head dim d, X [.][d] and Y [n][d] row-major: the forward's S = Q·Kᵀ, the
   backward's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ. */
FA_HD hg_mm hg_mm_abt(int d, int n) {
  hg_mm m = {d, 1, 1, d, d, n};
  return m;
}
/* X·Y, X [.][n] and Y [n][d] row-major: the forward's P·V (n keys), the backward's Pᵀ·dO and
   dSᵀ·Q (X = Pᵀ, dSᵀ kept key-major, n queries). */
FA_HD hg_mm hg_mm_ab(int d, int n) {
  hg_mm m = {n, 1, d, 1, n, d};
  return m;
}
/* Xᵀ·Y, X [n][m] and Y [n][d] row-major: the backward's dQ = dS·K from dSᵀ [n keys][m queries]. */
FA_HD hg_mm hg_mm_atb(int d, int m, int n) {
  hg_mm r = {1, m, d, 1, n, d};
  return r;
}

/* Lane `lane`'s operands for the depth step k0 of the 16x16 output tile at (r0, c0). */
FA_HD void hg_mfma_fetch(const uint16_t *a, const uint16_t *b, hg_mm mm, int r0, int c0, int k0,
                         int lane, uint16_t av[4], uint16_t bv[4]) {
  const int rc = hg_mfma_in_rc(lane);
  for (int e = 0; e < 4; ++e) {
    const int k = k0 + hg_mfma_in_k(lane, e);
    av[e] = k < mm.depth ? a[(r0 + rc) * mm.a_r + k * mm.a_k] : (uint16_t)0;
    bv[e] = k < mm.depth && c0 + rc < mm.cols ? b[k * mm.b_k + (c0 + rc) * mm.b_c] : (uint16_t)0;
  }
}

/* Output tile t of a product with `cols` columns (a multiple of 16), row-major over tiles. */
FA_HD int hg_mfma_tile_r0(int t, int cols) { return 16 * (t / (cols / 16)); }
FA_HD int hg_mfma_tile_c0(int t, int cols) { return 16 * (t % (cols / 16)); }

/* A product kept in registers (O, dK, dV, dQ): wave w owns tiles w, w + 4, ...; its slot s is
   tile w + 4 s, and register 4 s + e of a lane holds the element at (acc_row, acc_col). */
#define HG_MFMA_ACC_REGS(rows, cols) ((rows) * (cols) / (HG_MFMA_LANES * HG_MFMA_WAVES))
FA_HD int hg_mfma_acc_row(int reg, int wave, int lane, int cols) {
  return hg_mfma_tile_r0(wave + HG_MFMA_WAVES * (reg / 4), cols) + hg_mfma_out_row(lane, reg % 4);
}
FA_HD int hg_mfma_acc_col(int reg, int wave, int lane, int cols) {
  return hg_mfma_tile_c0(wave + HG_MFMA_WAVES * (reg / 4), cols) + hg_mfma_out_col(lane);
}

#endif /* FA_HIP_HG_MFMA_LAYOUT_H */
