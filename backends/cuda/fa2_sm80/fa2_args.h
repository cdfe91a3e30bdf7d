/*
 * fa2_args.h: the FlashAttention-2 family's host side (plain C, shared by the plugin's C code and
 * the CUDA launchers): its tiles per device, the balanced last wave, its backward's launch. The
 * arguments it shares with fa3 are common/attn_args.h's.
 */
#ifndef FA_CUDA_FA2_ARGS_H
#define FA_CUDA_FA2_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/attn_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills a's tail_* plan (tail_acc/tail_count stay for the launcher) for a backward whose key
   tiles are tile_n keys and query steps a->tile_m rows, on a device that runs `slots` blocks at
   once (its SM count: every fa2 backward kernel takes one SM, 8 warps x ~255 registers); reads
   a->p (sizes, mask) and a->deterministic. No tail (tail_tiles = 0) where a mask makes tiles
   differ, over sequences (a->seqs: their tiles differ too), in deterministic mode (fixed
   order), where the blocks fill whole waves or nearly, or
   where a tile has fewer than FA2_BWD_TAIL_MIN_STEPS steps. Pure: decide and the launcher call it
   alike. */
void fa2_bwd_plan_tail(cuda_bwd_args *a, int32_t tile_n, int32_t slots);

/* The kernels a device runs for a head dim: the wide tiles where they fit its shared memory
   (smem_limit bytes per block), else the compact ones (fa2_tiles.h). smem_bytes is what the
   kernel asks for on that device, the sm_90 dQ staging included; when it exceeds smem_limit the
   shape is refused with it. */
typedef struct fa2_tile_config {
  int32_t head_dim_padded;
  int32_t size_class; /* FA2_WIDE or FA2_COMPACT */
  int32_t tile_m, tile_n, warps;
  int32_t dq_layout; /* backward: CUDA_DQ_* of the code that runs (fa2_bwd_dq_layout) */
  size_t smem_bytes;
} fa2_tile_config;

/* 0 when the head dim has no kernels. cc_major: the device's compute capability major; the sm_90
   code runs exactly where it is 9 or more (the plugin refuses a device whose major it was not
   built for). */
int fa2_fwd_config(int32_t head_dim, int cc_major, int64_t smem_limit, fa2_tile_config *cfg);
int fa2_bwd_config(int32_t head_dim, int cc_major, int64_t smem_limit, fa2_tile_config *cfg);

/* The dQ accumulator layout of the backward code that runs on a device of compute capability
   cc_major, for a padded head dim and size class: the sm_80 code adds pairs of atomics
   (CUDA_DQ_NATURAL); the sm_90 code bulk-reduces a staging tile where the wide tiles leave room
   for it (CUDA_DQ_ROTATED), else adds 16-byte vectors (CUDA_DQ_FRAGMENT). Pure: decide, prepare and
   the launcher read the same answer. */
int32_t fa2_bwd_dq_layout(int cc_major, int32_t head_dim_padded, int32_t size_class);

/* Launch on a->stream; return a cudaError_t value (0 = success). The caller has made the
   tensors' device current. The forward goes through fa2_fwd_for (fa2_launch.h); the backward:
   a->size_class, head_dim_padded, tile_m and dq_layout as fa2_bwd_config says, tile_n its key tile.
 */
int fa2_bwd_launch(const cuda_bwd_args *a, int32_t tile_n, void *workspace);

/* The kernels' attributes set once per process and device (shared memory opt-in), and whether
   the loaded module has code for the current device (cudaErrorNoKernelImageForDevice if not).
   Kernels that need more than smem_limit bytes (the device's opt-in maximum) are left as they
   are: decide() refuses their shapes with the reason, and every other kernel still runs. */
int fa2_prepare_device(int smem_limit, int cc_major);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_FA2_ARGS_H */
