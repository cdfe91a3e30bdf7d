/*
 * cpu_tensor.h: moving tiles between strided tensors in their storage dtype and the contiguous fp32
 * tiles the kernels work on. Every conversion goes through core/math/dtype.h so the CPU rounds
 * exactly as the tests' reference does.
 *
 * A tensor is reached through a cpu_rows (cpu_internal.h): one sequence's rows, padded, packed or
 * paged, with arbitrary element strides; a tile is rows [row0, row0 + rows) of one head, all
 * `cols` elements of the last dimension.
 */
#ifndef FA_CPU_TENSOR_H
#define FA_CPU_TENSOR_H

#include <stdint.h>
#include <string.h>

#include "core/math/dtype.h"
#include "core/plugin.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"

/* One strided row of n elements to fp32. The dtype switch sits outside the loops so each loop is
   a plain conversion the compiler can keep tight. */
static inline void cpu_load_row(const cpu_kernels *kern, fa_dtype dtype, const void *base,
                                int64_t off, int64_t stride, int64_t n, float *restrict dst) {
  if (dtype == FA_F32) {
    const float *src = (const float *)base + off;
    if (stride == 1) {
      memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
      for (int64_t c = 0; c < n; ++c) dst[c] = src[c * stride];
    }
  } else if (dtype == FA_F16) {
    const uint16_t *src = (const uint16_t *)base + off;
    if (stride == 1) /* the kernel build's conversion: vcvtph2ps where AVX-512 is there */
      kern->f16_row(src, n, dst);
    else
      for (int64_t c = 0; c < n; ++c) dst[c] = fa_f16_to_f32(src[c * stride]);
  } else if (stride == 1) {
    /* The common contiguous bf16 row: the kernel build's widening shift (16 values per step with
       AVX-512). */
    kern->bf16_row((const uint16_t *)base + off, n, dst);
  } else {
    const uint16_t *src = (const uint16_t *)base + off;
    for (int64_t c = 0; c < n; ++c) dst[c] = fa_bf16_to_f32(src[c * stride]);
  }
}

/* One fp32 row, times mul, to a strided row in the storage dtype (round-to-nearest-even). */
static inline void cpu_store_row(fa_dtype dtype, void *base, int64_t off, int64_t stride, int64_t n,
                                 const float *restrict src, float mul) {
  if (dtype == FA_F32) {
    float *dst = (float *)base + off;
    for (int64_t c = 0; c < n; ++c) dst[c * stride] = src[c] * mul;
  } else if (dtype == FA_F16) {
    uint16_t *dst = (uint16_t *)base + off;
    for (int64_t c = 0; c < n; ++c) dst[c * stride] = fa_f32_to_f16(src[c] * mul);
  } else {
    uint16_t *dst = (uint16_t *)base + off;
    for (int64_t c = 0; c < n; ++c) dst[c * stride] = fa_f32_to_bf16(src[c] * mul);
  }
}

/* Tile rows [row0, row0 + rows) of head h to dst[r * ld + c]. */
static inline void cpu_load_tile(const cpu_kernels *kern, const cpu_rows *t, int64_t row0,
                                 int64_t rows, int64_t h, int64_t cols, float *restrict dst,
                                 int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    cpu_load_row(kern, t->dtype, t->data, cpu_rows_off(t, row0 + r, h), t->cs, cols, dst + r * ld);
}

/* Tile transposed to dst[c * ld + r]: the key-side operands of Q·Kᵀ and dO·Vᵀ, so the kernels
   stream contiguous key rows. Blocks of CPU_T_BLOCK rows are converted into a small buffer (the
   source read row by row), then transposed by the kernel build's transpose (16 x 16 in vector
   registers where AVX-512 is there). */
#define CPU_T_BLOCK 16
static inline void cpu_load_tile_t(const cpu_kernels *kern, const cpu_rows *t, int64_t row0,
                                   int64_t rows, int64_t h, int64_t cols, float *restrict dst,
                                   int64_t ld) {
  float block[CPU_T_BLOCK][CPU_MAX_HEAD_DIM]; /* cols <= CPU_MAX_HEAD_DIM, checked by run() */
  for (int64_t r0 = 0; r0 < rows; r0 += CPU_T_BLOCK) {
    int64_t n = rows - r0 < CPU_T_BLOCK ? rows - r0 : CPU_T_BLOCK;
    if (t->dtype == FA_BF16 && t->cs == 1) { /* contiguous bf16 rows: widened in registers */
      const uint16_t *src[CPU_T_BLOCK];
      for (int64_t r = 0; r < n; ++r)
        src[r] = (const uint16_t *)t->data + cpu_rows_off(t, row0 + r0 + r, h);
      kern->bf16_transpose((int)n, (int)cols, src, dst + r0, (ptrdiff_t)ld);
      continue;
    }
    for (int64_t r = 0; r < n; ++r)
      cpu_load_row(kern, t->dtype, t->data, cpu_rows_off(t, row0 + r0 + r, h), t->cs, cols,
                   block[r]);
    kern->transpose((int)n, (int)cols, &block[0][0], CPU_MAX_HEAD_DIM, dst + r0, (ptrdiff_t)ld);
  }
}

/* The bf16 products' operands (cpu_bf16dp.c; bf16 tensors, even head dims). Element c of row r
   of head h, as stored (16 bits), for the strided fallbacks below. */
static inline uint16_t cpu_bf16_at(const cpu_rows *t, int64_t r, int64_t h, int64_t c) {
  return ((const uint16_t *)t->data)[cpu_rows_off(t, r, h) + c * t->cs];
}

/* Row `row` of head h (bf16, d even) as its d/2 pairs: a contiguous row already is them. */
static inline void cpu_row_pairs(const cpu_rows *t, int64_t row, int64_t h, int64_t d,
                                 uint32_t *restrict dst) {
  if (t->cs == 1) {
    memcpy(dst, (const uint16_t *)t->data + cpu_rows_off(t, row, h), (size_t)d * sizeof(uint16_t));
    return;
  }
  for (int64_t p = 0; p < d / 2; ++p)
    dst[p] = (uint32_t)cpu_bf16_at(t, row, h, 2 * p) | (uint32_t)cpu_bf16_at(t, row, h, 2 * p + 1)
                                                           << 16;
}

/* K tile rows [row0, row0 + rows) of head h as pairs along the head dimension, transposed:
   dst[p * ld + r] = (K[r][2p], K[r][2p+1]). A contiguous row already is its pairs in memory, so
   the 32-bit transpose of the fp32 tiles serves (it moves bits, no arithmetic). */
static inline void cpu_load_tile_pairs_t(const cpu_kernels *kern, const cpu_rows *t, int64_t row0,
                                         int64_t rows, int64_t h, int64_t d, uint32_t *restrict dst,
                                         int64_t ld) {
  uint32_t block[CPU_T_BLOCK][CPU_MAX_HEAD_DIM / 2];
  const int64_t d2 = d / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += CPU_T_BLOCK) {
    int64_t n = rows - r0 < CPU_T_BLOCK ? rows - r0 : CPU_T_BLOCK;
    for (int64_t r = 0; r < n; ++r) cpu_row_pairs(t, row0 + r0 + r, h, d, block[r]);
    kern->transpose((int)n, (int)d2, (const float *)&block[0][0], CPU_MAX_HEAD_DIM / 2,
                    (float *)(dst + r0), (ptrdiff_t)ld);
  }
}

/* Keys 2q and 2q + 1 of the tile rows [row0, row0 + rows) of head h, interleaved as bf16 pairs
   by bf16_interleave at dst with its step; a key past rows gives 0 halves. */
static inline void cpu_interleave_key_pair(const cpu_kernels *kern, const cpu_rows *t, int64_t row0,
                                           int64_t rows, int64_t q, int64_t h, int64_t dv,
                                           uint32_t *dst, ptrdiff_t step) {
  uint16_t tmp[2][CPU_MAX_HEAD_DIM_V];
  const uint16_t *r[2] = {NULL, NULL};
  for (int k = 0; k < 2 && 2 * q + k < rows; ++k) {
    const int64_t row = row0 + 2 * q + k;
    if (t->cs == 1) {
      r[k] = (const uint16_t *)t->data + cpu_rows_off(t, row, h);
    } else {
      for (int64_t c = 0; c < dv; ++c) tmp[k][c] = cpu_bf16_at(t, row, h, c);
      r[k] = tmp[k];
    }
  }
  kern->bf16_interleave(r[0], r[1], (int)dv, dst, step);
}

/* V tile rows [row0, row0 + rows) of head h as pairs along the keys: dst[q * dv + c] =
   (V[2q][c], V[2q+1][c]), 0 in the high half of the last word when rows is odd. */
static inline void cpu_load_tile_pairs_v(const cpu_kernels *kern, const cpu_rows *t, int64_t row0,
                                         int64_t rows, int64_t h, int64_t dv,
                                         uint32_t *restrict dst) {
  for (int64_t q = 0; 2 * q < rows; ++q)
    cpu_interleave_key_pair(kern, t, row0, rows, q, h, dv, dst + q * dv, 16);
}

/* The forward's tiled operands (cpu_amx.h's layout; head dims multiples of 32): the first
   multiple of 32 at or above n, the rows or keys a tiled product covers. */
static inline int64_t cpu_round32(int64_t n) { return (n + 31) / 32 * 32; }

/* K tile rows [row0, row0 + rows) of head h as the B tiles of S = Q·Kᵀ: column block j (keys
   16j ..) holds d/32 tiles of 16 pairs each, the keys' pairs transposed; keys past rows, up to a
   multiple of 32, are 0. */
static inline void cpu_load_tile_pairs_tiled(const cpu_kernels *kern, const cpu_rows *t,
                                             int64_t row0, int64_t rows, int64_t h, int64_t d,
                                             uint32_t *restrict dst) {
  uint32_t block[CPU_T_BLOCK][CPU_MAX_HEAD_DIM / 2];
  const int64_t d2 = d / 2;
  for (int64_t r0 = 0; r0 < cpu_round32(rows); r0 += CPU_T_BLOCK) {
    for (int64_t r = 0; r < CPU_T_BLOCK; ++r) {
      if (r0 + r < rows)
        cpu_row_pairs(t, row0 + r0 + r, h, d, block[r]);
      else
        memset(block[r], 0, (size_t)d2 * sizeof(uint32_t));
    }
    kern->transpose(CPU_T_BLOCK, (int)d2, (const float *)&block[0][0], CPU_MAX_HEAD_DIM / 2,
                    (float *)(dst + r0 * d2), CPU_T_BLOCK);
  }
}

/* V tile rows [row0, row0 + rows) of head h as the B tiles of O += P·V: pairs of keys, columns
   of V; tile (pair block q, column block j) at dst + (j * kt + q) * 256, kt = the padded key
   count / 32; pairs past rows are 0. */
static inline void cpu_load_tile_pairs_v_tiled(const cpu_kernels *kern, const cpu_rows *t,
                                               int64_t row0, int64_t rows, int64_t h, int64_t dv,
                                               uint32_t *restrict dst) {
  const int64_t kt = cpu_round32(rows) / 32;
  for (int64_t q = 0; q < 16 * kt; ++q) {
    /* Pair row q of every column block's tile: column c at (c / 16) * kt * 256 + c % 16. */
    uint32_t *at = dst + (q / 16) * 256 + (q % 16) * 16;
    if (2 * q >= rows)
      for (int64_t j = 0; j < dv / 16; ++j) memset(at + j * kt * 256, 0, 16 * sizeof(uint32_t));
    else
      cpu_interleave_key_pair(kern, t, row0, rows, q, h, dv, at, kt * 256);
  }
}

/* fp32 tile src[r * ld + c], times mul, to tensor rows. */
static inline void cpu_store_tile(const cpu_rows *t, int64_t row0, int64_t rows, int64_t h,
                                  int64_t cols, const float *restrict src, int64_t ld, float mul) {
  for (int64_t r = 0; r < rows; ++r)
    cpu_store_row(t->dtype, t->data, cpu_rows_off(t, row0 + r, h), t->cs, cols, src + r * ld, mul);
}

/* Zeroes tensor rows (gradients of keys no query sees). */
static inline void cpu_zero_rows(const cpu_rows *t, int64_t row0, int64_t rows, int64_t h,
                                 int64_t cols) {
  const float zero = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      cpu_store_row(t->dtype, t->data, cpu_rows_off(t, row0 + r, h) + c * t->cs, 1, 1, &zero, 1.0f);
}

/* The lse element of query head h, row i of the sequence. */
static inline float *cpu_lse_ptr(const cpu_seq *sq, int64_t h, int64_t i) {
  return sq->lse + h * sq->lse_hs + i * sq->lse_rs;
}

#endif /* FA_CPU_TENSOR_H */
