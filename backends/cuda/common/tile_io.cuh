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
   address inside the tensor, used where nothing is read. */
template <int ROWS, int HD, int NT, typename E>
__device__ __forceinline__ void tile_load_async(E *dst, const E *src, int64_t row_stride,
                                                int rows_valid, int d, const E *safe_src,
                                                int tid) {
  constexpr int LD = HD + 8;
  constexpr int CHUNKS_PER_ROW = HD / 8;
  constexpr int TOTAL = ROWS * CHUNKS_PER_ROW;
#pragma unroll
  for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
    const int c = tid + i * NT;
    if (TOTAL % NT == 0 || c < TOTAL) {
      const int r = c / CHUNKS_PER_ROW, col = (c % CHUNKS_PER_ROW) * 8;
      const bool ok = r < rows_valid && col < d;
      const E *from = ok ? src + (int64_t)r * row_stride + col : safe_src;
      cp_async_16(smem_u32(dst + r * LD + col), from, ok ? 16 : 0);
    }
  }
}

/* A vector of n floats (LSE, D rows) into shared memory; entries at or past n_valid get fill. */
template <int N, int NT>
__device__ __forceinline__ void vec_load(float *dst, const float *src, int64_t stride, int n_valid,
                                         float fill, int tid) {
  for (int i = tid; i < N; i += NT) dst[i] = i < n_valid ? src[(int64_t)i * stride] : fill;
}

#endif /* FA_CUDA_TILE_IO_CUH */
