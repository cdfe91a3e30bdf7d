/*
 * hg_mfma_emu.h: nvcc only: the documented semantics of the wave64 16x16x16 MFMA instruction
 * (cdna/hg_mfma_layout.h), emulated by the two CUDA warps that stand for one wavefront. It exists
 * so that the MFMA kernels' code around the instruction runs in the hip-generic-on-cuda test
 * plugin on an NVIDIA GPU: each lane leaves its operands in shared memory, the wave's 64 threads
 * meet at a named barrier, and each lane sums the 16 products of its four results in fp32 (the
 * instruction's own summation order is not modelled: results agree to rounding).
 * Costs HG_MFMA_EMU_SMEM bytes (cdna/hg_mfma_layout.h) of static shared memory per block.
 */
#ifndef FA_HIP_HG_MFMA_EMU_H
#define FA_HIP_HG_MFMA_EMU_H

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/portable/fa_gpu_portable.h"

/* The 64 threads of wave w (warps 2w and 2w + 1) wait for each other; barrier 0 is
   __syncthreads'. */
FA_GPU_DEVICE void hg_mfma_emu_wave_barrier(int wave) {
  asm volatile("bar.sync %0, %1;" ::"r"(wave + 1), "r"(HG_MFMA_LANES) : "memory");
}

template <int BF16>
FA_GPU_DEVICE void hg_mfma_step(float *acc, const uint16_t *av, const uint16_t *bv) {
  __shared__ uint16_t ea[HG_MFMA_WAVES][HG_MFMA_LANES][4], eb[HG_MFMA_WAVES][HG_MFMA_LANES][4];
  static_assert(sizeof ea + sizeof eb == HG_MFMA_EMU_SMEM, "the size the test plugin allows for");
  const int wave = fa_gpu_tid() / HG_MFMA_LANES, lane = fa_gpu_tid() % HG_MFMA_LANES;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    ea[wave][lane][e] = av[e];
    eb[wave][lane][e] = bv[e];
  }
  hg_mfma_emu_wave_barrier(wave);
  const int j = hg_mfma_out_col(lane);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int i = hg_mfma_out_row(HG_MI_MFMA, lane, e);
    float sum = acc[e];
    for (int k = 0; k < HG_MFMA_DIM; ++k)
      sum = fmaf(fa_gpu_load<BF16>(&ea[wave][hg_mfma_src_lane(i, k)][hg_mfma_src_item(k)]),
                 fa_gpu_load<BF16>(&eb[wave][hg_mfma_src_lane(j, k)][hg_mfma_src_item(k)]), sum);
    acc[e] = sum;
  }
  hg_mfma_emu_wave_barrier(wave); /* the operands are read before the next step overwrites them */
}

#endif /* FA_HIP_HG_MFMA_EMU_H */
