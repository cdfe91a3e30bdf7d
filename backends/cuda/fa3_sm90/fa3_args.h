/*
 * fa3_args.h: what the host passes to the FlashAttention-3 kernels (Hopper, sm_90a): the
 * FlashAttention-2 family's arguments (pointers, strides, sizes, mask), the TMA tensor maps,
 * which must sit in the kernel's parameter space (a __grid_constant__ argument), and the
 * schedule's parameters; and the host side's entry points (fa3_fwd_host.c, fa3_bwd_host.c).
 */
#ifndef FA_CUDA_FA3_ARGS_H
#define FA_CUDA_FA3_ARGS_H

#include "../fa2_sm80/fa2_args.h"
#include "fa3_tile_scheduler.h"
#include "fa3_tile_size.h"

#ifdef __cplusplus
#define FA3_ALIGN64 alignas(64)
extern "C" {
#else
#define FA3_ALIGN64 _Alignas(64)
#endif

/* The FP8 forward's own arguments (FA3_FP8 configurations; docs/fp8.md). The descales (NULL: 1)
   are float32 [batch or 1, heads or 1, blocks], read at the strides given in elements (0 along a
   dimension of size 1, which every batch or head shares). q: a block of q_rows query rows (0: one
   block); k and v: a block of k_tiles whole key tiles (0: one block). vt: V transposed by the
   pre-pass (fa3_fp8_vt_launch), [batch][heads_kv][head_dim][vt_keys], each row's keys permuted
   within groups of 32 (fa3_fp8_layout.h) and zero past seqlen_k. */
typedef struct fa3_fp8_args {
  const float *q_descale, *k_descale, *v_descale;
  int64_t qd_batch, qd_head, qd_block;
  int64_t kd_batch, kd_head, kd_block;
  int64_t vd_batch, vd_head, vd_block;
  int32_t q_rows, k_tiles;
  int32_t e5m2;    /* q, k, v are FA_F8E5M2 (else FA_F8E4M3) */
  int32_t vt_keys; /* seqlen_k rounded up to the key tile */
  unsigned char *vt;
} fa3_fp8_args;

typedef struct fa3_fwd_args {
  FA3_ALIGN64 unsigned char tq[128]; /* CUtensorMap of Q: (head dim, seqlen, heads, batch) */
  FA3_ALIGN64 unsigned char tk[128];
  FA3_ALIGN64 unsigned char tv[128];
  FA3_ALIGN64 unsigned char to[128]; /* of O (TMA_EPILOGUE configurations only) */
  cuda_fwd_args a;
  int32_t sm_count;       /* the device's SMs: the grid of a persistent configuration */
  int32_t chunk;          /* DYNAMIC_SCHEDULE: (head, batch) pairs per chunk of the order */
  int32_t pack_log2;      /* GQA packing: a tile holds 2^pack_log2 query heads of one K/V head */
  int32_t *tile_counter;  /* DYNAMIC_SCHEDULE: [0] tiles taken past the first grid's worth,
                             [1] blocks done (fa3_sched_finish zeroes both at the end) */
  int32_t counter_zeroed; /* 1: tile_counter reads zero in stream order (a stream's kept
                             counter, cuda_stream_counters.c): the launch does not clear it */
  /* SEQS configurations: each sequence's rows and keys (a.p: the longest's rows and, for a padded
     k, the keys each sequence holds; a.p.mask unused) and the maps' views (fa3_seq_tensor_map):
     row extents of Q and O (q_ext) and of K and V (k_ext), and each tensor's rows per batch where
     it is padded (0 where packed along cu_seqlens). */
  cuda_seq_index ix;
  int32_t q_ext, k_ext;
  int32_t q_batch_rows, o_batch_rows, k_batch_rows, v_batch_rows;
  /* FA3_FP8 configurations: the descales and Vᵀ (tv is then Vᵀ's map) */
  fa3_fp8_args fp8;
} fa3_fwd_args;

/* A compiled forward configuration (fa3_tile_size.h's FA3_FWD_CONFIGS) and its entry points. */
typedef int (*fa3_fwd_fn)(const fa3_fwd_args *a);
typedef struct fa3_fwd_config {
  const char *name;
  int head_dim_padded, warpgroups, tile_m, tile_n, flags;
  size_t smem_bytes;
  fa3_fwd_fn launch;    /* both dtypes' kernels, chosen by a->a.p.bf16 */
  int (*prepare)(void); /* the shared-memory opt-in of both dtypes' kernels */
} fa3_fwd_config;

/* The configuration of an fa3_fwd_config_id (fa3_fwd_tile_size), NULL for any other value. */
const fa3_fwd_config *fa3_fwd_config_of(int id);
/* The id of the configuration called name, -1 when none is. */
int fa3_fwd_config_named(const char *name);
/* GQA packing: the query heads a tile of c holds (a power of two): as many of one K/V head's
   group as divide it while each keeps at least seqlen_q rows (and 8, the swizzle's atom). 1 for
   MHA and for query blocks longer than half a tile. */
int fa3_fwd_pack(const fa3_fwd_config *c, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q);
/* The dynamic schedule's counter pair (fa3_fwd_args.tile_counter). */
#define FA3_TILE_COUNTER_BYTES (2 * sizeof(int32_t))
/* Device bytes of workspace a configuration's launch needs: a DYNAMIC_SCHEDULE configuration's
   tile counter pair, else 0. Decide and run call it alike, so the launch finds what it needs. */
size_t fa3_fwd_workspace_bytes(const fa3_fwd_config *c);
/* The FP8 forward's Vᵀ: keys a row holds (seqlen_k rounded up to the key tile tile_n) and bytes
   of the whole [batch][heads_kv][head_dim][keys] array, which the call's workspace holds after
   the tile counter. */
int64_t fa3_fp8_vt_keys(int64_t seqlen_k, int tile_n);
size_t fa3_fp8_vt_bytes(int64_t batch, int64_t heads_kv, int64_t head_dim, int64_t seqlen_k,
                        int tile_n);
/* The pre-pass (fa3_fp8_vt.cu): a->fp8.vt from a->a.v on a->a.p.stream; a cudaError_t value. */
int fa3_fp8_vt_launch(const fa3_fwd_args *a);
/* Fills the tensor maps from a->a (16-byte aligned bases, row/head/batch strides multiples of 8
   elements; a SEQS configuration's views from a->ix, fa3_seq_views) and launches the
   configuration (a DYNAMIC_SCHEDULE one clears a->tile_counter first,
   in stream order, unless a->counter_zeroed); returns a cudaError_t value, or -1 with a message in
   err when a tensor cannot be described to TMA. An FA3_FP8 configuration (a->fp8 filled,
   a->a.p.bf16 out's dtype) maps Q and K as bytes and Vᵀ instead of V (none of K and Vᵀ without
   keys) and runs the pre-pass first. */
int fa3_fwd_launch(fa3_fwd_args *a, const fa3_fwd_config *cfg, char *err, size_t err_len);

typedef struct fa3_bwd_args {
  FA3_ALIGN64 unsigned char tq[128]; /* CUtensorMap of Q: (head dim, seqlen, heads, batch) */
  FA3_ALIGN64 unsigned char tk[128];
  FA3_ALIGN64 unsigned char tv[128];
  FA3_ALIGN64 unsigned char tdo[128]; /* of dO */
  /* of the workspace's log2 LSE and D (fp32, (seqlen_q_padded, batch x heads_q), boxes of one
     query tile's rows), made after cuda_bwd_carve */
  FA3_ALIGN64 unsigned char tlse[128];
  FA3_ALIGN64 unsigned char tdsum[128];
  /* The persistent grid's blocks (fa3_bwd_grid_blocks: the narrow kernels, hd64 and hd128, not
     deterministic: each block walks key tiles of all K/V heads and batches); 0: one block per key
     tile. */
  int32_t grid_blocks;
  /* The persistent grid's order under a mask (fa3_bwd_sched): 0, none (no mask: the key tile
     fastest); else the (K/V head, batch) pairs in chunks of sched_chunk, within a chunk the key
     tiles longest first (fa3_sched_lpt_tile), the first key tile the longest (a causal-type mask)
     or, with sched_reverse, the last (a left bound only). */
  int32_t sched_chunk, sched_reverse;
  /* The persistent grid's dynamic schedule: a block takes its items past the first from
     tile_counter (atomicAdd; the workspace's sched_count, cleared by cuda_bwd_prologue). NULL
     elsewhere: block i takes items i, i + gridDim.x, ... (deterministic mode's splits). */
  uint32_t *tile_counter;
  /* The arguments both families share, the workspace carved alike (cuda_bwd_carve: D, the
     log2 LSE, the fp32 dQ accumulator (fa3_bwd_sizing's layout), one split or more) */
  cuda_bwd_args a;
  /* Over sequences (a.seqs; the narrow kernels): the views of Q and dO (q_ext rows) and of K and V
     (k_ext), each tensor's rows per batch where padded (fa3_seq_tensor_map, as the forward's). */
  int32_t q_ext, k_ext;
  int32_t q_batch_rows, do_batch_rows, k_batch_rows, v_batch_rows;
} fa3_bwd_args;

/* The 4-D TMA map (fa_tma_map) of a (batch, seqlen, heads, head dim) tensor with strides in
   elements, read in boxes of `rows` rows x 64 columns of `box_heads` heads (columns past
   head_dim, up to the padded head dim, and rows past seqlen read as zeros, are not written).
   0, or -1 with a message in err. */
int fa3_tensor_map(void *map, int bf16, const void *base, const cuda_strides *st, int32_t batch,
                   int32_t seqlen, int32_t heads, int32_t head_dim, uint32_t rows,
                   uint32_t box_heads, char *err, size_t err_len);
/* The map of a tensor of sequences of their own lengths, in which each sequence's rows end at its
   own end: TMA reads zeros past it and writes nothing there, even where the next sequence's rows
   (packed) or unused rows (padded) follow. The map sees element (c, i, h, w) at row w + i - ext of
   the tensor (the base moved back by ext rows; the row stride for both i and w): a sequence of
   len rows from row start (packed: its cu_seqlens entry; padded: batch x rows per batch) is
   addressed at w = start + len, i = ext - len + its row, i < ext bounding it (view: ext and the
   largest w). Boxes as fa3_tensor_map's. */
typedef struct fa3_seq_view {
  int32_t ext;        /* rows a sequence may have: a packed tensor's total, a padded one's rows */
  int32_t batch_rows; /* a padded tensor's batch stride in rows (0: packed, or one batch) */
  int64_t span;       /* the largest w of any sequence: the packed total, or the last batch's
                         start + ext */
} fa3_seq_view;
/* The views of a call over sequences (both passes): of q and the tensor shaped as q (out, or
   dout), packed where ix->cu_q is set, and of k and v, packed where ix->cu_k is; p holds the
   padded tensors' rows (seqlen_q, seqlen_k). 0, or -1 with the reason in err where a tensor has
   no rows or keys, or a padded one's batch stride is no whole number of its rows (above int32
   included). */
int fa3_seq_views(const cuda_seq_index *ix, const cuda_problem *p, const cuda_strides *q,
                  const cuda_strides *q_like, const cuda_strides *k, const cuda_strides *v,
                  fa3_seq_view views[4], char *err, size_t err_len);
int fa3_seq_tensor_map(void *map, int bf16, const void *base, const cuda_strides *st,
                       const fa3_seq_view *view, int32_t heads, int32_t head_dim, uint32_t rows,
                       uint32_t box_heads, char *err, size_t err_len);
/* The launch of the backward's main kernel (fa3_bwd_hd<N>.cu) and the shared-memory opt-in of
   both dtypes' kernels. */
int fa3_bwd_main_launch_hd64(const fa3_bwd_args *a);
int fa3_bwd_main_launch_hd128(const fa3_bwd_args *a);
int fa3_bwd_main_launch_hd256(const fa3_bwd_args *a);
int fa3_bwd_prepare_hd64(void);
int fa3_bwd_prepare_hd128(void);
int fa3_bwd_prepare_hd256(void);
/* The whole backward on a->a's stream: the tensor maps, the workspace carved, dQ's accumulator
   cleared, D and the log2 LSE (the preprocessing kernel, common/bwd_aux.cu), the main kernel, dQ
   converted. a->a must be sized for it (fa3_bwd_sizing) and a->grid_blocks hold the persistent
   grid's requested size (the SM count). Returns a cudaError_t value, or -1 with a message in err
   when a tensor cannot be described to TMA. */
int fa3_bwd_launch(fa3_bwd_args *a, void *workspace, char *err, size_t err_len);
/* Fills what decides the backward's workspace (cuda_bwd_workspace_bytes of the result): the
   padded head dim, the query tile, the key tile, the dQ accumulator's layout (narrow kernels:
   CUDA_DQ_ROTATED, which they stage; wide: CUDA_DQ_FRAGMENT, which their consumers add from
   registers): one, or with deterministic != 0 dq_splits of them (one block each, its key tiles
   in order; at least 1), the dynamic schedule's counter. a->p must be set. */
void fa3_bwd_sizing(cuda_bwd_args *a, int32_t deterministic, int32_t dq_splits);

#define FA3_DECLARE(name, hd, wgs, bn, flags)       \
  int fa3_fwd_launch_##name(const fa3_fwd_args *a); \
  int fa3_fwd_prepare_##name(void);
FA3_FWD_CONFIGS(FA3_DECLARE)
#undef FA3_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_FA3_ARGS_H */
