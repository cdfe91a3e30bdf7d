/*
 * tile_io.cuh: shared-memory layouts of the FlashAttention kernels' [rows x head_dim] tiles, and
 * moving such tiles between global and shared memory, both ways.
 *
 * Two layouts, both row-major with 16-byte chunks (8 two-byte elements) as the unit:
 *   smem_padded<LD>:    rows LD elements apart (columns + 8): the 16-byte pad puts the eight rows
 *                       an ldmatrix phase reads in eight different bank groups, for any width.
 *   smem_swizzled<C>:   rows exactly C elements (a multiple of 64, i.e. whole 128-byte lines)
 *                       apart; within each 64-column segment, chunk j of row r is stored at
 *                       chunk j ^ (r % 8). An ldmatrix phase (eight consecutive rows, one chunk)
 *                       still hits eight bank groups, and a row's eight chunks of one segment
 *                       fill exactly one 128-byte line, so the copies' shared-memory writes (a
 *                       quarter-warp's 128 bytes) take one wavefront each instead of the two of
 *                       a padded row that starts 16 bytes off a line.
 */
#ifndef FA_CUDA_TILE_IO_CUH
#define FA_CUDA_TILE_IO_CUH

#include "ptx.cuh"

/* Element offset of (row r, column c). */
template <int LD_>
struct smem_padded {
  static constexpr int LD = LD_;
  static __device__ __forceinline__ int off(int r, int c) { return r * LD + c; }
  /* Row r8 + rl with r8 a multiple of 8 (see smem_swizzled). */
  static __device__ __forceinline__ int off8(int r8, int rl, int c) { return (r8 + rl) * LD + c; }
};

template <int COLS>
struct smem_swizzled {
  static_assert(COLS % 64 == 0, "swizzled rows are whole 128-byte lines");
  static constexpr int LD = COLS;
  /* Written so that a constant c leaves one XOR with a per-row term that the compiler can share
     between the columns of equal c % 64 (the k-steps of an unrolled product). */
  static __device__ __forceinline__ int off(int r, int c) {
    return r * LD + (c & ~56) + ((c & 56) ^ ((r & 7) << 3));
  }
  /* The same for row r8 + rl where r8 is a multiple of 8: the swizzle then depends on rl alone,
     which in the mma loops is a function of the lane, so one per-thread term serves every
     address (off() made ptxas keep one per row base: up to 24 bytes of spills at head dim 256). */
  static __device__ __forceinline__ int off8(int r8, int rl, int c) {
    return (r8 + rl) * LD + (c & ~56) + ((c & 56) ^ ((rl & 7) << 3));
  }
};

/* The layout of a [rows x HD] tile: swizzled when asked and HD is a multiple of 64. */
template <int HD, bool SWZ>
struct smem_tile_layout {
  typedef smem_padded<HD + 8> type;
};
template <int HD>
struct smem_tile_layout<HD, true> {
  typedef smem_swizzled<HD> type;
};

/* How NT threads walk a ROWS x HD tile: thread tid keeps one 16-byte column (col) and takes the
   rows r0, r0 + ROWS_PER_PASS, ...; threads past the last whole pass sit out (active). */
template <int ROWS, int HD, int NT>
struct tile_walk {
  static constexpr int CHUNKS_PER_ROW = HD / 8;
  static constexpr int ROWS_PER_PASS = NT / CHUNKS_PER_ROW;
  static constexpr int PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  static_assert(ROWS_PER_PASS >= 1, "too few threads for one row");
  int tid;
  __device__ __forceinline__ bool active() const { return tid < ROWS_PER_PASS * CHUNKS_PER_ROW; }
  __device__ __forceinline__ int col() const { return (tid % CHUNKS_PER_ROW) * 8; }
  __device__ __forceinline__ int r0() const { return tid / CHUNKS_PER_ROW; }
  /* Whether pass i's row (first row r0) exists in the tile (always, when the passes divide the
     rows). */
  static __device__ __forceinline__ bool in_tile(int r0, int i) {
    return ROWS % ROWS_PER_PASS == 0 || r0 + i * ROWS_PER_PASS < ROWS;
  }
};

/* Issues cp.async for a ROWS x HD tile whose first row is src (row stride in elements), into
   dst laid out as L. Rows at or past rows_valid and columns at or past d (a multiple of 8) are
   zero-filled by the copy itself (source size 0: nothing is read there). Each thread walks down
   the rows with one running pointer (few live registers in the caller's loop), used by both
   cases: a zero-fill path with addresses of its own (a select per chunk) kept 16-20 more
   registers live across the backward's products, and a zero-fill by shared stores made the
   compiler put three dummy loads before every copy. */
template <int ROWS, int HD, int NT, typename L, typename E>
__device__ __forceinline__ void tile_load_async(E *dst, const E *src, int64_t row_stride,
                                                int rows_valid, int d, int tid) {
  typedef tile_walk<ROWS, HD, NT> W;
  const W w = {tid};
  if (!w.active()) return;
  const int col = w.col(), r0 = w.r0();
  const E *from = src + (int64_t)r0 * row_stride + col;
  const uint32_t base = smem_u32(dst);
  const int64_t step = W::ROWS_PER_PASS * row_stride;
  /* Rows left in the tensor for this thread's first row; -1 where its column is past d. */
  const int left = col < d ? rows_valid - r0 : -1;
  const bool whole = rows_valid >= ROWS && d >= HD;
#pragma unroll
  for (int i = 0; i < W::PASSES; ++i) {
    if (W::in_tile(r0, i)) {
      const uint32_t at = base + L::off(r0 + i * W::ROWS_PER_PASS, col) * (int)sizeof(E);
      cp_async_16(at, from, whole || i * W::ROWS_PER_PASS < left ? 16 : 0);
    }
    from += step;
  }
}

/* Stores a ROWS x HD tile from shared memory (laid out as L) with 16-byte stores: consecutive
   threads write consecutive 16-byte pieces of a row, where writing each thread's mma fragments
   directly would take eight 4-byte stores per piece. Rows at or past rows_valid and columns at or
   past d (a multiple of 8) are not written. */
template <int ROWS, int HD, int NT, typename L, typename E>
__device__ __forceinline__ void tile_store(E *dst, int64_t row_stride, int rows_valid, int d,
                                           const E *src, int tid) {
  typedef tile_walk<ROWS, HD, NT> W;
  const W w = {tid};
  if (!w.active()) return;
  const int col = w.col(), r0 = w.r0();
  if (col >= d) return;
  E *to = dst + (int64_t)r0 * row_stride + col;
#pragma unroll
  for (int i = 0; i < W::PASSES; ++i) {
    if (W::in_tile(r0, i) && r0 + i * W::ROWS_PER_PASS < rows_valid)
      *reinterpret_cast<uint4 *>(to) =
          *reinterpret_cast<const uint4 *>(src + L::off(r0 + i * W::ROWS_PER_PASS, col));
    to += W::ROWS_PER_PASS * row_stride;
  }
}

#endif /* FA_CUDA_TILE_IO_CUH */
