/*
 * sm90_async.cuh: the Hopper (sm_90a) asynchronous machinery the FlashAttention-3 kernels are
 * made of, as inline PTX: bulk reductions into global memory (fa2's sm_90 backward uses them
 * too), mbarriers, TMA tile loads (cp.async.bulk.tensor) completing on an mbarrier, warpgroup MMA
 * (wgmma.mma_async) with shared-memory matrix descriptors (the MMA wrappers of every tile width are
 * generated: sm90_wgmma.cuh), named barriers.
 *
 * Shared-memory operand layout used throughout: tiles written by TMA with 128-byte swizzle, rows
 * of 64 bf16/f16 (128 bytes), 8-row groups (1024 bytes) as the swizzle atom; a wider row (head
 * dim 128, 256) is stored as consecutive 64-column boxes. What the descriptors' strides mean for
 * each operand form was checked on the H200 by tests/gpu/sm90_probe.cu against a float64
 * reference (K-major A and B; MN-major B for P V).
 */
#ifndef FA_CUDA_SM90_ASYNC_CUH
#define FA_CUDA_SM90_ASYNC_CUH

#include <stdint.h>

#include "sm90_wgmma.cuh"

/* --- bulk reductions and the async proxy ------------------------------------------------ */

/* Also in the host pass, which parses the sm_90a kernels that call these. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
/* sm_90 bulk reductions (done by the TMA unit, not the issuing warp's memory pipe): adds `bytes`
   (a multiple of 16, both addresses 16-byte aligned) of fp32 from shared memory into global
   memory, element by element atomically with respect to other reductions. Per-thread groups:
   bulk_commit closes one; bulk_wait_read<N> waits until at most N of this thread's groups still
   read their shared source, bulk_wait<N> until they are complete. Shared memory written by
   ordinary stores needs fence_proxy_async_smem() by the writers before a bulk operation reads
   it. */
__device__ __forceinline__ void bulk_reduce_add_f32(float *gdst, uint32_t ssrc, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst),
      "r"(ssrc), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* An sm_90 bulk copy (the TMA unit's, without a tensor map) of `bytes` (a multiple of 16, both
   addresses 16-byte aligned) from global into shared memory, counted as transactions on the
   mbarrier at bar (a shared address). */
__device__ __forceinline__ void bulk_load(uint32_t sdst, const void *gsrc, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(sdst),
      "l"(gsrc), "r"(bytes), "r"(bar)
      : "memory");
}
#endif

/* --- mbarriers ---------------------------------------------------------------------------- */

__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)),
      "r"(count)
      : "memory");
}
/* Makes initialised mbarriers visible to the async proxy (TMA) before first use. */
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* One arrival that also announces `bytes` of transactions (the TMA loads that complete on it). */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar))
      : "memory");
}
/* `count` arrivals at once (for a thread that arrives on behalf of others). */
__device__ __forceinline__ void mbar_arrive_n(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(bar)),
               "r"(count)
               : "memory");
}
/* Stores x to this thread's slot in shared memory (never read), so that a later wgmma wait
   stays after x's computation: ptxas keeps shared stores and wgmma waits in program order but
   moves arithmetic freely across waits, and it had placed a wgmma wait early enough to stall
   the arithmetic meant to run under the wgmma. (An mbarrier arrive that needs x pins the wait
   too, but an mbarrier nobody waits on fails compute-sanitizer's synccheck.) */
__device__ __forceinline__ void pin_after(float *slot, float x) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(slot)), "f"(x)
               : "memory");
}
/* Waits until the phase with parity `parity` of the barrier has completed. */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity) {
  const uint32_t addr = (uint32_t)__cvta_generic_to_shared(bar);
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(addr),
      "r"(parity)
      : "memory");
}

/* mbar_wait for a thread that waits long and has nothing else to do: each try asks to be
   suspended up to `ns` nanoseconds (PTX suspendTimeHint) rather than the system's default, so
   that its spinning takes fewer issue slots from the warps beside it on its SM sub-partition. */
__device__ __forceinline__ void mbar_wait_sleepy(uint64_t *bar, int parity, uint32_t ns) {
  const uint32_t addr = (uint32_t)__cvta_generic_to_shared(bar);
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(addr),
      "r"(parity), "r"(ns)
      : "memory");
}

/* --- TMA ---------------------------------------------------------------------------------- */

/* A 2-D box of the tensor map (coordinates innermost first: column, row) into shared memory,
   completing `box bytes` of transactions on bar. tmap: the address of a CUtensorMap passed as a
   __grid_constant__ kernel parameter. */
__device__ __forceinline__ void tma_load_2d(void *dst, const void *tmap, uint64_t *bar, int col,
                                            int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
      "l"(tmap), "r"(col), "r"(row), "r"((uint32_t)__cvta_generic_to_shared(bar))
      : "memory");
}

/* A 4-D box (column, row, head, batch), as tma_load_2d. */
__device__ __forceinline__ void tma_load_4d(void *dst, const void *tmap, uint64_t *bar, int col,
                                            int row, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4, %5}], [%6];\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
      "l"(tmap), "r"(col), "r"(row), "r"(head), "r"(batch),
      "r"((uint32_t)__cvta_generic_to_shared(bar))
      : "memory");
}

/* A 4-D box of shared memory (laid out as tma_load_4d's) stored to the tensor at (column, row,
   head, batch) by TMA in this thread's bulk group (ptx.cuh: bulk_commit, bulk_wait_read); elements
   outside the tensor are not written. */
__device__ __forceinline__ void tma_store_4d(const void *tmap, const void *src, int col, int row,
                                             int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          tmap),
      "r"((uint32_t)__cvta_generic_to_shared(src)), "r"(col), "r"(row), "r"(head), "r"(batch)
      : "memory");
}
/* Warpgroup register budgets (all 128 threads of the warpgroup execute it): the producer gives
   registers back, the consumers take them. */
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* --- wgmma -------------------------------------------------------------------------------- */

/* A shared-memory matrix descriptor: start address, leading and stride byte offsets (all in
   16-byte units in the descriptor), 128-byte swizzle (mode 1, bits 62-63). */
__device__ __forceinline__ uint64_t wgmma_desc_sw128_at(uint32_t addr, uint32_t lbo_bytes,
                                                        uint32_t sbo_bytes) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo_bytes >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo_bytes >> 4) & 0x3FFF) << 32) | ((uint64_t)1 << 62);
}
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void *smem, uint32_t lbo_bytes,
                                                     uint32_t sbo_bytes) {
  return wgmma_desc_sw128_at((uint32_t)__cvta_generic_to_shared(smem), lbo_bytes, sbo_bytes);
}
/* A shared-memory address the compiler cannot see through: descriptors built from it are built
   again where used instead of being hoisted out of a loop and kept in registers. */
__device__ __forceinline__ uint32_t smem_addr_opaque(const void *smem) {
  uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("" : "+r"(addr));
  return addr;
}
/* Before the first wgmma that reads registers written by ordinary instructions (accumulators,
   A fragments). */
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed groups of this warpgroup are pending. */
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator reads/writes across an asynchronous wgmma. */
template <int R>
__device__ __forceinline__ void wgmma_fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/* The same for A fragments read by an asynchronous wgmma: keeps them alive (their registers not
   reused) until the wgmma that reads them has been waited for. */
template <int K>
__device__ __forceinline__ void wgmma_fence_frags(uint32_t (&a)[K][4]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[k][i])::"memory");
}

/* --- named barriers ------------------------------------------------------------------------ */

/* Barrier `id` (1-15; 0 is __syncthreads) completes once `count` threads (a multiple of 32) have
   arrived, counting both kinds: bar_sync arrives and waits, bar_arrive only arrives. */
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

#endif /* FA_CUDA_SM90_ASYNC_CUH */
