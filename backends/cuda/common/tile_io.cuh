/*
 * tile_io.cuh: moving [rows x head_dim] tiles between global and shared memory for the
 * FlashAttention kernels, both ways. Shared rows are HD + 8 elements long: the 16-byte pad puts the eight
 * rows an ldmatrix phase reads in eight different bank groups, for any head dim.
 */
#ifndef FA_CUDA_TILE_IO_CUH
#define FA_CUDA_TILE_IO_CUH

#include "ptx.cuh"

/* Issues cp.async for a ROWS x HD tile whose first row is src (row stride in elements). Rows at or
   past rows_valid and columns at or past d (a multiple of 8) are zero-filled by ordinary shared
   stores instead. Each thread keeps one 16-byte column and walks down the rows with one running
   pointer (few live registers in the caller's loop). Both cases use that one pointer, and only a
   predicate tells them apart: the compiler turns this uniform branch into predicated copies, and
   a zero-fill path with addresses of its own (a select per chunk) kept 16-20 more registers live
   across the backward's products (bench/NOTES.md, v12). */
template <int ROWS, int HD, int NT, typename E>
__device__ __forceinline__ void tile_load_async(E *dst, const E *src, int64_t row_stride,
                                                int rows_valid, int d, int tid) {
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
  /* Rows left in the tensor for this thread's first row; -1 where its column is past d. */
  const int left = col < d ? rows_valid - r0 : -1;
  const bool whole = rows_valid >= ROWS && d >= HD;
#pragma unroll
  for (int i = 0; i < PASSES; ++i) {
    if (ROWS % ROWS_PER_PASS == 0 || r0 + i * ROWS_PER_PASS < ROWS) {
      const uint32_t at = to + i * ROWS_PER_PASS * LD * (int)sizeof(E);
      if (whole || i * ROWS_PER_PASS < left)
        cp_async_16_full(at, from);
      else
        st_shared_zero_16(at);
    }
    from += step;
  }
}

/* Stores a ROWS x HD tile from shared memory (rows HD + 8 elements apart, as loaded above) with
   16-byte stores: consecutive threads write consecutive 16-byte pieces of a row, where writing
   each thread's mma fragments directly would take eight 4-byte stores per piece. Rows at or past
   rows_valid and columns at or past d (a multiple of 8) are not written. */
template <int ROWS, int HD, int NT, typename E>
__device__ __forceinline__ void tile_store(E *dst, int64_t row_stride, int rows_valid, int d,
                                           const E *src, int tid) {
  constexpr int LD = HD + 8;
  constexpr int CHUNKS_PER_ROW = HD / 8;
  constexpr int ROWS_PER_PASS = NT / CHUNKS_PER_ROW;
  constexpr int PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  static_assert(ROWS_PER_PASS >= 1, "too few threads for one row");
  if (tid >= ROWS_PER_PASS * CHUNKS_PER_ROW) return;
  const int col = (tid % CHUNKS_PER_ROW) * 8, r0 = tid / CHUNKS_PER_ROW;
  if (col >= d) return;
  E *to = dst + (int64_t)r0 * row_stride + col;
  const E *from = src + r0 * LD + col;
#pragma unroll
  for (int i = 0; i < PASSES; ++i) {
    const int r = r0 + i * ROWS_PER_PASS;
    if ((ROWS % ROWS_PER_PASS == 0 || r < ROWS) && r < rows_valid)
      *reinterpret_cast<uint4 *>(to) =
          *reinterpret_cast<const uint4 *>(from + i * ROWS_PER_PASS * LD);
    to += ROWS_PER_PASS * row_stride;
  }
}

#endif /* FA_CUDA_TILE_IO_CUH */
