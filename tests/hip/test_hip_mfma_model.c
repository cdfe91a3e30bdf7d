/*
 * test_hip_mfma_model.c: the MFMA kernels' operand and result mapping, checked on the host where
 * no AMD GPU exists. A model of the wave64 instruction v_mfma_f32_16x16x16{f16,bf16} is written
 * here from the ISA's description (A(i, k) is item k % 4 of lane i + 16 (k / 4), B(k, j) item
 * k % 4 of lane j + 16 (k / 4), D(i, j) item i % 4 of lane j + 16 (i / 4)), independently of
 * backends/hip/cdna/hg_mfma_layout.h. The kernels' own index functions from that header (operand
 * fetch, product descriptors, tile spreading over the waves, the registers' places) then drive
 * the model through every product of the MFMA forward and backward, on random tiles laid out in
 * "shared memory" as the kernels lay them out, for each head-dim class and several head dims, and
 * each result is compared with a plain float64 matrix product: element by element, every
 * element written exactly once, the columns past the head dim zero.
 * What this cannot check: that the hardware follows its documentation (nothing ran on AMD).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/generic/hg_args.h"
#include "core/math/dtype.h"

#define LANES 64 /* lanes of a wave, at most */
#define IN 16    /* operand items per lane, at most */
#define OUT 8    /* result items per lane, at most */

static int failures;
static int bwd_tiles_run; /* backward tiles checked (each once per instruction kind counted) */
static const char *kind = "mfma"; /* the instruction being modelled, for the failure lines */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double val(uint16_t h, int bf16) {
  return bf16 ? (double)fa_bf16_to_f32(h) : (double)fa_f16_to_f32(h);
}

/* Random values in [-2, 2), never all zero, in the storage type. */
static void fill(uint16_t *x, int n, int bf16) {
  for (int i = 0; i < n; ++i) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    float f = (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    x[i] = bf16 ? fa_f32_to_bf16(f) : fa_f32_to_f16(f);
  }
}

/* The instruction of kind mi as documented: acc (lane, item) += A·B, for one wave. */
static void mi_model(int mi, double acc[LANES][OUT], uint16_t av[LANES][IN], uint16_t bv[LANES][IN],
                     int bf16) {
  double d[16][16];
  if (mi == HG_MI_WMMA)
    for (int l = 0; l < 16; ++l)
      if (memcmp(av[l], av[l + 16], sizeof av[l]) || memcmp(bv[l], bv[l + 16], sizeof bv[l])) {
        ++failures;
        printf("FAIL wmma: lanes %d and %d supply different operands\n", l, l + 16);
      }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double s = 0.0;
      for (int k = 0; k < 16; ++k)
        s += mi == HG_MI_WMMA
                 ? val(av[i][k], bf16) * val(bv[j][k], bf16)
                 : val(av[i + 16 * (k / 4)][k % 4], bf16) * val(bv[j + 16 * (k / 4)][k % 4], bf16);
      d[i][j] = s;
    }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      if (mi == HG_MI_WMMA)
        acc[j + 16 * (i % 2)][i / 2] += d[i][j];
      else
        acc[j + 16 * (i / 4)][i % 4] += d[i][j];
    }
}

/* hg_mfma_tile for one wave: the tile at (r0, c0) over the product's depth. */
static void model_tile(int mi, double acc[LANES][OUT], const uint16_t *a, const uint16_t *b,
                       hg_mm mm, int r0, int c0, int bf16) {
  for (int k0 = 0; k0 < mm.depth; k0 += HG_MFMA_DIM) {
    uint16_t av[LANES][IN], bv[LANES][IN];
    memset(av, 0, sizeof av);
    memset(bv, 0, sizeof bv);
    for (int lane = 0; lane < hg_mi_lanes(mi); ++lane)
      hg_mfma_fetch(mi, a, b, mm, r0, c0, k0, lane, av[lane], bv[lane]);
    mi_model(mi, acc, av, bv, bf16);
  }
}

/* hg_mfma_store of an R x C product into out[R][ldo] (NaN-poisoned), writes counted. */
static void model_store(int mi, double *out, int *writes, int ldo, int R, int C, const uint16_t *a,
                        const uint16_t *b, hg_mm mm, int first, int bf16) {
  const int W = hg_mi_waves(mi);
  for (int wave = 0; wave < W; ++wave)
    for (int t = (wave + W - first) % W; t < (R / 16) * (C / 16); t += W) {
      const int r0 = hg_mfma_tile_r0(t, C), c0 = hg_mfma_tile_c0(t, C);
      static double acc[LANES][OUT];
      memset(acc, 0, sizeof acc);
      model_tile(mi, acc, a, b, mm, r0, c0, bf16);
      for (int lane = 0; lane < hg_mi_lanes(mi); ++lane)
        for (int e = 0; e < hg_mi_out_items(mi); ++e) {
          const int at = (r0 + hg_mfma_out_row(mi, lane, e)) * ldo + c0 + hg_mfma_out_col(lane);
          out[at] = acc[lane][e];
          ++writes[at];
        }
    }
}

/* hg_mfma_accumulate of an R x C product, then each register put at its (acc_row, acc_col). */
static void model_accumulate(int mi, double *out, int *writes, int R, int C, const uint16_t *a,
                             const uint16_t *b, hg_mm mm, int bf16) {
  const int regs = HG_MFMA_ACC_REGS(R, C), W = hg_mi_waves(mi), n = hg_mi_out_items(mi);
  if ((R / 16) * (C / 16) % W != 0) {
    ++failures;
    printf("FAIL %d x %d: the tiles do not spread evenly over %d waves\n", R, C, W);
    return;
  }
  for (int wave = 0; wave < W; ++wave) {
    static double acc[16][LANES][OUT];
    memset(acc, 0, sizeof acc);
    for (int s = 0; s < regs / n; ++s) {
      const int t = wave + W * s;
      model_tile(mi, acc[s], a, b, mm, hg_mfma_tile_r0(t, C), hg_mfma_tile_c0(t, C), bf16);
    }
    for (int lane = 0; lane < hg_mi_lanes(mi); ++lane)
      for (int r = 0; r < regs; ++r) {
        const int row = hg_mfma_acc_row(mi, r, wave, lane, C);
        const int col = hg_mfma_acc_col(mi, r, wave, lane, C);
        out[row * C + col] = acc[r / n][lane][r % n];
        ++writes[row * C + col];
      }
  }
}

/* ref(r, c) = sum over k < depth of A(r, k) B(k, c), A and B given by element functions. */
typedef double (*elem_fn)(const uint16_t *x, int i, int j, int ld, int bf16);
static double row_major(const uint16_t *x, int i, int j, int ld, int bf16) {
  return val(x[i * ld + j], bf16);
}
static double transposed(const uint16_t *x, int i, int j, int ld, int bf16) {
  return val(x[j * ld + i], bf16);
}

static void compare(const char *what, int hc, int d, int bf16, const double *got, const int *writes,
                    int ldo, int R, int C, int cols, int depth, const uint16_t *a, elem_fn fa,
                    int lda, const uint16_t *b, elem_fn fb, int ldb) {
  int bad = 0;
  for (int r = 0; r < R && bad < 3; ++r)
    for (int c = 0; c < C && bad < 3; ++c) {
      double want = 0.0;
      if (c < cols)
        for (int k = 0; k < depth; ++k) want += fa(a, r, k, lda, bf16) * fb(b, k, c, ldb, bf16);
      const double g = got[r * ldo + c];
      const int w = writes[r * ldo + c];
      if (w != 1 || !(fabs(g - want) <= 1e-12 * (1.0 + fabs(want)))) {
        ++bad;
        ++failures;
        printf("FAIL %s %s hc%d d%d %s: (%d, %d) = %.17g written %d times, expected %.17g\n", kind,
               what, hc, d, bf16 ? "bf16" : "f16", r, c, g, w, want);
      }
    }
}

static void check_products(int mi, int hc, int d, int bf16) {
  enum { MAXR = 32, MAXD = 256 };
  static uint16_t x[2 * MAXR * MAXD], y[2 * MAXR * MAXD], pt[2 * MAXR * MAXR];
  static double out[2 * MAXR * (MAXD + 1)];
  static int writes[2 * MAXR * (MAXD + 1)];
  const int fm = HG_FWD_TILE_M;
#define HG_BWD_ROW(c, n, m, amd) {c, n, m},
  static const int tiles[][3] = {HG_BWD_TILES(HG_BWD_ROW)};
#undef HG_BWD_ROW

#define RESET()                                                   \
  do {                                                            \
    for (int i = 0; i < 2 * MAXR * (MAXD + 1); ++i) out[i] = NAN; \
    memset(writes, 0, sizeof writes);                             \
  } while (0)

  /* Forward S = Q·Kᵀ into the [BM][BN + 1] score tile and O += P·V (P [BM][BN], V [BN][d], O in
     registers over [BM][HC]), for both key tiles core/plan may choose. */
  for (int fn = HG_FWD_TILE_N; fn <= HG_FWD_TILE_N_MAX; fn *= 2) {
    fill(x, fm * d, bf16);
    fill(y, fn * d, bf16);
    RESET();
    model_store(mi, out, writes, fn + 1, fm, fn, x, y, hg_mm_abt(d, fn), 0, bf16);
    compare(fn == 32 ? "fwd S=QK^T n32" : "fwd S=QK^T n64", hc, d, bf16, out, writes, fn + 1, fm,
            fn, fn, d, x, row_major, d, y, transposed, d);
    fill(pt, fm * fn, bf16);
    fill(y, fn * d, bf16);
    RESET();
    model_accumulate(mi, out, writes, fm, hc, pt, y, hg_mm_ab(d, fn), bf16);
    compare(fn == 32 ? "fwd O=PV n32" : "fwd O=PV n64", hc, d, bf16, out, writes, hc, fm, hc, d, fn,
            pt, row_major, fn, y, row_major, d);
  }
  /* The backward, for each of the class's tiles (BN keys x BM queries). */
  for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ++ti) {
    if (tiles[ti][0] != hc) continue;
    const int bn = tiles[ti][1], bm = tiles[ti][2];
    bwd_tiles_run += mi == HG_MI_MFMA && d == hc && bf16;
    /* Backward Sᵀ = K·Qᵀ (waves from 0) and dPᵀ = V·dOᵀ (waves from 1) into [BN][BM]. */
    for (int first = 0; first <= hg_mi_waves(mi) / 2; first += hg_mi_waves(mi) / 2) {
      fill(x, bn * d, bf16);
      fill(y, bm * d, bf16);
      RESET();
      model_store(mi, out, writes, bm, bn, bm, x, y, hg_mm_abt(d, bm), first, bf16);
      compare(first ? "bwd dP^T=V dO^T" : "bwd S^T=KQ^T", hc, d, bf16, out, writes, bm, bn, bm, bm,
              d, x, row_major, d, y, transposed, d);
    }
    /* Backward dV += Pᵀ·dO and dK += dSᵀ·Q: Pᵀ/dSᵀ [BN][BM], dO/Q [BM][d], in registers over
       [BN][HC]. */
    fill(pt, bn * bm, bf16);
    fill(y, bm * d, bf16);
    RESET();
    model_accumulate(mi, out, writes, bn, hc, pt, y, hg_mm_ab(d, bm), bf16);
    compare("bwd dV=P^T dO", hc, d, bf16, out, writes, hc, bn, hc, d, bm, pt, row_major, bm, y,
            row_major, d);
    /* Backward dQ = dS·K from dSᵀ [BN][BM] and K [BN][d], in registers over [BM][HC]. */
    fill(pt, bn * bm, bf16);
    fill(y, bn * d, bf16);
    RESET();
    model_accumulate(mi, out, writes, bm, hc, pt, y, hg_mm_atb(d, bm, bn), bf16);
    compare("bwd dQ=dS K", hc, d, bf16, out, writes, hc, bm, hc, d, bn, pt, transposed, bm, y,
            row_major, d);
  }
#undef RESET
}

int main(void) {
  /* The header's inverse mapping (used by the nvcc emulation of MFMA) undoes its operand
     mapping. */
  for (int lane = 0; lane < HG_MFMA_LANES; ++lane)
    for (int e = 0; e < 4; ++e) {
      const int rc = hg_mfma_in_rc(lane), k = hg_mfma_in_k(HG_MI_MFMA, lane, e);
      if (hg_mfma_src_lane(rc, k) != lane || hg_mfma_src_item(k) != e) {
        ++failures;
        printf("FAIL inverse mapping: lane %d item %d\n", lane, e);
      }
    }
  static const int dims[3][3] = {{8, 40, 64}, {72, 120, 128}, {136, 200, 256}};
  int runs = 0;
  for (int mi = HG_MI_MFMA; mi <= HG_MI_WMMA; ++mi)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 3; ++i)
        for (int bf16 = 0; bf16 < 2; ++bf16) {
          const int d = dims[c][i];
          kind = mi == HG_MI_WMMA ? "wmma" : "mfma";
          check_products(mi, HG_HD_CLASS(d), d, bf16);
          ++runs;
        }
  /* Every backward tile the kernels are compiled for (HG_BWD_TILES) went through the model. */
  if (bwd_tiles_run != HG_BWD_TILE_COUNT) {
    ++failures;
    printf("FAIL %d backward tiles modelled, %d compiled\n", bwd_tiles_run, HG_BWD_TILE_COUNT);
  }
  printf(
      "test_hip_mfma_model: %d instruction x head dim x dtype runs of the 8 products (the "
      "backward's for %d tiles): %s (%d failure%s)\n",
      runs, bwd_tiles_run, failures ? "FAILED" : "passed", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
