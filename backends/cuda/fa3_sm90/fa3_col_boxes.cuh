/*
 * fa3_col_boxes.cuh: the 64-column boxes of a padded head dim that the FlashAttention-3 kernels
 * load. At head dim 192 (padded to 256) the last box lies wholly past the tensor's columns. TMA
 * would fill it with zeros, but through a sequence's view (fa3_seq_tensor_map, whose base lies
 * before the tensor) such a load faulted on the H100 and the H200, depending on the allocations
 * around the tensor. So the kernels over sequences skip it in their loads and zero that box of
 * each buffer once, at the start: the products over the padded columns then add zeros, as they
 * did from TMA's fill, provided nothing else writes there (the forward's epilogue stores zeros in
 * those columns). The dense kernels keep the load (their maps start at the tensor). The loads
 * stay an unrolled loop over every box with the last one predicated: a loop bounded by the box
 * count made ptxas spill in the producer and cost the forward 1-6% on an H100.
 */
#ifndef FA_CUDA_FA3_COL_BOXES_CUH
#define FA_CUDA_FA3_COL_BOXES_CUH

#include "../common/sm90_async.cuh"

/* The boxes that hold a row of head_dim columns. */
__device__ __forceinline__ int fa3_col_boxes(int head_dim) { return (head_dim + 63) / 64; }

/* Zeros the boxes past the `loaded` ones in each of n buffers of `boxes` boxes of box_bytes (a
   multiple of 16), the buffers buffer_bytes apart from `first`; by every thread of the block,
   ordered before the async proxy's reads (TMA, wgmma) by the fence. The caller's __syncthreads
   ends it. Nothing to do where every box is loaded. */
__device__ __forceinline__ void fa3_zero_unloaded_boxes(unsigned char *first, int n, int boxes,
                                                        int loaded, int box_bytes,
                                                        int buffer_bytes) {
  if (loaded >= boxes) return;
  const int chunks = (boxes - loaded) * box_bytes / 16;
  for (int i = threadIdx.x; i < n * chunks; i += blockDim.x) {
    unsigned char *tail = first + (i / chunks) * buffer_bytes + loaded * box_bytes;
    reinterpret_cast<uint4 *>(tail)[i % chunks] = make_uint4(0u, 0u, 0u, 0u);
  }
  fence_proxy_async_smem();
}

#endif /* FA_CUDA_FA3_COL_BOXES_CUH */
