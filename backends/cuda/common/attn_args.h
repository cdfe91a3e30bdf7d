/*
 * attn_args.h: what the host hands the CUDA backend's kernels, both families (plain C, shared by
 * the plugin's C code and the CUDA launchers): pointers, strides in elements, the problem's sizes,
 * score transform and mask; the backward's workspace (D, the log2 LSE, the fp32 dQ accumulator)
 * and the steps around its main kernel that fa2 and fa3 share (common/bwd_aux.cu,
 * common/bwd_workspace.c). The last dimension of every tensor is contiguous (decide() refuses
 * anything else), so a row is (batch, token, head).
 */
#ifndef FA_CUDA_ATTN_ARGS_H
#define FA_CUDA_ATTN_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "core/math/host_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_strides {
  int64_t batch, row, head;
} cuda_strides;

typedef struct cuda_lse_strides {
  int64_t batch, head, row;
} cuda_lse_strides;

/* The mask of core/math/mask.h, resolved by the host (shift, left, right; -1 = unbounded). */
typedef struct cuda_mask_args {
  int64_t shift, left, right;
} cuda_mask_args;

/* What both passes share: the problem's sizes, the score transform, the mask and where to run. */
typedef struct cuda_problem {
  int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  float scale;   /* softmax scale */
  float softcap; /* 0: off */
  cuda_mask_args mask;
  int32_t bf16; /* 0: f16 storage */
  void *stream; /* cudaStream_t */
} cuda_problem;

/* Whether the problem's mask bounds any row's keys (-1 on both sides bounds none). */
static inline int cuda_problem_masked(const cuda_problem *p) {
  return p->mask.left >= 0 || p->mask.right >= 0;
}

typedef struct cuda_fwd_args {
  const void *q, *k, *v;
  void *out;
  float *lse; /* NULL: not written */
  cuda_strides q_str, k_str, v_str, o_str;
  cuda_lse_strides lse_str;
  cuda_problem p;
  int32_t size_class; /* FA2_WIDE or FA2_COMPACT (fa2_tiles.h): which tiles run */
} cuda_fwd_args;

/* Sequences of their own lengths (common/seq_index.cuh reads them): packed rows (cu_seqlens) and
   used keys (seqused_k) in device memory, and the mask each sequence makes with its own lengths
   (core/math/mask.h). The kernels bound every index read from the tables before use, so
   out-of-range values give wrong results for their sequence, never an access outside the
   tensors. */
typedef struct cuda_seq_index {
  const int32_t *cu_q, *cu_k; /* [batch + 1] starts of packed rows, or NULL (padded) */
  int32_t total_q, total_k;   /* rows of packed q and k (the bound of cu_q, cu_k) */
  const int32_t *seqused_k;   /* [batch] keys used, or NULL */
  int32_t causal, causal_align, window_enabled;
  int64_t window_left, window_right;
  int32_t lse_packed; /* lse is [heads_q, total_q] (row cu_q[b] + i) */
} cuda_seq_index;

/* The forward over sequences of their own lengths (fa2_sm80/fa2_fwd_splitkv.cuh): packed rows
   (cu_seqlens), used keys (seqused_k), paged K/V (block_table), a KV cache's lengths
   (fa_forward_kvcache), and the keys cut into `splits` pieces whose partial results a combine
   kernel merges. The lengths and tables live in device memory and are read by the kernels; every
   index read from them is bounded before use (cuda_seq_index). f.p holds the largest lengths
   (seqlen_q, the grid's; seqlen_k, what a sequence may address) and f.p.mask is unused: each
   sequence's mask is made from ix and its own lengths. */
typedef struct cuda_seq_args {
  cuda_fwd_args f;   /* q (or its rotated copy), k, v (or the caches), out, lse and their strides:
                        packed tensors have batch stride 0 and row stride strides[0] */
  cuda_seq_index ix; /* lengths, mask, lse layout (ix.seqused_k NULL for kvcache) */
  const int32_t *cache_seqlens; /* [batch] (kvcache): keys = cache_seqlens[b] + seqlen_new */
  int32_t cache_seqlens_stride;
  int32_t seqlen_new;
  const int32_t *block_table; /* [batch, pages] page of each page_size keys, or NULL */
  int64_t bt_batch, bt_page;  /* its strides */
  int32_t bt_pages, page_shift, num_blocks; /* page_shift: log2 of the page size */
  int32_t tile_m;  /* rows of a block: 64 (fa2_fwd_splitkv.cuh) or 16 (fa2_fwd_decode.cuh) */
  int32_t bulk;    /* tile_m 16 on sm_90: the bulk-copy decoding kernel (fa2_fwd_decode_bulk.cuh) */
  int32_t pack;    /* query heads of one K/V head in a tile (a power of two); rows per head:
                      tile_m / pack */
  int32_t splits;  /* key pieces; > 1: partial results into o_part, lse_part */
  float *o_part;   /* [splits][batch][heads_q][seqlen_q][head_dim] */
  float *lse_part; /* [splits][batch][heads_q][seqlen_q] */
} cuda_seq_args;

/* The K/V append and rotary embedding of fa_forward_kvcache (common/kvcache_append.cu): token t
   of k_new/v_new into cache position cache_seqlens[b] + t (through the block table when paged),
   the keys rotated; q rotated into q_rot ([batch, seqlen_q, heads_q, head_dim], contiguous). */
typedef struct cuda_kvcache_args {
  const void *k_new, *v_new;
  cuda_strides kn_str, vn_str;
  void *k_cache, *v_cache;
  cuda_strides kc_str, vc_str; /* paged: batch = the page stride */
  const void *q;
  cuda_strides q_str;
  void *q_rot; /* NULL: q is not rotated */
  const void *rot_cos, *rot_sin;
  int64_t cos_row, cos_col, sin_row, sin_col;             /* strides */
  int32_t rot_rows, rotary_dim, rot_interleaved, rot_f32; /* rot_f32: tables in f32, else q's */
  int32_t per_row_q; /* q's token t at cache_seqlens[b] + t (causal or window), else at
                        cache_seqlens[b] */
  const int32_t *cache_seqlens;
  int32_t cache_seqlens_stride;
  int32_t capacity; /* positions a sequence's cache holds */
  const int32_t *block_table;
  int64_t bt_batch, bt_page;
  int32_t page_size, num_blocks;
  int32_t batch, seqlen_new, seqlen_q, heads_q, heads_kv, head_dim, bf16;
  void *stream;
} cuda_kvcache_args;

/* Launchers (cudaError_t values): the append and q's rotation; the partial results' merge. */
int cuda_kvcache_append_launch(const cuda_kvcache_args *a);
int cuda_splitkv_combine_launch(const cuda_seq_args *a);

/* Layouts of a row of the backward's fp32 dQ accumulator (head_dim_padded columns):
   CUDA_DQ_NATURAL  column c at c (per-thread pairs of atomics: sm_80 code);
   CUDA_DQ_ROTATED  8-column chunks rotated by the row's index r within its query tile
                   (r mod tile_m): chunk j at chunk (j + r) mod (head_dim_padded / 8), the layout
                   in which the bulk-reduction path stages a tile in shared memory without bank
                   conflicts (sm_90 code, head dims up to 192);
   CUDA_DQ_FRAGMENT not by rows: a head's [seqlen_q_padded x head_dim_padded] accumulator is
                   [seqlen_q_padded / 16][head_dim_padded / 8] blocks of 128 floats, each a 16-row
                   x 8-column mma accumulator tile in lane order: row 8r + g, column 2t + e of a
                   block at 4 (4g + t) + 2r + e (g < 8, t < 4, r, e < 2). Each lane adds its
                   four accumulator values by one 16-byte vector reduction straight from its
                   registers, and a warp's 32 reductions cover 512 contiguous bytes (sm_90 code
                   above head dim 192). */
enum { CUDA_DQ_NATURAL = 0, CUDA_DQ_ROTATED = 1, CUDA_DQ_FRAGMENT = 2 };

typedef struct cuda_bwd_args {
  const void *q, *k, *v, *out, *dout;
  const float *lse;
  void *dq, *dk, *dv;
  cuda_strides q_str, k_str, v_str, o_str, do_str, dq_str, dk_str, dv_str;
  cuda_lse_strides lse_str;
  cuda_problem p;
  /* Workspace (device memory, carved by the host): D = rowsum(dO∘O) and the LSE in log2 units
     (+inf where the row saw no key, so P = 0 there), both [batch, heads_q, seqlen_q_padded] with
     the padding rows filled (D 0, LSE +inf) so query tiles load them whole with cp.async; and
     the fp32 dQ accumulator [dq_splits][batch, heads_q, seqlen_q_padded, head_dim_padded]
     (its padding is written by the main kernel and never read back). Within each row, the
     columns are laid out as dq_layout says (CUDA_DQ_*): the layout that lets the code running
     on the device add into it the cheapest way. */
  int32_t seqlen_q_padded; /* seqlen_q rounded up to the backward's query tile */
  int32_t head_dim_padded; /* head_dim rounded up to the kernels' granule (FA2_PAD_HD) */
  int32_t size_class;      /* FA2_WIDE or FA2_COMPACT (fa2_tiles.h): which tiles run */
  int32_t tile_m;          /* the backward's query tile */
  int32_t tile_n;          /* its key tile (set by fa2_bwd_plan_tail) */
  int32_t dq_layout;       /* CUDA_DQ_* (fa2_bwd_dq_layout, fa3_bwd_dq_layout) */
  float *dsum;
  float *lse_log2;
  float *dq_accum;
  /* deterministic = 0: one accumulator (dq_splits = 1), one block per key tile, atomics in any
     order. deterministic = 1: block s of dq_splits owns accumulator s and visits key tiles
     s, s + dq_splits, ... in order; the accumulators are summed in split order. */
  int32_t deterministic;
  int32_t dq_splits;
  /* The balanced last wave (fa2_bwd_plan_tail): where every key tile costs the same (no mask),
     the key tiles that would run as a last, partial wave of blocks are cut into tail_pieces runs
     of tail_piece_steps consecutive (key tile, query step) units, one block each, so that the
     last wave keeps every SM busy for the same time. A tile cut in several pieces has its dK, dV
     added into tail_acc (fp32, [tail_tiles][2][key tile x head_dim_padded] in the kernel's
     register order) and written by the piece that finishes last (tail_count: one counter per
     tile). The whole tiles run first, one block per key tile, grid (key tile, KV head, batch);
     with a tail, the first tail_first of them (linear index: key tile fastest, then KV head,
     then batch), then a second launch runs the pieces over the rest. Workspace after the dQ
     accumulator, cleared with it. */
  int32_t tail_tiles, tail_first, tail_piece_steps, tail_pieces;
  float *tail_acc;
  uint32_t *tail_count;
  /* Work counters of a main kernel that schedules its blocks itself (fa3's persistent grid):
     sched_counters (at most 256) of them at sched_count, after the tail's (256 bytes), cleared
     by cuda_bwd_prologue's preprocessing kernel. */
  int32_t sched_counters;
  uint32_t *sched_count;
  /* The backward over sequences of their own lengths (seqs = 1, fa2's kernels): each sequence's
     rows, keys and mask from ix (common/seq_index.cuh), the grid's rows and keys those of the
     longest (p.seqlen_q, p.seqlen_k; p.mask unused); keys past a sequence's used ones get zero
     gradients. Where q is packed (ix.cu_q), a head's workspace rows hold the sequences' padded
     rows one after another, sequence b's from round_up(cu_q[b] + b * tile_m, tile_m)
     (seq_bwd_ws_row): ws_head rows per head (cuda_bwd_head_rows), for any table whose values
     are bounded as seq_index.cuh bounds them. Without packed q the workspace is laid out as
     without sequences. */
  int32_t seqs;
  cuda_seq_index ix;
  int64_t ws_head; /* workspace rows per query head (cuda_bwd_carve) */
} cuda_bwd_args;

/* Workspace rows per query head, and of one dQ accumulator (every head, every sequence). */
FA_HOST_DEVICE int64_t cuda_bwd_head_rows(const cuda_bwd_args *a) {
  const int64_t m = a->tile_m > 0 ? a->tile_m : 1;
  if (a->seqs && a->ix.cu_q) return (a->ix.total_q + m - 1) / m * m + ((int64_t)a->p.batch + 1) * m;
  return (a->p.seqlen_q + m - 1) / m * m;
}
FA_HOST_DEVICE int64_t cuda_bwd_split_rows(const cuda_bwd_args *a) {
  return (a->seqs && a->ix.cu_q ? 1 : (int64_t)a->p.batch) * a->p.heads_q * cuda_bwd_head_rows(a);
}

/* Bytes of device workspace the backward needs (D and the dQ accumulators). */
size_t cuda_bwd_workspace_bytes(const cuda_bwd_args *a);

/* The backward's steps around its main kernel, which fa3's backward shares: cuda_bwd_carve sets
   a->seqlen_q_padded (from a->tile_m) and points D, the log2 LSE, the dQ accumulator(s) and the
   tail's sums into the workspace (cuda_bwd_workspace_bytes of a); cuda_bwd_prologue clears the
   tail's sums and runs the preprocessing kernel (D, LSE; it clears the dQ accumulator(s) too);
   cuda_bwd_convert_dq_launch
   (fa2_launch.h) ends it. Each returns a cudaError_t value where it launches. */
void cuda_bwd_carve(cuda_bwd_args *a, void *workspace);
int cuda_bwd_prologue(const cuda_bwd_args *a);

/* The preprocessing kernel (D, the log2 LSE, the dQ accumulator and the work counters cleared)
   and the dQ conversion (common/bwd_aux.cu). */
int cuda_bwd_dot_do_o_launch(const cuda_bwd_args *a);
int cuda_bwd_convert_dq_launch(const cuda_bwd_args *a);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_ATTN_ARGS_H */
