/*
 * cpu_amx.c: the bf16 tile products of the forward and the backward (cpu_kernels.h's gemm_bf16:
 * C = A·B or C += A·B from bf16 pairs) with AMX-BF16's TDPBF16PS. The operands are already in the
 * layout the instruction wants: A rows hold pairs along the reduction dimension (the query tile,
 * P; in the backward also dO, Pᵀ, dSᵀ and dS), and B rows hold, per output column, the pair of
 * reduction elements 2k and 2k+1 (AMX's "VNNI" layout), which is how cpu_forward.c lays out the
 * transposed K tile and the key-interleaved V tile for the AVX512-BF16 products already, and
 * cpu_backward.c the transposed K and V tiles and the row-interleaved dO, Q and K tiles.
 *
 * Not run on AMX hardware by the test suite: the tests compile this file
 * against tests/cpu_amx_emu.h, a C model of the tile instructions (CPU_AMX_EMULATE), and run the
 * forward and the backward through it. Without CPU_AMX_EMULATE the function carries
 * target("amx-tile,amx-bf16") and the instructions are inline assembly; the plugin calls it only
 * after cpu_amx_detect.c's permission request succeeded.
 *
 * cpu_gemm_bf16_amx_tiled: the same product from operands stored as whole tiles (cpu_amx.h).
 *
 * Blocking: 32 x 32 outputs in four fp32 tiles (tmm0-3), 16 pairs of the reduction per step from
 * two A tiles (tmm4-5) and two B tiles (tmm6-7), so each loaded tile feeds two products. Tiles are
 * always configured 16 rows x 64 bytes; the edges (rows, columns or pairs past the operands) go
 * through zero-padded copies, since the padded elements of both operands must be 0 (0 times a
 * stale NaN would not be).
 */
#include <string.h>

#include "cpu_amx.h"

#if defined(CPU_AMX_EMULATE)
#include "cpu_amx_emu.h"
#define AMX_TARGET
#else
/* The instructions in inline assembly rather than gcc 12's intrinsics: those pass only the
   configuration's first 8 bytes, and no memory at all for TILELOADD, as operands, so the compiler
   may drop or move the stores that fill a tile's source. Here LDTILECFG reads the whole block and
   the loads and stores clobber memory. AT&T order: sources first. */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define amx_loadconfig(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(cfg)))
#define amx_release() __asm__ volatile("tilerelease" ::: "memory")
#define amx_zero(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define amx_load(t, p, ld) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(ld)) : "memory")
#define amx_store(t, p, ld) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(ld)) : "memory")
#define amx_dp(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#endif

enum { TILE = 16 }; /* rows of a tile, and 32-bit words (pairs, fp32) per 64-byte row */

/* LDTILECFG's 64-byte block, palette 1 (cpu_amx_emu.h has the layout). */
typedef struct amx_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config;
_Static_assert(sizeof(amx_config) == 64, "LDTILECFG reads 64 bytes");

static void full_tiles(amx_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg->colsb[t] = 4 * TILE;
    cfg->rows[t] = TILE;
  }
}

/* r x w words of src (row stride ld words) into a zeroed 16 x 16 stage. */
static void pad(uint32_t *restrict stage, const uint32_t *src, ptrdiff_t ld, int r, int w) {
  memset(stage, 0, sizeof(uint32_t) * TILE * TILE);
  for (int i = 0; i < r; ++i) memcpy(stage + i * TILE, src + i * ld, sizeof(uint32_t) * (size_t)w);
}

static void unpad(const uint32_t *restrict stage, uint32_t *dst, ptrdiff_t ld, int r, int w) {
  for (int i = 0; i < r; ++i) memcpy(dst + i * ld, stage + i * TILE, sizeof(uint32_t) * (size_t)w);
}

/* Tile t from r x w words at p: in place when whole, else through the stage. A macro because the
   tile number must be a constant of the instruction. */
#define LOAD(t, p, ld, r, w, stage)                          \
  do {                                                       \
    if ((r) == TILE && (w) == TILE) {                        \
      amx_load(t, p, (ld) * (ptrdiff_t)sizeof(uint32_t));    \
    } else {                                                 \
      pad(stage, p, ld, r, w);                               \
      amx_load(t, stage, TILE *(ptrdiff_t)sizeof(uint32_t)); \
    }                                                        \
  } while (0)

#define LOAD_C(t, p, ld, r, w, stage, accumulate) \
  do {                                            \
    if (accumulate)                               \
      LOAD(t, p, ld, r, w, stage);                \
    else                                          \
      amx_zero(t);                                \
  } while (0)

#define STORE_C(t, p, ld, r, w, stage)                        \
  do {                                                        \
    if ((r) == TILE && (w) == TILE) {                         \
      amx_store(t, p, (ld) * (ptrdiff_t)sizeof(uint32_t));    \
    } else if ((r) > 0 && (w) > 0) {                          \
      amx_store(t, stage, TILE *(ptrdiff_t)sizeof(uint32_t)); \
      unpad(stage, p, ld, r, w);                              \
    }                                                         \
  } while (0)

static int clamp16(int x) { return x < 0 ? 0 : (x > TILE ? TILE : x); }

/* C is fp32, moved as 32-bit words by the same copies as the pairs. */
AMX_TARGET void cpu_gemm_bf16_amx(int m, int n, int k2, const uint32_t *a, ptrdiff_t lda,
                                  const uint32_t *b, ptrdiff_t ldb, float *c_f32, ptrdiff_t ldc,
                                  int accumulate) {
  uint32_t *c = (uint32_t *)c_f32;
  uint32_t stage[4][TILE * TILE];
  amx_config cfg;
  full_tiles(&cfg);
  amx_loadconfig(&cfg);
  for (int i0 = 0; i0 < m; i0 += 2 * TILE) {
    const int r0 = clamp16(m - i0), r1 = clamp16(m - i0 - TILE);
    const uint32_t *a0 = a + (ptrdiff_t)i0 * lda, *a1 = a0 + TILE * lda;
    uint32_t *c0 = c + (ptrdiff_t)i0 * ldc, *c1 = c0 + TILE * ldc;
    for (int j0 = 0; j0 < n; j0 += 2 * TILE) {
      const int w0 = clamp16(n - j0), w1 = clamp16(n - j0 - TILE);
      LOAD_C(0, c0 + j0, ldc, r0, w0, stage[0], accumulate);
      if (w1) LOAD_C(1, c0 + j0 + TILE, ldc, r0, w1, stage[0], accumulate);
      if (r1) LOAD_C(2, c1 + j0, ldc, r1, w0, stage[0], accumulate);
      if (r1 && w1) LOAD_C(3, c1 + j0 + TILE, ldc, r1, w1, stage[0], accumulate);
      for (int p0 = 0; p0 < k2; p0 += TILE) {
        const int kw = clamp16(k2 - p0);
        const uint32_t *bp = b + (ptrdiff_t)p0 * ldb + j0;
        LOAD(4, a0 + p0, lda, r0, kw, stage[0]);
        LOAD(6, bp, ldb, kw, w0, stage[2]);
        amx_dp(0, 4, 6);
        if (w1) {
          LOAD(7, bp + TILE, ldb, kw, w1, stage[3]);
          amx_dp(1, 4, 7);
        }
        if (r1) {
          LOAD(5, a1 + p0, lda, r1, kw, stage[1]);
          amx_dp(2, 5, 6);
          if (w1) amx_dp(3, 5, 7);
        }
      }
      STORE_C(0, c0 + j0, ldc, r0, w0, stage[0]);
      if (w1) STORE_C(1, c0 + j0 + TILE, ldc, r0, w1, stage[0]);
      if (r1) STORE_C(2, c1 + j0, ldc, r1, w0, stage[0]);
      if (r1 && w1) STORE_C(3, c1 + j0 + TILE, ldc, r1, w1, stage[0]);
    }
  }
  amx_release(); /* back to the init state: no tile data for the OS to save at a switch */
}

/* The row stride of a tiled operand's tile: its 16 rows of 64 bytes lie one after another. */
#define TILE_BYTES 64

AMX_TARGET void cpu_gemm_bf16_amx_tiled(int m, int n, int k2, const uint32_t *a, const uint32_t *b,
                                        float *c_f32, ptrdiff_t ldc, int accumulate) {
  uint32_t *c = (uint32_t *)c_f32;
  const int kt = k2 / TILE;
  const ptrdiff_t ld = ldc * (ptrdiff_t)sizeof(uint32_t);
  amx_config cfg;
  full_tiles(&cfg);
  amx_loadconfig(&cfg);
  for (int i0 = 0; i0 < m; i0 += 2 * TILE) {
    const uint32_t *a0 = a + (ptrdiff_t)(i0 / TILE) * kt * TILE * TILE, *a1 = a0 + kt * TILE * TILE;
    uint32_t *c0 = c + (ptrdiff_t)i0 * ldc, *c1 = c0 + TILE * ldc;
    for (int j0 = 0; j0 < n; j0 += 2 * TILE) {
      const uint32_t *b0 = b + (ptrdiff_t)(j0 / TILE) * kt * TILE * TILE;
      const uint32_t *b1 = b0 + kt * TILE * TILE;
      if (accumulate) {
        amx_load(0, c0 + j0, ld);
        amx_load(1, c0 + j0 + TILE, ld);
        amx_load(2, c1 + j0, ld);
        amx_load(3, c1 + j0 + TILE, ld);
      } else {
        amx_zero(0);
        amx_zero(1);
        amx_zero(2);
        amx_zero(3);
      }
      for (int p = 0; p < kt; ++p) {
        amx_load(4, a0 + p * TILE * TILE, TILE_BYTES);
        amx_load(6, b0 + p * TILE * TILE, TILE_BYTES);
        amx_dp(0, 4, 6);
        amx_load(7, b1 + p * TILE * TILE, TILE_BYTES);
        amx_dp(1, 4, 7);
        amx_load(5, a1 + p * TILE * TILE, TILE_BYTES);
        amx_dp(2, 5, 6);
        amx_dp(3, 5, 7);
      }
      amx_store(0, c0 + j0, ld);
      amx_store(1, c0 + j0 + TILE, ld);
      amx_store(2, c1 + j0, ld);
      amx_store(3, c1 + j0 + TILE, ld);
    }
  }
  amx_release();
}
