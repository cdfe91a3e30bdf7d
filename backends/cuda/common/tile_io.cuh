/*
 * tile_io.cuh: moving [rows x head_dim] tiles between global and shared memory for the
 * FlashAttention kernels. Shared rows are HD + 8 elements long: the 16-byte pad puts the eight
 * rows an ldmatrix phase reads in eight different bank groups, for any head dim.
 */
#ifndef FA_CUDA_TILE_IO_CUH
#define FA_CUDA_TILE_IO_CUH

#include "ptx.cuh"

/* Issues cp.async for a ROWS x HD tile whose first row is src (row stride in elements). Rows at or
   past rows_valid and columns at or past d (a multiple of 8) are zero-filled; safe_src is any
   address inside the tensor, used where nothing is read. Each thread keeps one 16-byte column
   and walks down the rows with one running pointer (few live registers in the caller's loop).
   A tile wholly inside the tensor (the common case) takes a uniform branch to copies without the
   per-chunk bounds checks, which otherwise cost more issue slots than the copies themselves. */
template <int ROWS, int HD, int NT, typename E>
__device__ __forceinline__ void tile_load_async(E *dst, const E *src, int64_t row_stride,
                                                int rows_valid, int d, const E *safe_src,
                                                int tid) {
  constexpr int LD = HD + 8;
  constexpr int CHUNKS_PER_ROW = HD / 8;
  constexpr int ROWS_PER_PASS = NT / CHUNKS_PER_ROW;
  constexpr int PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  static_assert(ROWS_PER_PASS >= 1, "too few threads for one row");
  if (tid >= ROWS_PER_PASS * CHUNKS_PER_ROW) return;
  const int col = (tid % CHUNKS_PER_ROW) * 8, r0 = tid / CHUNKS_PER_ROW;
  const E *from = src + (int64_t)r0 * row_stride + col;
  const uint32_t to = smem_u32(dst + r0 * LD + col);
  const int64_t step = ROWS_PER_PASS * row_stride;
  if (rows_valid >= ROWS && d >= HD) {
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      if (ROWS % ROWS_PER_PASS == 0 || r0 + i * ROWS_PER_PASS < ROWS)
        cp_async_16_full(to + i * ROWS_PER_PASS * LD * (int)sizeof(E), from);
      from += step;
    }
    return;
  }
  const bool col_ok = col < d;
#pragma unroll
  for (int i = 0; i < PASSES; ++i) {
    const int r = r0 + i * ROWS_PER_PASS;
    if (ROWS % ROWS_PER_PASS == 0 || r < ROWS) {
      const bool ok = col_ok && r < rows_valid;
      cp_async_16(to + i * ROWS_PER_PASS * LD * (int)sizeof(E), ok ? from : safe_src, ok ? 16 : 0);
    }
    from += step;
  }
}

#endif /* FA_CUDA_TILE_IO_CUH */
