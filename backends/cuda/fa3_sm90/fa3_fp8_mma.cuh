/*
 * fa3_fp8_mma.cuh: the FP8 forward's warpgroup products by wgmma k32 (sm90_wgmma_fp8.cuh), both
 * operands K-major in shared memory or A from registers: S = Q Kᵀ from Q's and K's rows of head-dim
 * bytes, O += P V with P from registers and Vᵀ's rows of key bytes; and P converted to e4m3 in the
 * A operand's place (fa3_fp8_layout.h).
 */
#ifndef FA_CUDA_FA3_FP8_MMA_CUH
#define FA_CUDA_FA3_FP8_MMA_CUH

#include <stdint.h>

#include "../common/sm90_async.cuh"
#include "../common/sm90_wgmma_fp8.cuh"
#include "fa3_fp8_layout.h"

/* A descriptor of K-major rows of ROW bytes (64 or 128) as TMA wrote them under the swizzle of
   that width: 8-row atoms 8 ROW bytes apart (stride byte offset), the leading byte offset unused
   (one k-step of 32 bytes never leaves a row), layout type 1 (128-byte swizzle) or 2 (64-byte). */
template <int ROW>
__device__ __forceinline__ uint64_t fa3_fp8_desc(uint32_t addr) {
  static_assert(ROW == 64 || ROW == 128, "swizzled rows of 64 or 128 bytes");
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
         ((uint64_t)((8 * ROW) >> 4) << 32) | ((uint64_t)(ROW == 128 ? 1 : 2) << 62);
}

/* S = Q Kᵀ of one consumer: Q's and K's rows are HD bytes, in boxes of ROW = min(HD, 128) bytes a
   row (BOXQ, BOXK bytes apart); k-step ks is 32 columns, 32 bytes into box ks / (ROW / 32). The
   descriptors are stepped by adding the offset to the start-address field (16-byte units; no
   carry: shared addresses are below 256 KiB). */
template <int HD, int BN, int BOXQ, int BOXK, bool E5M2>
__device__ __forceinline__ void fa3_fp8_issue_s(float (&s)[BN / 2], const unsigned char *q,
                                                const unsigned char *k) {
  constexpr int ROW = HD < 128 ? HD : 128, PER = ROW / 32;
  const uint64_t dq = fa3_fp8_desc<ROW>(smem_addr_opaque(q));
  const uint64_t dk = fa3_fp8_desc<ROW>(smem_addr_opaque(k));
#pragma unroll
  for (int ks = 0; ks < HD / 32; ++ks) {
    const int qoff = (ks / PER) * BOXQ + (ks % PER) * 32,
              koff = (ks / PER) * BOXK + (ks % PER) * 32;
    wgmma_f8<BN>::template ss<E5M2, E5M2>(s, dq + (qoff >> 4), dk + (koff >> 4), ks > 0);
  }
}

/* O += P V (O = P V for a tile's first key tile, add 0): Vᵀ's stage is HD rows of BN = 128 key
   bytes (one box under the 128-byte swizzle); k-step kk is keys 32 kk.., 32 bytes on. P is e4m3
   whatever V's format. */
template <int HD, int BN, bool E5M2>
__device__ __forceinline__ void fa3_fp8_issue_pv(float (&o)[HD / 2],
                                                 const uint32_t (&pa)[BN / 32][4],
                                                 const unsigned char *vt, int add) {
  static_assert(BN == 128, "Vᵀ's rows are one 128-byte swizzle row of keys");
  const uint64_t dv = fa3_fp8_desc<128>(smem_addr_opaque(vt));
#pragma unroll
  for (int kk = 0; kk < BN / 32; ++kk)
    wgmma_f8<HD>::template rs<false, E5M2>(o, pa[kk], dv + ((kk * 32) >> 4), kk > 0 || add);
}

/* Four floats to e4m3 (round to nearest even, saturated to +-448, NaN kept), a in the lowest
   byte: cvt's x2 form puts its first source in the upper byte. */
__device__ __forceinline__ uint32_t fa3_fp8_pack4(float a, float b, float c, float d) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  return r;
}

/* P (the S accumulator after the softmax, in [0, 1]) as P V's A operand: byte b of register r of
   k-step kk is accumulator element fa3_fp8_p_index(kk, r, b); no data leaves its thread. */
template <int BN>
__device__ __forceinline__ void fa3_fp8_pack_p(const float (&s)[BN / 2],
                                               uint32_t (&pa)[BN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 32; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      pa[kk][r] = fa3_fp8_pack4(s[fa3_fp8_p_index(kk, r, 0)], s[fa3_fp8_p_index(kk, r, 1)],
                                s[fa3_fp8_p_index(kk, r, 2)], s[fa3_fp8_p_index(kk, r, 3)]);
}

#endif /* FA_CUDA_FA3_FP8_MMA_CUH */
