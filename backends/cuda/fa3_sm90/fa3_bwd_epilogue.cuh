/*
 * fa3_bwd_epilogue.cuh: a FlashAttention-3 backward block's end: each consumer's dK (times the
 * softmax scale) and dV stored from registers as 16-byte vectors.
 */
#ifndef FA_CUDA_FA3_BWD_EPILOGUE_CUH
#define FA_CUDA_FA3_BWD_EPILOGUE_CUH

#include "fa3_args.h"

/* Transposes a 4 x 4 matrix of words held across the 4 lanes of a quad (lane t: row t, x[k]
   its column k): after it, lane t holds column t (x[k]: the old row k's word t). Two butterfly
   stages of one shuffle a word. */
__device__ __forceinline__ void quad_transpose(uint32_t (&x)[4], int t) {
#pragma unroll
  for (int d = 1; d <= 2; d <<= 1)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (k & d) continue;
      const bool hi = (t & d) != 0;
      const uint32_t got = __shfl_xor_sync(0xffffffffu, hi ? x[k] : x[k + d], d);
      if (hi)
        x[k] = got;
      else
        x[k + d] = got;
    }
}

/* A consumer's dK (times the softmax scale) and dV of 64 keys key0.. and NC columns col0..
   (accumulators: d[4j + i] is key 16 warp + g + 8 (i / 2), column col0 + 8 j + 2 t + i % 2). Each
   quad's words of four 8-column chunks are transposed so that every lane stores one chunk as one
   16-byte vector (a quarter of the store instructions of 4-byte stores, each row's 64 bytes
   whole). Keys from `keys` on (the problem's, or the sequence's it holds) and the padded kernels'
   columns past head_dim are not stored; key 0 is row k_start (a packed sequence's first). */
template <typename Tr, int NC>
__device__ __forceinline__ void fa3_bwd_store_dkv(const float (&dk)[NC / 2],
                                                  const float (&dv)[NC / 2], const cuda_bwd_args &a,
                                                  int hk, int b, int key0, int col0, int warp,
                                                  int g, int t, int keys, int k_start) {
  typedef typename Tr::elem E;
  static_assert(NC % 32 == 0, "whole groups of four chunks");
  E *dkp = static_cast<E *>(a.dk) + b * a.dk_str.batch + hk * a.dk_str.head +
           (int64_t)k_start * a.dk_str.row;
  E *dvp = static_cast<E *>(a.dv) + b * a.dv_str.batch + hk * a.dv_str.head +
           (int64_t)k_start * a.dv_str.row;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 16 * warp + g + 8 * r;
#pragma unroll
    for (int j0 = 0; j0 < NC / 8; j0 += 4) {
      uint32_t xk[4], xv[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int e = 4 * (j0 + k) + 2 * r;
        xk[k] = Tr::pack(dk[e] * a.p.scale, dk[e + 1] * a.p.scale);
        xv[k] = Tr::pack(dv[e], dv[e + 1]);
      }
      quad_transpose(xk, t);
      quad_transpose(xv, t);
      const int col = col0 + 8 * (j0 + t);
      if (key < keys && col < a.p.head_dim) {
        *reinterpret_cast<uint4 *>(dkp + (int64_t)key * a.dk_str.row + col) =
            make_uint4(xk[0], xk[1], xk[2], xk[3]);
        *reinterpret_cast<uint4 *>(dvp + (int64_t)key * a.dv_str.row + col) =
            make_uint4(xv[0], xv[1], xv[2], xv[3]);
      }
    }
  }
}

#endif /* FA_CUDA_FA3_BWD_EPILOGUE_CUH */
