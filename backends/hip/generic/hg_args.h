/*
 * hg_args.h: the one argument block of the generic kernels (plain C, passed by value to every
 * kernel, so the host code is the same whether the kernels come from hipcc through a HIP module
 * or from nvcc through the CUDA runtime). Strides are in elements and may be anything: the
 * generic kernels read and write element by element.
 */
#ifndef FA_HIP_HG_ARGS_H
#define FA_HIP_HG_ARGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A [batch, seqlen, heads, head_dim] tensor: strides of batch, row (token), head, element. */
typedef struct hg_tensor {
  void *data;
  int64_t batch, row, head, col;
} hg_tensor;

typedef struct hg_params {
  hg_tensor q, k, v, out, dout, dq, dk, dv;
  float *lse; /* [batch, heads_q, seqlen_q] natural log; forward: NULL = not written */
  int64_t lse_batch, lse_head, lse_row;
  /* Backward workspace: D = rowsum(dO∘O) [batch, heads_q, seqlen_q] and the fp32 dQ accumulator
     [batch, heads_q, seqlen_q, head_dim], both contiguous. */
  float *dsum;
  float *dq_accum;
  int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  float scale;        /* softmax scale */
  float softcap;      /* 0: off */
  int64_t mask_shift; /* core/mask.h's fa_mask, resolved by the host */
  int64_t mask_left, mask_right;
} hg_params;

/* Tiles: one per head-dim class (64, 128, 256: the register arrays' size), the same on every
   target. 256 threads per block, TPR threads sharing one query row (forward) or one key row
   (backward); the shared memory stays within 48 KiB, what a CUDA block gets without opting in
   and under the 64 KiB LDS of every AMD GPU. */
#define HG_THREADS 256
#define HG_MAX_HEAD_DIM 256
#define HG_HD_CLASS(d) ((d) <= 64 ? 64 : ((d) <= 128 ? 128 : 256))
#define HG_FWD_TILE_M 32 /* query rows per block */
/* Keys per step of the forward: HG_FWD_TILE_N or twice that, as core/plan chooses for the
   device's LDS (hg_host.c); a template parameter of the forward kernels (hg_fwd_*_n32/_n64). */
#define HG_FWD_TILE_N 32
#define HG_FWD_TILE_N_MAX 64
#define HG_FWD_TPR (HG_THREADS / HG_FWD_TILE_M)
#define HG_BWD_TILE_N(hc) ((hc) <= 128 ? 32 : 16) /* keys per block */
#define HG_BWD_TILE_M(hc) ((hc) <= 128 ? 32 : 16) /* queries per step */
#define HG_BWD_TPR(hc) (HG_THREADS / HG_BWD_TILE_N(hc))
/* Shared memory in bytes for the real head dim d (rows of d 16-bit elements). */
#define HG_FWD_SMEM(d, bn) ((size_t)(HG_FWD_TILE_M + 2 * (bn)) * (size_t)(d)*2)
#define HG_BWD_SMEM(hc, d)                                                   \
  ((size_t)(2 * HG_BWD_TILE_N(hc) + 2 * HG_BWD_TILE_M(hc)) * (size_t)(d)*2 + \
   (size_t)HG_BWD_TILE_N(hc) * HG_BWD_TILE_M(hc) * 4 + (size_t)2 * HG_BWD_TILE_M(hc) * 4)
/* The MFMA kernels (cdna/hg_mfma.h): the generic forward's plus a [BM][BN + 1] fp32 score tile,
   the rows' factors and a [BM][BN] 16-bit probability tile (54.3 KiB at head dim 256 with 32
   keys: within the 64 KiB LDS); the generic backward's plus a [BN][BM] fp32 dPᵀ tile and the
   16-bit Pᵀ and dSᵀ. */
#define HG_FWD_MFMA_SMEM(d, bn)                                                      \
  (HG_FWD_SMEM(d, bn) + (size_t)HG_FWD_TILE_M * ((bn) + 1) * 4 + HG_FWD_TILE_M * 4 + \
   (size_t)HG_FWD_TILE_M * (bn)*2)
#define HG_BWD_MFMA_SMEM(hc, d) \
  (HG_BWD_SMEM(hc, d) + (size_t)HG_BWD_TILE_N(hc) * HG_BWD_TILE_M(hc) * 8)
/* Rows per block of the backward's row kernels (D, dQ conversion). */
#define HG_ROW_BLOCK 64

#ifdef __cplusplus
}
#endif

#endif /* FA_HIP_HG_ARGS_H */
