/*
 * cpu_tensor.h: moving tiles between strided tensors in their storage dtype and the contiguous fp32
 * tiles the kernels work on. Every conversion goes through core/dtype.h so the CPU rounds exactly
 * as the tests' reference does.
 *
 * The tensors are [batch, seq, heads, dim] with arbitrary element strides; a tile is rows
 * [row0, row0 + rows) of one (batch, head), all `cols` elements of the last dimension.
 */
#ifndef FA_CPU_TENSOR_H
#define FA_CPU_TENSOR_H

#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "core/plugin.h"
#include "cpu_internal.h"

/* Element offset of [b, row, h, 0]. */
static inline int64_t cpu_row_offset(const fa_tensor *t, int64_t b, int64_t row, int64_t h) {
  return b * t->strides[0] + row * t->strides[1] + h * t->strides[2];
}

/* One strided row of n elements to fp32. The dtype switch sits outside the loops so each loop is
   a plain conversion the compiler can keep tight. */
static inline void cpu_load_row(fa_dtype dtype, const void *base, int64_t off, int64_t stride,
                                int64_t n, float *restrict dst) {
  if (dtype == FA_F32) {
    const float *src = (const float *)base + off;
    if (stride == 1) {
      memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
      for (int64_t c = 0; c < n; ++c) dst[c] = src[c * stride];
    }
  } else if (dtype == FA_F16) {
    const uint16_t *src = (const uint16_t *)base + off;
    for (int64_t c = 0; c < n; ++c) dst[c] = fa_f16_to_f32(src[c * stride]);
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

/* Tile rows to dst[r * ld + c]. */
static inline void cpu_load_tile(const fa_tensor *t, int64_t b, int64_t row0, int64_t rows,
                                 int64_t h, int64_t cols, float *restrict dst, int64_t ld) {
  const void *base = fa_tensor_base(t);
  for (int64_t r = 0; r < rows; ++r)
    cpu_load_row(t->dtype, base, cpu_row_offset(t, b, row0 + r, h), t->strides[3], cols,
                 dst + r * ld);
}

/* Tile transposed to dst[c * ld + r]: the key-side operands of Q·Kᵀ and dO·Vᵀ, so the kernels
   stream contiguous key rows. Goes through a block of rows converted into a small buffer, so the
   source is read row by row and the destination is written in runs of CPU_T_BLOCK contiguous
   floats rather than one float per cache line. */
#define CPU_T_BLOCK 16
static inline void cpu_load_tile_t(const fa_tensor *t, int64_t b, int64_t row0, int64_t rows,
                                   int64_t h, int64_t cols, float *restrict dst, int64_t ld) {
  const void *base = fa_tensor_base(t);
  float block[CPU_T_BLOCK][CPU_MAX_HEAD_DIM]; /* cols <= CPU_MAX_HEAD_DIM, checked by run() */
  for (int64_t r0 = 0; r0 < rows; r0 += CPU_T_BLOCK) {
    int64_t n = rows - r0 < CPU_T_BLOCK ? rows - r0 : CPU_T_BLOCK;
    for (int64_t r = 0; r < n; ++r)
      cpu_load_row(t->dtype, base, cpu_row_offset(t, b, row0 + r0 + r, h), t->strides[3], cols,
                   block[r]);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < n; ++r) dst[c * ld + r0 + r] = block[r][c];
  }
}

/* fp32 tile src[r * ld + c], times mul, to tensor rows. */
static inline void cpu_store_tile(const fa_tensor *t, int64_t b, int64_t row0, int64_t rows,
                                  int64_t h, int64_t cols, const float *restrict src, int64_t ld,
                                  float mul) {
  void *base = fa_tensor_base(t);
  for (int64_t r = 0; r < rows; ++r)
    cpu_store_row(t->dtype, base, cpu_row_offset(t, b, row0 + r, h), t->strides[3], cols,
                  src + r * ld, mul);
}

/* lse is float32 [batch, heads_q, seqlen_q] with its own strides. */
static inline float *cpu_lse_ptr(const fa_tensor *lse, int64_t b, int64_t h, int64_t i) {
  return (float *)fa_tensor_base(lse) + b * lse->strides[0] + h * lse->strides[1] +
         i * lse->strides[2];
}

#endif /* FA_CPU_TENSOR_H */
