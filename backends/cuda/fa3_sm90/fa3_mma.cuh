/*
 * fa3_mma.cuh: the FlashAttention-3 kernels' warpgroup products by wgmma: S = Q Kᵀ from shared
 * memory, O += P V with P from registers (the backward issues its Sᵀ, dPᵀ, dV and dK through the
 * same two).
 */
#ifndef FA_CUDA_FA3_MMA_CUH
#define FA_CUDA_FA3_MMA_CUH

#include "../common/sm90_async.cuh"
#include "../common/sm90_wgmma.cuh"

/* S = Q Kᵀ of one consumer: k-step ks is 16 columns, 32 bytes into 64-column box ks / 4. One
   descriptor per operand from an opaque base, stepped by adding the k-step's offset to its
   start-address field (16-byte units; no carry: shared addresses are below 256 KiB). Built per
   k-step from addresses, the compiler hoisted all 2 x HD / 16 descriptors out of the loop into
   registers, which spilled once the tile loop held more state. */
template <int HD, int BN, int BOXQ, int BOXK, bool F16>
__device__ __forceinline__ void fa3_issue_s(float (&s)[BN / 2], const unsigned char *q,
                                            const unsigned char *k) {
  const uint64_t dq = wgmma_desc_sw128_at(smem_addr_opaque(q), 16, 1024);
  const uint64_t dk = wgmma_desc_sw128_at(smem_addr_opaque(k), 16, 1024);
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int qoff = (ks / 4) * BOXQ + (ks % 4) * 32, koff = (ks / 4) * BOXK + (ks % 4) * 32;
    wgmma_n<BN>::template ss<0, F16>(s, dq + (qoff >> 4), dk + (koff >> 4), ks > 0);
  }
}

/* O += P V (O = P V for a tile's first key tile, add 0: its first k-step does not read O, so O
   needs no clearing between tiles): V MN-major, k-step kk is 16 keys (2048 bytes) on; 64-column
   boxes lbo bytes apart (V's own, BOXK; with MMA_ROW_SUM, NP = HD + 8 and the second box is the box
   of ones, whatever its distance from this stage). */
template <int NP, int BN, bool F16>
__device__ __forceinline__ void fa3_issue_pv(float (&o)[NP / 2], const uint32_t (&pa)[BN / 16][4],
                                             const unsigned char *v, uint32_t lbo, int add) {
  const uint64_t dv = wgmma_desc_sw128_at(smem_addr_opaque(v), lbo, 1024);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    wgmma_n<NP>::template rs<1, F16>(o, pa[kk], dv + (kk * 2048 >> 4), kk > 0 || add);
}

#endif /* FA_CUDA_FA3_MMA_CUH */
