/*
 * fa2_host.c: the FlashAttention-2 family's host side: the tile table (fa2_tiles.h) as data, the
 * head-dim -> kernel tables, the backward's workspace layout and its launch sequence.
 */
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "fa2_launch.h"
#include "fa2_tiles.h"

static int has_kernels(int32_t head_dim) {
  return head_dim >= 8 && head_dim <= FA2_MAX_HEAD_DIM && head_dim % 8 == 0;
}

int32_t fa2_bwd_dq_layout(int cc_major, int32_t head_dim_padded, int32_t size_class) {
  if (cc_major < 9) return CUDA_DQ_NATURAL;
  return FA2_BWD_DQ_BULK(head_dim_padded, size_class) ? CUDA_DQ_ROTATED : CUDA_DQ_FRAGMENT;
}

static void fwd_class(int32_t hd, int32_t c, fa2_tile_config *cfg) {
  cfg->head_dim_padded = hd;
  cfg->size_class = c;
  cfg->tile_m = FA2_FWD_TILE_M(hd, c);
  cfg->tile_n = FA2_FWD_TILE_N(hd, c);
  cfg->warps = FA2_FWD_WARPS(hd, c);
  cfg->dq_layout = CUDA_DQ_NATURAL; /* no dQ in the forward */
  cfg->smem_bytes = FA2_FWD_SMEM(hd, c);
}

static void bwd_class(int32_t hd, int32_t c, int cc_major, fa2_tile_config *cfg) {
  cfg->head_dim_padded = hd;
  cfg->size_class = c;
  cfg->tile_m = FA2_BWD_TILE_M(hd, c);
  cfg->tile_n = FA2_BWD_TILE_N(hd, c);
  cfg->warps = FA2_BWD_WARPS(hd, c);
  cfg->dq_layout = fa2_bwd_dq_layout(cc_major, hd, c);
  cfg->smem_bytes = FA2_BWD_SMEM_STAGED(hd, c, cfg->dq_layout == CUDA_DQ_ROTATED);
}

int fa2_fwd_config(int32_t head_dim, int cc_major, int64_t smem_limit, fa2_tile_config *cfg) {
  (void)cc_major; /* the forward's tiles are the same on every architecture */
  if (!has_kernels(head_dim)) return 0;
  const int32_t hd = FA2_PAD_HD(head_dim);
  fwd_class(hd, FA2_WIDE, cfg);
  if ((int64_t)cfg->smem_bytes > smem_limit) fwd_class(hd, FA2_COMPACT, cfg);
  return 1;
}

int fa2_bwd_config(int32_t head_dim, int cc_major, int64_t smem_limit, fa2_tile_config *cfg) {
  if (!has_kernels(head_dim)) return 0;
  const int32_t hd = FA2_PAD_HD(head_dim);
  bwd_class(hd, FA2_WIDE, cc_major, cfg);
  if ((int64_t)cfg->smem_bytes > smem_limit) bwd_class(hd, FA2_COMPACT, cc_major, cfg);
  return 1;
}

#define FA2_TABLE(prefix)    \
  switch (head_dim_padded) { \
    case 32:                 \
      return prefix##32;     \
    case 64:                 \
      return prefix##64;     \
    case 96:                 \
      return prefix##96;     \
    case 128:                \
      return prefix##128;    \
    case 160:                \
      return prefix##160;    \
    case 192:                \
      return prefix##192;    \
    case 224:                \
      return prefix##224;    \
    case 256:                \
      return prefix##256;    \
    default:                 \
      return NULL;           \
  }

fa2_fwd_fn fa2_fwd_for(int head_dim_padded){FA2_TABLE(fa2_fwd_launch_hd)}

fa2_bwd_fn fa2_bwd_main_for(int head_dim_padded){FA2_TABLE(fa2_bwd_main_launch_hd)}

fa2_splitkv_fn fa2_splitkv_for(int head_dim_padded) {
  FA2_TABLE(fa2_splitkv_launch_hd)
}

int fa2_prepare_device(int smem_limit, int cc_major) {
  static const fa2_prepare_fn all[] = {fa2_prepare_hd32,  fa2_prepare_hd64,  fa2_prepare_hd96,
                                       fa2_prepare_hd128, fa2_prepare_hd160, fa2_prepare_hd192,
                                       fa2_prepare_hd224, fa2_prepare_hd256};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    int e = all[i](smem_limit, cc_major);
    if (e != 0) return e;
  }
  return 0;
}

int fa2_bwd_launch(const cuda_bwd_args *in, int32_t tile_n, void *workspace) {
  fa2_bwd_fn main_fn = fa2_bwd_main_for(in->head_dim_padded);
  if (!main_fn || in->tile_m <= 0 || tile_n <= 0 || (in->tail_tiles > 0 && in->tile_n != tile_n))
    return (int)cudaErrorInvalidValue;
  cuda_bwd_args a = *in;
  cuda_bwd_carve(&a, workspace);
  int e = cuda_bwd_prologue(&a);
  const int n_blocks = (a.p.seqlen_k + tile_n - 1) / tile_n;
  const int grid_x = a.deterministic ? a.dq_splits : n_blocks;
  if (e == 0 && grid_x > 0) e = main_fn(&a, grid_x);
  if (e == 0) e = cuda_bwd_convert_dq_launch(&a);
  return e;
}
