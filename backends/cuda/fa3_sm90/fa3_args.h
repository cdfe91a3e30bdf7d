/*
 * fa3_args.h: what the host passes to the FlashAttention-3 forward kernel (Hopper, sm_90a): the
 * FlashAttention-2 family's arguments (pointers, strides, sizes, mask) and the TMA tensor maps of
 * Q, K and V, which must sit in the kernel's parameter space (a __grid_constant__ argument).
 */
#ifndef FA_CUDA_FA3_ARGS_H
#define FA_CUDA_FA3_ARGS_H

#include "../fa2_sm80/fa2_args.h"

#ifdef __cplusplus
#define FA3_ALIGN64 alignas(64)
extern "C" {
#else
#define FA3_ALIGN64 _Alignas(64)
#endif

/* Query rows per block (two consumer warpgroups of 64), key rows per tile. */
#define FA3_FWD_TILE_M 128
#define FA3_FWD_TILE_N 128
/* Q once, K and V in two stages, each head dim in 64-column boxes; 1 KiB for the alignment the
   128-byte swizzle needs. */
#define FA3_FWD_SMEM(hd) ((size_t)(FA3_FWD_TILE_M + 4 * FA3_FWD_TILE_N) * (size_t)(hd)*2 + 1024)

typedef struct fa3_fwd_args {
  FA3_ALIGN64 unsigned char tq[128]; /* CUtensorMap of Q: (head dim, seqlen, heads, batch) */
  FA3_ALIGN64 unsigned char tk[128];
  FA3_ALIGN64 unsigned char tv[128];
  fa2_fwd_args a;
} fa3_fwd_args;

/* Head dims with FlashAttention-3 kernels (exact: no padding yet). */
int fa3_fwd_has_head_dim(int32_t head_dim);

/* Fills the tensor maps from a->a (16-byte aligned bases, row/head/batch strides multiples of 8
   elements) and launches; returns a cudaError_t value, or -1 with a message in err when a
   tensor cannot be described to TMA. */
int fa3_fwd_launch(fa3_fwd_args *a, char *err, size_t err_len);

/* Per head dim (fa3_fwd_inst.cu). */
int fa3_fwd_launch_hd64(const fa3_fwd_args *a);
int fa3_fwd_launch_hd128(const fa3_fwd_args *a);
int fa3_prepare_hd64(void);
int fa3_prepare_hd128(void);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_FA3_ARGS_H */
