/*
 * fa2_launch.h: the per-head-dim entry points of the kernels (the forward, the backward's main
 * kernel, the forward over sequences of fa2_fwd_splitkv.cuh; one object file per padded head dim,
 * built from fa2_fwd_inst.cu with FA2_HD set), and the tables that map a padded head dim to them.
 */
#ifndef FA_CUDA_FA2_LAUNCH_H
#define FA_CUDA_FA2_LAUNCH_H

#include "fa2_args.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*fa2_fwd_fn)(const cuda_fwd_args *a);
typedef int (*fa2_bwd_fn)(const cuda_bwd_args *a, int grid_x);
typedef int (*fa2_prepare_fn)(int smem_limit, int cc_major);
typedef int (*fa2_splitkv_fn)(const cuda_seq_args *a);

#define FA2_DECLARE_HD(hd)                                            \
  int fa2_fwd_launch_hd##hd(const cuda_fwd_args *a);                  \
  int fa2_bwd_main_launch_hd##hd(const cuda_bwd_args *a, int grid_x); \
  int fa2_prepare_hd##hd(int smem_limit, int cc_major);               \
  int fa2_splitkv_launch_hd##hd(const cuda_seq_args *a);

FA2_DECLARE_HD(32)
FA2_DECLARE_HD(64)
FA2_DECLARE_HD(96)
FA2_DECLARE_HD(128)
FA2_DECLARE_HD(160)
FA2_DECLARE_HD(192)
FA2_DECLARE_HD(224)
FA2_DECLARE_HD(256)

/* NULL when the padded head dim has no kernels. */
fa2_fwd_fn fa2_fwd_for(int head_dim_padded);
fa2_bwd_fn fa2_bwd_main_for(int head_dim_padded);
fa2_splitkv_fn fa2_splitkv_for(int head_dim_padded);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_FA2_LAUNCH_H */
