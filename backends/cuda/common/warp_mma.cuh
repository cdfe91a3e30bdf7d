/*
 * warp_mma.cuh: one warp's tile products out of shared memory, the two operand layouts the
 * FlashAttention kernels need (mma.sync m16n8k16, fragments as in ptx.cuh).
 *
 *   mma_rows_rows: acc += A · Bᵀ, A and B both row-major with k along the row (Q Kᵀ, K Qᵀ, V dOᵀ)
 *   mma_rows_kn:   acc += A · B,  A row-major with k along the row, B row-major [k][n] (Pᵀ dO)
 *
 * Both are mma_warp_tile, which differs between them only in how B's fragment is loaded.
 *
 * acc is [M16][N8][4]: M16 16-row blocks of A times N8 8-column blocks of the result. The
 * fragments of one k-step are loaded before its mma are issued; the caller's loop order decides
 * how many products are in flight.
 */
#ifndef FA_CUDA_WARP_MMA_CUH
#define FA_CUDA_WARP_MMA_CUH

#include "ptx.cuh"

/* Row bases (a_row0, b0, and the k-steps' rows) are multiples of 8 in every caller: the layouts'
   off8 then swizzle by the lane alone. */

/* The k-step ks fragment of B for the 16 result columns from b0: B_KN = false, B row-major with k
   along the row (rows b0 + [0, 16)); B_KN = true, B row-major [k][n] (columns b0 + [0, 16), loaded
   transposed). LB: B's shared-memory layout (tile_io.cuh). */
/* A warp's accumulator tile set to zero. */
template <int M16, int N8>
__device__ __forceinline__ void zero_tile(float (&acc)[M16][N8][4]) {
#pragma unroll
  for (int m = 0; m < M16; ++m)
#pragma unroll
    for (int n = 0; n < N8; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[m][n][c] = 0.0f;
}

template <bool B_KN, typename LB, typename E>
__device__ __forceinline__ void load_b_frag(uint32_t (&bf)[4], const E *sB, int b0, int ks,
                                            int lane) {
  const int mi = lane >> 3;
  if (B_KN)
    ldmatrix_x4_trans(
        bf, smem_u32(sB + LB::off8(ks * 16 + (mi & 1) * 8, lane & 7, b0 + (mi >> 1) * 8)));
  else
    ldmatrix_x4(bf, smem_u32(sB + LB::off8(b0 + (mi >> 1) * 8, lane & 7, ks * 16 + (mi & 1) * 8)));
}

/* One k-step of acc += A · op(B): A's fragments af of that step (rows a_row0 + [0, 16·M16) of
   A), result columns b0 + [0, 8·N8) taken from B as load_b_frag<B_KN, LB> reads it. */
template <typename Tr, bool B_KN, int M16, int N8, typename LB, typename E>
__device__ __forceinline__ void mma_k_step(float (&acc)[M16][N8][4], const uint32_t (&af)[M16][4],
                                           const E *sB, int b0, int ks, int lane) {
  static_assert(N8 % 2 == 0, "B is loaded 16 result columns at a time");
#pragma unroll
  for (int n2 = 0; n2 < N8 / 2; ++n2) {
    uint32_t bf[4];
    load_b_frag<B_KN, LB>(bf, sB, b0 + n2 * 16, ks, lane);
#pragma unroll
    for (int m = 0; m < M16; ++m) {
      mma_16816<Tr>(acc[m][2 * n2], af[m], bf);
      mma_16816<Tr>(acc[m][2 * n2 + 1], af[m], bf + 2);
    }
  }
}

/* A's fragments of k-step ks for rows a_row0 + [0, 16·M16) (layout LA). */
template <int M16, typename LA, typename E>
__device__ __forceinline__ void load_a_frags(uint32_t (&af)[M16][4], const E *sA, int a_row0,
                                             int ks, int lane) {
#pragma unroll
  for (int m = 0; m < M16; ++m)
    ldmatrix_x4(af[m],
                smem_u32(sA + LA::off8(a_row0 + m * 16, lane & 15, ks * 16 + (lane >> 4) * 8)));
}

/* acc += A · op(B) over k = [0, 16·K16), A's fragments loaded step by step from shared memory. */
template <typename Tr, bool B_KN, int M16, int N8, int K16, typename LA, typename LB, typename E>
__device__ __forceinline__ void mma_warp_tile(float (&acc)[M16][N8][4], const E *sA, int a_row0,
                                              const E *sB, int b0, int lane) {
#pragma unroll
  for (int ks = 0; ks < K16; ++ks) {
    uint32_t af[M16][4];
    load_a_frags<M16, LA>(af, sA, a_row0, ks, lane);
    mma_k_step<Tr, B_KN, M16, N8, LB>(acc, af, sB, b0, ks, lane);
  }
}

/* The same with A's fragments of every k-step already in registers (load_a_frags for each ks),
   for an A operand that several products share: the backward holds its warp's K or V rows. */
template <typename Tr, bool B_KN, int M16, int N8, int K16, typename LB, typename E>
__device__ __forceinline__ void mma_held_a(float (&acc)[M16][N8][4],
                                           const uint32_t (&af)[K16][M16][4], const E *sB, int b0,
                                           int lane) {
#pragma unroll
  for (int ks = 0; ks < K16; ++ks) mma_k_step<Tr, B_KN, M16, N8, LB>(acc, af[ks], sB, b0, ks, lane);
}

/* Rows a_row0 + [0, 16·M16) of A times rows b_row0 + [0, 8·N8) of B (both k along the row). */
template <typename Tr, int M16, int N8, int K16, typename LA, typename LB, typename E>
__device__ __forceinline__ void mma_rows_rows(float (&acc)[M16][N8][4], const E *sA, int a_row0,
                                              const E *sB, int b_row0, int lane) {
  mma_warp_tile<Tr, false, M16, N8, K16, LA, LB>(acc, sA, a_row0, sB, b_row0, lane);
}

/* Rows a_row0 + [0, 16·M16) of A times columns b_col0 + [0, 8·N8) of B stored [k][n]. */
template <typename Tr, int M16, int N8, int K16, typename LA, typename LB, typename E>
__device__ __forceinline__ void mma_rows_kn(float (&acc)[M16][N8][4], const E *sA, int a_row0,
                                            const E *sB, int b_col0, int lane) {
  mma_warp_tile<Tr, true, M16, N8, K16, LA, LB>(acc, sA, a_row0, sB, b_col0, lane);
}

#endif /* FA_CUDA_WARP_MMA_CUH */
