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
  int64_t mask_shift; /* core/math/mask.h's fa_mask, resolved by the host */
  int64_t mask_left, mask_right;
} hg_params;

/* Tiles: the register arrays' size follows the head-dim class (64, 128, 256). 256 threads per
   block, TPR threads sharing one query row (forward) or one key row (backward). The smaller of
   each pair of tiles below keeps the generic kernels' shared memory within 48 KiB, what a CUDA
   block gets without opting in and under the 64 KiB LDS of every AMD GPU; the larger is core/plan's
   choice where the device's LDS holds it (hg_host.c). */
#define HG_THREADS 256
#define HG_MAX_HEAD_DIM 256
#define HG_HD_CLASS(d) ((d) <= 64 ? 64 : ((d) <= 128 ? 128 : 256))
#define HG_FWD_TILE_M 32 /* query rows per block */
/* Keys per step of the forward: HG_FWD_TILE_N or twice that, as core/plan chooses for the
   device's LDS (hg_host.c); a template parameter of the forward kernels (hg_fwd_*_n32/_n64). */
#define HG_FWD_TILE_N 32
#define HG_FWD_TILE_N_MAX 64
#define HG_FWD_TPR (HG_THREADS / HG_FWD_TILE_M)
/* The backward's tiles, BN keys per block by BM queries per step: two per head-dim class, one
   kernel each (hg_bwd_main_*_hd<HC>_n<BN>_m<BM>), as core/plan chooses for the device's LDS
   (hg_host.c's hg_bwd_tiles). X(HC, BN, BM, AMD) for each, smaller first; the wide tile doubles
   the keys (half the passes over Q and dO), at class 128 and 256 with 16 query rows per step,
   since 32 do not fit 64 KiB (class 128: with the MFMA kernel's score tiles; class 256: at all).
   AMD = 1: in the HIP plugin's bundle, one per class. Every AMD target built (gfx90a, gfx940,
   gfx1100) has a 64 KiB LDS, where core/plan chooses the wide tile at every head dim, so the
   bundle carries those, except at class 256: its wide kernels take over three times the hipcc
   time of the 16x16 ones, which would make the bundle's build too slow for CI, so the bundle
   keeps 16x16 there. The test plugin carries all, for the smaller LDS it can stand for. The MFMA
   kernels need BN and BM multiples of 16 and whole 16x16 tiles of [BN][HC] and [BM][HC] for each of
   8 waves (cdna/hg_mfma.h). */
#define HG_BWD_TILES(X) \
  X(64, 32, 32, 0)      \
  X(64, 64, 32, 1)      \
  X(128, 32, 32, 0)     \
  X(128, 64, 16, 1)     \
  X(256, 16, 16, 1)     \
  X(256, 32, 16, 0)
#define HG_BWD_TILE_COUNT 6     /* all */
#define HG_BWD_TILE_COUNT_AMD 3 /* AMD = 1 */
#define HG_BWD_TPR(bn) (HG_THREADS / (bn))
/* Shared memory in bytes for the real head dim d (rows of d 16-bit elements). */
#define HG_FWD_SMEM(d, bn) ((size_t)(HG_FWD_TILE_M + 2 * (bn)) * (size_t)(d)*2)
/* K, V [BN][d], Q, dO [BM][d], dS [BN][BM] fp32, the step's LSE and D. */
#define HG_BWD_SMEM(bn, bm, d) \
  ((size_t)(2 * (bn) + 2 * (bm)) * (size_t)(d)*2 + (size_t)(bn) * (bm)*4 + (size_t)2 * (bm)*4)
/* Bytes per score element held in shared memory: the generic dS (fp32); the MFMA kernels' Sᵀ
   and dPᵀ (fp32) and 16-bit Pᵀ and dSᵀ. */
#define HG_BWD_SCORE_BYTES(mfma) ((mfma) ? 12 : 4)
/* The MFMA kernels (cdna/hg_mfma.h): the generic forward's plus a [BM][BN + 1] fp32 score tile,
   the rows' factors and a [BM][BN] 16-bit probability tile (54.3 KiB at head dim 256 with 32
   keys: within the 64 KiB LDS); the generic backward's plus a [BN][BM] fp32 dPᵀ tile and the
   16-bit Pᵀ and dSᵀ. */
#define HG_FWD_MFMA_SMEM(d, bn)                                                      \
  (HG_FWD_SMEM(d, bn) + (size_t)HG_FWD_TILE_M * ((bn) + 1) * 4 + HG_FWD_TILE_M * 4 + \
   (size_t)HG_FWD_TILE_M * (bn)*2)
#define HG_BWD_MFMA_SMEM(bn, bm, d) (HG_BWD_SMEM(bn, bm, d) + (size_t)(bn) * (bm)*8)
/* Rows per block of the backward's row kernels (D, dQ conversion). */
#define HG_ROW_BLOCK 64

#ifdef __cplusplus
}
#endif

#endif /* FA_HIP_HG_ARGS_H */
