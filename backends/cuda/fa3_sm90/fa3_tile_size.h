/*
 * fa3_tile_size.h: which FlashAttention-3 kernel runs for a head dim, mask and key count on a
 * Hopper GPU (sm_90a, 227 KiB of shared memory a block). The forward's compiled configurations
 * (query tile, consumer warpgroups, key tile, features), the shared memory each takes and the
 * pick among them; the backward's tiles, stages and shared memory. Plain C: the plugin's host code
 * and the kernels read the same table.
 *
 * The picks are the fastest measured against cuDNN in the same runs on an H200
 * (bench/RESULTS.md); FlashAttention-3's 192 x 128, 128 x 176 and 128 x 80 were the starting
 * points. Head dims 96 and 192 run the 128 and 256 kernels: TMA reads the missing columns as
 * zeros, the epilogue stores the real ones.
 */
#ifndef FA_CUDA_FA3_TILE_SIZE_H
#define FA_CUDA_FA3_TILE_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "../fa2_sm80/fa2_args.h"

/* Every forward configuration overlaps a consumer's S = Q Kᵀ of key tile j + 1 with its P V of
   tile j (the softmax of j + 1 runs under P V), and its consumer warpgroups take ping-pong turns
   issuing their MMAs, so one's softmax runs under the others' MMAs. The features that differ: */

/* PERSISTENT: at most one block per SM, each looping over tiles, so that the producer loads the
   next tile while the consumers finish this one. */
#define FA3_PERSISTENT 1
/* TWO_Q_BUFFERS: the next tile's Q loads while this tile still reads its own (with one, only
   after this tile's last Q Kᵀ). */
#define FA3_TWO_Q_BUFFERS 2
/* TMA_EPILOGUE: O is written into its tile's Q buffer (Q is no longer read) and stored by TMA
   from a thread of its own, which then hands the buffer back for a later tile's Q. */
#define FA3_TMA_EPILOGUE 4
/* DYNAMIC_SCHEDULE (with PERSISTENT): a block's producer takes each next tile from a global
   counter (in the call's workspace), largest first within chunks of (head, batch) pairs whose K
   and V fit in half of L2 (fa3_tile_scheduler.h): under a causal mask a static deal leaves some
   blocks ~15% more work than the mean. */
#define FA3_DYNAMIC_SCHEDULE 8
/* PINNED_SOFTMAX: the wait for the previous tile's P V is pinned after this tile's softmax (a
   shared store of the softmax's row sums); ptxas otherwise places it right after the wait for S,
   and the softmax never runs under its own warpgroup's P V. */
#define FA3_PINNED_SOFTMAX 16
/* EPILOGUE_IN_KV_STAGE (with TMA_EPILOGUE, two consumers): O is written into the tile's last K/V
   stage instead of its Q buffer (consumer 0's rows into the K stage once consumer 1 has read it,
   consumer 1's into the V stage once consumer 0's last P V has), and the store thread releases
   that stage after the store. The Q buffer is released after the tile's last Q Kᵀ, so that with
   one Q buffer the next tile's Q loads during the last P V. */
#define FA3_EPILOGUE_IN_KV_STAGE 32
/* THREE_KV_STAGES: three K/V stages instead of two: the producer runs two key tiles ahead. */
#define FA3_THREE_KV_STAGES 64
/* MMA_ROW_SUM (head dim 64): the tensor core forms each row's sum of P: P V runs at N = 72, the
   8 columns past V reading a box of ones (BN rows of 128 bytes after the K/V stages), so the
   softmax drops its additions and the rescale of O covers the sum. The sum is that of the rounded
   P that P V multiplies. */
#define FA3_MMA_ROW_SUM 128
/* SPLIT_ROW_MAX: the softmax's second row's max is computed under the first row's exps. */
#define FA3_SPLIT_ROW_MAX 256
/* OWN_KEY_END: a consumer computes only up to the last key tile its own 64 rows see; the
   producer releases the block's later stages on its behalf and the consumer takes their turns
   without work, so a block under a causal mask skips the key tiles its first rows do not reach. */
#define FA3_OWN_KEY_END 512
/* SHORT_BLOCK_FIRST (three consumers, TMA epilogue from the Q buffer): the query blocks are cut
   from the sequence's end in 64-row slabs, so that the short block (1k rows are 5 1/3 blocks of
   192) comes first, where under a causal mask it sees one key tile, rather than last, where one
   consumer works through every key tile while the others idle. Without GQA packing; O is stored
   in 64-row boxes, the slabs that hold rows. */
#define FA3_SHORT_BLOCK_FIRST 1024
/* SEQS (with the dynamic schedule and the TMA epilogue, without SHORT_BLOCK_FIRST): the forward
   over sequences of their own lengths (cu_seqlens_q/k, seqused_k; common/seq_index.cuh). The
   blocks take the tiles of each sequence in turn (its heads, its query blocks largest first), so
   a short sequence costs its own tiles only; each sequence's rows and keys are read and written
   through tensor maps whose row bound is that sequence's end (fa3_seq_tensor_map), so TMA reads
   zeros past it and writes nothing there. */
#define FA3_SEQS 2048
/* FP8 (fa3_fp8_kernel.cuh): q, k and v in e4m3 or e5m2, out f16 or bf16, on the FP8 tensor cores
   (wgmma k32): Q and K in rows of head-dim bytes, V transposed by a pre-pass into the call's
   workspace (both operands of an FP8 wgmma are K-major), P rounded to e4m3. Of the features above
   it takes PERSISTENT, DYNAMIC_SCHEDULE, TWO_Q_BUFFERS, THREE_KV_STAGES, PINNED_SOFTMAX and
   SPLIT_ROW_MAX; its output goes straight from the accumulators to memory. */
#define FA3_FP8 4096

/* The compiled forward configurations: X(name, padded head dim, consumer warpgroups, key tile,
   features). A block holds 64 query rows per consumer warpgroup. Measured on the H200:
   - hd64: three consumers (the softmax is a large share of a tile at 64 columns); three K/V
     stages (+0-3%); row sums by the tensor core (+1-1.6% at 512-1k keys); the split row max (+3-4%
     without a mask at 1k and 8k); under a mask each consumer's own key end (+4.6% at causal 1k
     against three consumers without it) and, from 1k keys, the short block first (+4.4% at causal
     1k, -1.6% at 512).
   - hd128: two Q buffers and the pinned softmax (+3-5% at 4k-16k without a mask); under a mask
     the dynamic schedule, pinned (+1-4.5%); the split row max (+0.6-1.3%).
   - hd256: one Q buffer (two do not fit), O through the last K/V stage (+5% at 1k without a mask,
     +7% under one); pinned without a mask (+4-6% at 4k-16k); under a mask each consumer's own key
     end up to 4k keys (+4.2% at causal 1k, -1.6% at 16k), and up to 1k keys 64-key tiles
     (masked_bn64: less of the diagonal computed; causal 512 +3.5%, 1k +1.5% on an H100; without
     a mask 64-key tiles gained 0-2% at 512 and lost 2.5% at 1k).
   - *_seqs: the forward over sequences, at each head dim the masked configuration's features
     but the short block first (the schedule's order is its own).
   - *_low_smem: where the planned configuration does not fit a device's shared memory (a testing
     limit, FA_CUDA_SMEM_LIMIT: every sm_90 GPU has 227 KiB).
   - *_fp8: FP8 inputs (not measured yet): the bf16 configurations' consumers at each head dim,
     key tiles of 128 (one 128-byte row of Vᵀ), the dynamic schedule for every mask, three K/V
     stages where they fit. */
#define FA3_FWD_CONFIGS(X)                                                                      \
  X(hd64, 64, 3, 128,                                                                           \
    FA3_PERSISTENT | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE | FA3_THREE_KV_STAGES |               \
        FA3_MMA_ROW_SUM | FA3_SPLIT_ROW_MAX)                                                    \
  X(hd64_masked_short, 64, 3, 128,                                                              \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE |              \
        FA3_THREE_KV_STAGES | FA3_MMA_ROW_SUM | FA3_SPLIT_ROW_MAX | FA3_OWN_KEY_END)            \
  X(hd64_masked, 64, 3, 128,                                                                    \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE |              \
        FA3_THREE_KV_STAGES | FA3_MMA_ROW_SUM | FA3_SPLIT_ROW_MAX | FA3_OWN_KEY_END |           \
        FA3_SHORT_BLOCK_FIRST)                                                                  \
  X(hd64_low_smem, 64, 3, 128, 0)                                                               \
  X(hd128, 128, 2, 128,                                                                         \
    FA3_PERSISTENT | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE | FA3_PINNED_SOFTMAX |                \
        FA3_SPLIT_ROW_MAX)                                                                      \
  X(hd128_masked, 128, 2, 128,                                                                  \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE |              \
        FA3_PINNED_SOFTMAX | FA3_SPLIT_ROW_MAX)                                                 \
  X(hd128_low_smem, 128, 2, 128, FA3_TMA_EPILOGUE)                                              \
  X(hd256, 256, 2, 80,                                                                          \
    FA3_PERSISTENT | FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE | FA3_PINNED_SOFTMAX |         \
        FA3_SPLIT_ROW_MAX)                                                                      \
  X(hd256_masked_short, 256, 2, 80,                                                             \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE |       \
        FA3_SPLIT_ROW_MAX | FA3_OWN_KEY_END)                                                    \
  X(hd256_masked, 256, 2, 80,                                                                   \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE |       \
        FA3_SPLIT_ROW_MAX)                                                                      \
  X(hd256_masked_bn64, 256, 2, 64,                                                              \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE |       \
        FA3_SPLIT_ROW_MAX | FA3_OWN_KEY_END)                                                    \
  X(hd64_seqs, 64, 3, 128,                                                                      \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE |              \
        FA3_THREE_KV_STAGES | FA3_MMA_ROW_SUM | FA3_SPLIT_ROW_MAX | FA3_OWN_KEY_END | FA3_SEQS) \
  X(hd128_seqs, 128, 2, 128,                                                                    \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_TMA_EPILOGUE |              \
        FA3_PINNED_SOFTMAX | FA3_SPLIT_ROW_MAX | FA3_SEQS)                                      \
  X(hd256_seqs, 256, 2, 80,                                                                     \
    FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE |       \
        FA3_SPLIT_ROW_MAX | FA3_SEQS)                                                           \
  X(hd64_fp8, 64, 3, 128,                                                                       \
    FA3_FP8 | FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_THREE_KV_STAGES | \
        FA3_SPLIT_ROW_MAX)                                                                      \
  X(hd128_fp8, 128, 2, 128,                                                                     \
    FA3_FP8 | FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_THREE_KV_STAGES | \
        FA3_PINNED_SOFTMAX | FA3_SPLIT_ROW_MAX)                                                 \
  X(hd256_fp8, 256, 2, 128,                                                                     \
    FA3_FP8 | FA3_PERSISTENT | FA3_DYNAMIC_SCHEDULE | FA3_TWO_Q_BUFFERS | FA3_PINNED_SOFTMAX |  \
        FA3_SPLIT_ROW_MAX)

typedef enum fa3_fwd_config_id {
#define FA3_ID(name, hd, wgs, bn, flags) FA3_FWD_##name,
  FA3_FWD_CONFIGS(FA3_ID)
#undef FA3_ID
      FA3_FWD_CONFIG_COUNT
} fa3_fwd_config_id;

/* Two (THREE_KV_STAGES: three) K/V stages, one or two Q buffers, each in 64-column boxes (FP8:
   rows of head-dim bytes, V's stages the same bytes transposed); the box of ones (MMA_ROW_SUM: BN
   rows of 128 bytes); 1 KiB for the alignment the 128-byte swizzle needs. */
#define FA3_FWD_STAGES_OF(flags) ((flags)&FA3_THREE_KV_STAGES ? 3 : 2)
#define FA3_FWD_ELEM_BYTES(flags) ((flags)&FA3_FP8 ? 1 : 2)
#define FA3_FWD_SMEM(hd, wgs, bn, flags)                       \
  (((size_t)64 * (wgs) * ((flags)&FA3_TWO_Q_BUFFERS ? 2 : 1) + \
    2 * (size_t)FA3_FWD_STAGES_OF(flags) * (size_t)(bn)) *     \
       (size_t)(hd) * (size_t)FA3_FWD_ELEM_BYTES(flags) +      \
   ((flags)&FA3_MMA_ROW_SUM ? (size_t)(bn)*128 : 0) + 1024)

/* The padded head dim of a head dim the forward runs (64, 96, 128, 192, 256), else 0. */
static inline int fa3_fwd_padded_head_dim(int64_t head_dim) {
  return head_dim == 64                       ? 64
         : head_dim == 96 || head_dim == 128  ? 128
         : head_dim == 192 || head_dim == 256 ? 256
                                              : 0;
}

/* The shared memory a configuration's block takes. */
static inline size_t fa3_fwd_config_smem(int id) {
  switch (id) {
#define FA3_SMEM_CASE(name, hd, wgs, bn, flags) \
  case FA3_FWD_##name:                          \
    return FA3_FWD_SMEM(hd, wgs, bn, flags);
    FA3_FWD_CONFIGS(FA3_SMEM_CASE)
#undef FA3_SMEM_CASE
    default:
      return 0;
  }
}

/* The forward's configuration for a head dim, a mask (causal or window: masked != 0) and a key
   count on a device whose blocks may take smem_limit bytes of shared memory: the planned one,
   else (where it does not fit) the head dim's low-memory one, else -1 (fa2 runs it). */
static inline int fa3_fwd_tile_size(int64_t head_dim, int masked, int64_t seqlen_k,
                                    int64_t smem_limit) {
  int planned, low;
  switch (fa3_fwd_padded_head_dim(head_dim)) {
    case 64:
      planned = !masked            ? FA3_FWD_hd64
                : seqlen_k >= 1024 ? FA3_FWD_hd64_masked
                                   : FA3_FWD_hd64_masked_short;
      low = FA3_FWD_hd64_low_smem;
      break;
    case 128:
      planned = masked ? FA3_FWD_hd128_masked : FA3_FWD_hd128;
      low = FA3_FWD_hd128_low_smem;
      break;
    case 256:
      planned = !masked            ? FA3_FWD_hd256
                : seqlen_k <= 1024 ? FA3_FWD_hd256_masked_bn64
                : seqlen_k <= 4096 ? FA3_FWD_hd256_masked_short
                                   : FA3_FWD_hd256_masked;
      low = -1; /* every hd256 configuration takes 193 KiB or more */
      break;
    default:
      return -1;
  }
  if ((int64_t)fa3_fwd_config_smem(planned) <= smem_limit) return planned;
  return low >= 0 && (int64_t)fa3_fwd_config_smem(low) <= smem_limit ? low : -1;
}

/* The forward over sequences' configuration for a head dim on a device whose blocks may take
   smem_limit bytes of shared memory, else -1 (fa2 runs it). */
static inline int fa3_fwd_seqs_tile_size(int64_t head_dim, int64_t smem_limit) {
  int id;
  switch (fa3_fwd_padded_head_dim(head_dim)) {
    case 64:
      id = FA3_FWD_hd64_seqs;
      break;
    case 128:
      id = FA3_FWD_hd128_seqs;
      break;
    case 256:
      id = FA3_FWD_hd256_seqs;
      break;
    default:
      return -1;
  }
  return (int64_t)fa3_fwd_config_smem(id) <= smem_limit ? id : -1;
}

/* The FP8 forward's configuration for a head dim (64, 128 and 256 only: the FP8 kernel reads no
   columns past the head dim) on a device whose blocks may take smem_limit bytes, else -1. */
static inline int fa3_fwd_fp8_tile_size(int64_t head_dim, int64_t smem_limit) {
  int id;
  switch (head_dim) {
    case 64:
      id = FA3_FWD_hd64_fp8;
      break;
    case 128:
      id = FA3_FWD_hd128_fp8;
      break;
    case 256:
      id = FA3_FWD_hd256_fp8;
      break;
    default:
      return -1;
  }
  return (int64_t)fa3_fwd_config_smem(id) <= smem_limit ? id : -1;
}

/* The backward (fa3_bwd_kernel.cuh): query tiles of 64 rows; kernel head dims 64, 128 (96 runs
   on 128) and 256 (192 runs on 256).
   Narrow (hd 64, 128): one block per 128-key tile, two consumers of 64 keys. Shared memory: K and
   V (128 x hd each); Q, dO, dS (64 x 128) and the step's LSE and D (64 floats each) in two stages;
   the fp32 dQ staging tile (64 x hd); up to ten mbarriers; 1 KiB for the swizzle's alignment.
   Wide (hd 256): one block per 64-key tile, each consumer half of the head dim of dK and dV (their
   accumulators of 128 keys would not fit in registers). Shared memory: K and V (64 x hd each); Q
   and dO in two stages; Pᵀ and dSᵀ (64 keys x 64 queries each) in two stages; LSE and D in two
   stages; no dQ staging (the consumers add dQ from registers); the mbarriers and alignment. */
#define FA3_BWD_WIDE(hd) ((hd) > 128)
#define FA3_BWD_TILE_M 64
#define FA3_BWD_TILE_N(hd) (FA3_BWD_WIDE(hd) ? 64 : 128)
/* K/V buffers of the narrow kernels: two at hd64 (the next key tile's loaded during the last
   steps of the current one, in the persistent grid), one at hd128 (no room: there the next
   tile's load runs under the current one's dK/dV stores). */
#define FA3_BWD_KV_STAGES(hd) ((hd) <= 64 ? 2 : 1)
#define FA3_BWD_SMEM_NARROW(hd)                                                             \
  ((size_t)FA3_BWD_KV_STAGES(hd) * 2 * 128 * (hd)*2 + (size_t)4 * FA3_BWD_TILE_M * (hd)*2 + \
   (size_t)2 * FA3_BWD_TILE_M * 128 * 2 + (size_t)FA3_BWD_TILE_M * (hd)*4 +                 \
   (size_t)4 * FA3_BWD_TILE_M * 4 + (size_t)10 * 8 + 1024)
#define FA3_BWD_SMEM_WIDE(hd)                                      \
  ((size_t)2 * 64 * (hd)*2 + (size_t)4 * FA3_BWD_TILE_M * (hd)*2 + \
   (size_t)4 * FA3_BWD_TILE_M * 64 * 2 + (size_t)4 * FA3_BWD_TILE_M * 4 + (size_t)7 * 8 + 1024)
#define FA3_BWD_SMEM(hd) (FA3_BWD_WIDE(hd) ? FA3_BWD_SMEM_WIDE(hd) : FA3_BWD_SMEM_NARROW(hd))

/* The head dim of the backward kernel that runs a head dim: 64, 128 and 256 their own, 96 the
   128 kernel's and 192 the 256 kernel's (TMA reads the columns past the head dim as zeros, which
   add nothing to S, dP, dK, dV or dQ); 0: no fa3 backward. */
static inline int fa3_bwd_padded_head_dim(int64_t head_dim) {
  return fa3_fwd_padded_head_dim(head_dim);
}
/* The dQ accumulator's layout (fa2_args.h) that the backward kernel of a padded head dim writes:
   the narrow kernels stage it rotated, the wide one adds fragments from registers. */
static inline int32_t fa3_bwd_dq_layout(int padded_head_dim) {
  return FA3_BWD_WIDE(padded_head_dim) ? CUDA_DQ_FRAGMENT : CUDA_DQ_ROTATED;
}

#endif /* FA_CUDA_FA3_TILE_SIZE_H */
